//! Ordering keys' schema on the real server: a database of the previous version brought
//! up to date, the query plans of the statements ordering keys add, and the rows the read
//! of a key's next job walks, with and without jobs stepped aside.

use std::sync::Arc;

use hopper_core::job::{BLOCKED, MAX_RUN_AT, MIN_RUN_AT};
use hopper_core::{Broker, JobId, NewJob, Selection, Settlement};
use hopper_mysql::{MySqlBroker, MySqlOptions};
use hopper_testkit::helpers::{TTL, enqueue, fetch, ids};
use sqlx::{Connection, MySqlConnection, Row};

use super::migrations::database_at;
use super::support::TempDatabase;

fn keyed(queue: &str, key: &str, name: &str) -> NewJob {
    NewJob::new(queue, name.as_bytes().to_vec()).ordering_key(key)
}

fn acks(held: &hopper_core::Fetched) -> Vec<Settlement> {
    held.jobs.iter().map(Settlement::ack).collect()
}

/// A database at version 7, as the previous release left it, holding jobs in each state:
/// migrating adds the column of ordering keys and its index, the table of key rows, and
/// the range check that admits a waiting job's time (and only that). The jobs read as
/// before, without a key and not waiting, and are worked and re-driven as before beside
/// new jobs with keys. A run that stopped before recording version 8 (and 9) finds the
/// column there and counts it as applied.
#[tokio::test]
async fn a_database_of_the_previous_version_gains_ordering_keys() {
    let db = TempDatabase::empty().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    database_at(&mut conn, 7).await;
    sqlx::raw_sql(
        "INSERT INTO hopper_jobs (id, queue, state, run_at, attempt, max_attempts, payload,
                                  created_at, lease_id, lease_expires, last_error,
                                  finished_at, unique_key)
         VALUES (1, 'q', 0, 0, 0, 5, 'pending', 0, NULL, NULL, NULL, NULL, 'u'),
                (2, 'q', 1, 0, 1, 5, 'leased', 0, 7, 9000000000000, NULL, NULL, NULL),
                (3, 'q', 3, 0, 5, 5, 'dead', 0, NULL, NULL, 'boom', 5, NULL)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let stored_at = |run_at: i64| {
        format!(
            "INSERT INTO hopper_jobs (queue, run_at, max_attempts, payload, created_at)
             VALUES ('r', {run_at}, 1, 'x', 0)"
        )
    };
    let waiting = BLOCKED + 1_000;
    let refused = sqlx::raw_sql(&stored_at(waiting)).execute(&mut conn).await;
    assert!(
        refused.is_err(),
        "a waiting job's time, before the migration"
    );
    let err = MySqlBroker::connect(&db.url).await.unwrap_err().to_string();
    assert!(
        err.contains("at version 7 but this build needs 11"),
        "{err}"
    );
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 4);

    for (run_at, kept) in [
        (MIN_RUN_AT + BLOCKED, true),
        (MAX_RUN_AT + BLOCKED, true),
        (MIN_RUN_AT + BLOCKED - 1, false),
        (MAX_RUN_AT + BLOCKED + 1, false),
        (MAX_RUN_AT + 1, false),
        (MIN_RUN_AT - 1, false),
    ] {
        let stored = sqlx::raw_sql(&stored_at(run_at)).execute(&mut conn).await;
        assert_eq!(stored.is_ok(), kept, "run_at {run_at}: {stored:?}");
    }
    sqlx::raw_sql("DELETE FROM hopper_jobs WHERE queue = 'r'")
        .execute(&mut conn)
        .await
        .unwrap();

    let connect = || MySqlBroker::connect_with(&db.url, MySqlOptions::default().wake_poll(None));
    let broker: Arc<dyn Broker> = Arc::new(connect().await.unwrap());
    for id in 1..=3 {
        let rec = broker.job(JobId(id)).await.unwrap().unwrap();
        assert_eq!(
            (rec.ordering_key, rec.blocked, rec.job.run_at),
            (None, false, 0)
        );
    }
    let old = broker.job(JobId(1)).await.unwrap().unwrap();
    assert_eq!(old.unique_key.as_deref(), Some("u"));
    let new = enqueue(&broker, vec![keyed("q", "k", "k1"), keyed("q", "k", "k2")]).await;
    let held = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(ids(&held.jobs), [JobId(1), new[0]]);
    broker.settle(acks(&held)).await.unwrap();
    let selection = Selection::Jobs(vec![JobId(3)]);
    assert_eq!(broker.retry_dead(&selection).await.unwrap(), 1);
    let held = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        ids(&held.jobs),
        [new[1], JobId(3)],
        "k2 due before the re-drive"
    );

    sqlx::raw_sql("DELETE FROM hopper_migrations WHERE version >= 8")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 4);
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 0);
    let _ = conn.close().await;
}

/// The table, access type and key of each step of an [`explain`].
fn plan_of(steps: &[(String, String, String, String)]) -> Vec<(&str, &str, &str)> {
    steps
        .iter()
        .map(|s| (s.0.as_str(), s.1.as_str(), s.2.as_str()))
        .collect()
}

/// `EXPLAIN` of `sql` with `binds` (numbers bound as numbers): each step's table, access
/// type, key and extra.
async fn explain(
    conn: &mut MySqlConnection,
    sql: &str,
    binds: &[&str],
) -> Vec<(String, String, String, String)> {
    let text = format!("EXPLAIN {sql}");
    let mut query = sqlx::query(&text);
    for b in binds {
        query = match b.parse::<i64>() {
            Ok(n) => query.bind(n),
            Err(_) => query.bind(*b),
        };
    }
    let rows = query
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN {sql}: {e}"));
    rows.iter()
        .map(|r| {
            let get = |c: &str| {
                r.try_get::<Option<String>, _>(c)
                    .unwrap()
                    .unwrap_or_default()
            };
            (get("table"), get("type"), get("key"), get("Extra"))
        })
        .collect()
}

/// Among 20,000 jobs, a fifth of them with keys and a seventh of those finished, and 4,000
/// key rows: each key's head is one dive into `hopper_jobs_ordering` in id order (no sort),
/// the pruning walk reads a range of key rows and dives into that index per key, and
/// unblocking, locking a job to cancel it and reading the dead letters with keys go by
/// primary key (a queue's oldest dead letters by their own index).
#[tokio::test]
async fn ordering_statements_use_their_indexes() {
    let db = TempDatabase::migrated().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql(
        "SET SESSION max_recursive_iterations = 100000;
         INSERT INTO hopper_jobs (queue, state, run_at, max_attempts, payload, created_at,
                                  ordering_key, finished_at)
         WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
         SELECT ELT(1 + i % 3, 'a', 'b', 'c'), IF(i % 7 = 0, 3, 0), 1000 + i, 5, 'x', 1,
                IF(i % 5 = 0, CONCAT('k', i % 4000), NULL), IF(i % 7 = 0, 5, NULL)
         FROM n;
         INSERT IGNORE INTO hopper_ordering (queue, `key`)
         SELECT queue, ordering_key FROM hopper_jobs WHERE ordering_key IS NOT NULL;
         ANALYZE TABLE hopper_jobs, hopper_ordering;",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let file =
        |text: &str| super::plans::statement(text).replace("{blocked}", &BLOCKED.to_string());
    // Each key's row by its primary key, its head by one dive in id order, then the head's
    // row by its id.
    let heads = file(include_str!("../../sql/ordering_heads.sql"));
    let steps = explain(&mut conn, &heads, &["a", "k15", "b", "k20"]).await;
    let plan = plan_of(&steps);
    assert_eq!(
        plan,
        [
            ("o", "range", "PRIMARY"),
            ("j", "eq_ref", "PRIMARY"),
            ("h", "ref", "hopper_jobs_ordering")
        ],
        "{steps:?}"
    );
    assert!(steps.iter().all(|s| !s.3.contains("filesort")), "{steps:?}");
    let window = file(include_str!("../../sql/ordering_window.sql"));
    let steps = explain(&mut conn, &window, &["a", "a", "k1", "1000"]).await;
    assert_eq!(
        (steps[0].0.as_str(), steps[0].2.as_str()),
        ("o", "PRIMARY"),
        "{steps:?}"
    );
    assert!(!steps[0].3.contains("filesort"), "{steps:?}");
    assert_eq!(
        (steps[1].0.as_str(), steps[1].2.as_str()),
        ("j", "hopper_jobs_ordering")
    );
    let forget = file(include_str!("../../sql/ordering_forget.sql"));
    let steps = explain(&mut conn, &forget, &["a", "k3", "a", "k6"]).await;
    assert_eq!(
        (steps[0].1.as_str(), steps[0].2.as_str()),
        ("range", "PRIMARY"),
        "{steps:?}"
    );
    assert_eq!(steps[1].2, "hopper_jobs_ordering", "{steps:?}");
    // The next job: the same dive, passing over jobs stepped aside, then the sort by time
    // for keys whose jobs all stepped aside (the only sort).
    let next = file(include_str!("../../sql/ordering_next.sql"));
    let steps = explain(&mut conn, &next, &["0", "a", "k15", "b", "k20"]).await;
    let plan = plan_of(&steps);
    assert_eq!(
        plan,
        [
            ("o", "range", "PRIMARY"),
            ("j", "eq_ref", "PRIMARY"),
            ("h", "ref", "hopper_jobs_ordering"),
            ("h", "ref", "hopper_jobs_ordering")
        ],
        "{steps:?}"
    );
    let sorts = steps.iter().filter(|s| s.3.contains("filesort")).count();
    assert_eq!(sorts, 1, "{steps:?}");
    // Stepping aside: the jobs by id, each key's first two unfinished jobs by one dive.
    let aside = file(include_str!("../../sql/ordering_aside.sql"));
    let steps = explain(&mut conn, &aside, &["1", "2", "3", "0"]).await;
    assert_eq!(
        (steps[0].0.as_str(), steps[0].2.as_str()),
        ("j", "PRIMARY"),
        "{steps:?}"
    );
    assert_eq!(
        (steps[1].0.as_str(), steps[1].2.as_str()),
        ("h", "hopper_jobs_ordering"),
        "{steps:?}"
    );
    for (sql, binds) in [
        (
            include_str!("../../sql/ordering_unblock.sql"),
            vec!["1", "2", "3", "0"],
        ),
        (
            include_str!("../../sql/ordering_block.sql"),
            vec!["1", "2", "3", "0"],
        ),
        (
            include_str!("../../sql/ordering_dead.sql"),
            vec!["7", "14", "21", "0"],
        ),
        (include_str!("../../sql/job_lock.sql"), vec!["5"]),
    ] {
        let steps = explain(&mut conn, &file(sql), &binds).await;
        assert!(
            ["range", "const"].contains(&steps[0].1.as_str()) && steps[0].2 == "PRIMARY",
            "{sql}: {steps:?}"
        );
    }
    let oldest = file(include_str!("../../sql/ordering_dead_queue.sql"));
    let steps = explain(&mut conn, &oldest, &["a", "10"]).await;
    assert!(
        steps.iter().any(|s| s.2 == "hopper_jobs_finished"),
        "{steps:?}"
    );
    let _ = conn.close().await;
}

/// The rows this session's statements read in index order so far.
async fn read_next(conn: &mut MySqlConnection) -> i64 {
    let row = sqlx::query("SHOW SESSION STATUS LIKE 'Handler_read_next'")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    row.try_get::<String, _>(1).unwrap().parse().unwrap()
}

/// The read of a key's next job on a key of 1,000 waiting jobs: with none stepped aside it
/// is the first job, read in one dive (the sort by time is never run); each job stepped
/// aside whose time has not come costs one row more; a job stepped aside whose time has
/// come goes first; and when every job stepped aside and waits, the one due first goes,
/// by the sort.
#[tokio::test]
async fn the_next_job_of_a_key_reads_one_row_more_per_job_stepped_aside() {
    let db = TempDatabase::migrated().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql(&format!(
        "SET SESSION max_recursive_iterations = 100000;
         INSERT INTO hopper_jobs (id, queue, state, run_at, max_attempts, payload, created_at,
                                  ordering_key)
         WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
         SELECT i, 'q', 0, {BLOCKED} + 1000 + i, 5, 'x', 1, 'k' FROM n;
         INSERT INTO hopper_ordering (queue, `key`) VALUES ('q', 'k');
         ANALYZE TABLE hopper_jobs;"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let text = super::plans::statement(include_str!("../../sql/ordering_next.sql"));
    let now = 5_000;
    let next = async |conn: &mut MySqlConnection| {
        let before = read_next(conn).await;
        let row = sqlx::query(&text)
            .bind(now)
            .bind("q")
            .bind(b"k".as_slice())
            .bind("q")
            .bind(b"k".as_slice())
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        (row.get::<i64, _>(0), read_next(conn).await - before)
    };
    assert_eq!(next(&mut conn).await, (1, 0), "the first job, in one dive");
    // Jobs 1 to 3 stepped aside until 9,000, past now.
    let step_aside = |ids: &str, at: i64| {
        format!("UPDATE hopper_jobs SET attempt = 1, run_at = {BLOCKED} + {at} WHERE id IN ({ids})")
    };
    sqlx::raw_sql(&step_aside("1, 2, 3", 9_000))
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(next(&mut conn).await, (4, 3), "three passed over");
    sqlx::raw_sql(&step_aside("2", now))
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(next(&mut conn).await, (2, 1), "2's time has come");
    sqlx::raw_sql(&format!(
        "UPDATE hopper_jobs SET attempt = 1, run_at = {BLOCKED} + 20000 - id"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let (id, _) = next(&mut conn).await;
    assert_eq!(id, 1000, "every job waits: the one due first");
    let _ = conn.close().await;
}
