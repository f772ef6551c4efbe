//! Query plans on the real server: claims walk the ready index in fetch order without a
//! sort, and the other hot statements use their indexes.

use sqlx::{Connection, MySqlConnection, Row};

use super::support::TempDatabase;

/// What the broker sends for a file of `sql/` (comments dropped, `{now}` expanded).
pub(super) fn statement(file: &str) -> String {
    file.lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace(
            "{now}",
            "CAST(ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED)",
        )
        .replace("{ids}", "?, ?, ?, ?")
        .replace("{pairs}", "(?, ?), (?, ?)")
        .replace(
            "{error_history}",
            &hopper_core::admin::ERROR_HISTORY.to_string(),
        )
        .replace("{blocked}", &hopper_core::job::BLOCKED.to_string())
        .replace("{max_run_at}", &hopper_core::job::MAX_RUN_AT.to_string())
}

/// A parameter of a statement whose plan is read.
#[derive(Debug, Clone, Copy)]
pub(super) enum Arg {
    /// The queue named in the call.
    Q,
    /// A number, or NULL.
    I(Option<i64>),
}

pub(super) use Arg::{I, Q};

/// One step of a query plan, as `EXPLAIN` shows it.
#[derive(Debug)]
pub(super) struct Step {
    /// `SIMPLE`, `PRIMARY`, `SUBQUERY` (the pause lookup of a claim), ….
    pub(super) select_type: String,
    /// The access type: `ref`, `range`, ….
    pub(super) kind: String,
    pub(super) key: String,
    /// How many bytes of the key bound the scan.
    pub(super) key_len: u32,
    pub(super) extra: String,
}

/// The steps of the plan of `sql` run with `binds`, where [`Q`] is `queue`.
pub(super) async fn plan(
    conn: &mut MySqlConnection,
    sql: &str,
    binds: &[Arg],
    queue: &str,
) -> Vec<Step> {
    let text = format!("EXPLAIN {sql}");
    let mut query = sqlx::query(&text);
    for b in binds {
        query = match b {
            Q => query.bind(queue.to_owned()),
            I(n) => query.bind(*n),
        };
    }
    let rows = query
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN {sql}: {e}"));
    rows.iter()
        .map(|r| {
            let get = |name: &str| {
                r.try_get::<Option<String>, _>(name)
                    .unwrap()
                    .unwrap_or_default()
            };
            Step {
                select_type: get("select_type"),
                kind: get("type"),
                key: get("key"),
                key_len: get("key_len").parse().unwrap_or(0),
                extra: get("Extra"),
            }
        })
        .collect()
}

#[tokio::test]
async fn hot_statements_use_their_indexes_and_claims_never_sort() {
    let db = TempDatabase::migrated().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    // A few thousand jobs across queues, priorities, states and times, so that plans are
    // chosen on data rather than on an empty table.
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                  UNION ALL SELECT 8 UNION ALL SELECT 9)";
    let fill = format!(
        "INSERT INTO hopper_jobs (queue, state, priority, run_at, max_attempts, payload, \
                                  created_at, lease_id, lease_expires)
         SELECT ELT(1 + i % 3, 'a', 'b', 'c'), IF(i % 5 = 0, 1, 0), i % 4 - 1,
                1000000 + (i * 7919) % 100000, 25, 'x', 1000000,
                IF(i % 5 = 0, i, NULL), IF(i % 5 = 0, 2000000 + i, NULL)
         FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * (e.d % 5) AS i
               FROM {digits} AS a, {digits} AS b, {digits} AS c, {digits} AS e
               WHERE e.d < 5) AS n"
    );
    sqlx::raw_sql(&fill).execute(&mut conn).await.unwrap();
    sqlx::raw_sql("ANALYZE TABLE hopper_jobs")
        .execute(&mut conn)
        .await
        .unwrap();

    let now = Some(1_050_000);
    let claim = statement(include_str!("../../sql/claim.sql"));
    let claim2 = format!("{claim} UNION ALL {claim}");
    let explain = format!("EXPLAIN {claim2}");
    let mut query = sqlx::query(&explain);
    for q in ["a", "b"] {
        query = query.bind(q).bind(q).bind(now).bind(q).bind(10i64);
    }
    for row in query.fetch_all(&mut conn).await.unwrap() {
        let key: Option<String> = row.try_get("key").unwrap();
        let extra: Option<String> = row.try_get("Extra").unwrap();
        let select_type: String = row.try_get("select_type").unwrap();
        if select_type == "SUBQUERY" {
            // The pause and limit lookups, read once as constants: no row, so the queue is
            // neither paused nor limited.
            assert_eq!(
                extra.as_deref(),
                Some("no matching row in const table"),
                "claim's pause and limit lookups"
            );
            continue;
        }
        assert_eq!(
            key.as_deref(),
            Some("hopper_jobs_ready"),
            "claim: {extra:?}"
        );
        assert!(
            !extra.unwrap_or_default().contains("filesort"),
            "a claim sorts"
        );
    }

    let ints = |binds: &[Option<i64>]| binds.iter().map(|&b| I(b)).collect::<Vec<_>>();
    let checks: [(&str, Vec<Arg>, &str); 7] = [
        (
            include_str!("../../sql/next_due.sql"),
            vec![Q, I(now)],
            "hopper_jobs_due",
        ),
        (
            include_str!("../../sql/probe_queue.sql"),
            vec![Q, Q],
            "hopper_jobs_due",
        ),
        (
            include_str!("../../sql/reap_expired.sql"),
            ints(&[now]),
            "hopper_jobs_lease_expires",
        ),
        (
            include_str!("../../sql/reap.sql"),
            ints(&[now, now, Some(1), Some(2), Some(3), Some(0)]),
            "PRIMARY",
        ),
        (
            include_str!("../../sql/renew.sql"),
            ints(&[now, Some(30_000), Some(5), Some(10), Some(15), Some(0), now]),
            "hopper_jobs_lease",
        ),
        (
            include_str!("../../sql/lease_claimed.sql"),
            ints(&[
                Some(7),
                now,
                Some(30_000),
                now,
                Some(1),
                Some(2),
                Some(3),
                Some(0),
            ]),
            "PRIMARY",
        ),
        (
            include_str!("../../sql/settle_lock.sql"),
            ints(&[Some(1), Some(2), Some(3), Some(0)]),
            "PRIMARY",
        ),
    ];
    for (file, binds, index) in checks {
        let sql = statement(file);
        let steps = plan(&mut conn, &sql, &binds, "a").await;
        let used = steps.iter().any(|s| {
            s.key == index || (index == "hopper_jobs_due" && s.extra.contains("optimized away"))
        });
        assert!(used, "{sql}\nplan: {steps:?}\nexpected {index}");
        assert!(
            steps.iter().all(|s| !s.extra.contains("filesort")),
            "{sql}: {steps:?}"
        );
    }
    conn.close().await.unwrap();
}

/// Among 20,000 jobs delayed into the future, a claim over the whole queue can bound its
/// index scan by the queue only (key `(state, queue)`), so one that cannot fill its limit
/// reads every delayed job; level by level, the scan is bounded by priority and `run_at`
/// too, and each level is found by one dive. The timings printed are the statements run
/// as the broker runs them (prepared); on the fourth session's host, 4.4–6.6 ms against
/// 1.1–1.5 ms, the lookup of the levels included.
#[tokio::test]
async fn short_claims_by_level_never_walk_delayed_jobs() {
    let db = TempDatabase::migrated().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql(
        "SET SESSION max_recursive_iterations = 100000;
         INSERT INTO hopper_jobs (queue, state, priority, run_at, max_attempts, payload,
                                  created_at)
         WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
         SELECT 'q', 0, IF(i % 2 = 0, 5, 0), 9000000000000 + i, 25, 'x', 1 FROM n;
         INSERT INTO hopper_jobs (queue, state, priority, run_at, max_attempts, payload,
                                  created_at)
         VALUES ('q', 0, 5, 1000, 25, 'x', 1), ('q', 0, 0, 1000, 25, 'x', 1);
         ANALYZE TABLE hopper_jobs;",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let now = 2000i64;

    let whole = statement(include_str!("../../sql/claim.sql"));
    let by_levels =
        statement(include_str!("../../sql/claim_levels.sql")).replace("{levels}", "?, ?");
    let below = statement(include_str!("../../sql/level_below.sql"));

    let one = |mut steps: Vec<Step>| {
        steps.retain(|s| s.select_type != "SUBQUERY");
        assert_eq!(steps.len(), 1, "{steps:?}");
        steps.remove(0)
    };
    let whole_plan = one(plan(
        &mut conn,
        &whole,
        &[Q, Q, I(Some(now)), Q, I(Some(10))],
        "q",
    )
    .await);
    assert_eq!(whole_plan.kind, "ref", "the whole queue: {whole_plan:?}");
    let binds = [Q, Q, I(Some(5)), I(Some(0)), I(Some(now)), Q, I(Some(10))];
    let level_plan = one(plan(&mut conn, &by_levels, &binds, "q").await);
    assert_eq!(level_plan.kind, "range", "level by level: {level_plan:?}");
    assert!(
        level_plan.key_len > whole_plan.key_len,
        "level by level bounds the scan by more key parts: {level_plan:?} against \
         {whole_plan:?}"
    );
    assert!(!level_plan.extra.contains("filesort"), "{level_plan:?}");
    let below_plan = one(plan(&mut conn, &below, &[Q, I(Some(i64::MAX))], "q").await);
    assert_eq!(
        below_plan.kind, "range",
        "a level below a bound: {below_plan:?}"
    );
    assert!(!below_plan.extra.contains("filesort"), "{below_plan:?}");

    let started = std::time::Instant::now();
    let all = sqlx::query(&whole)
        .bind("q")
        .bind("q")
        .bind(now)
        .bind("q")
        .bind(10i64)
        .fetch_all(&mut conn)
        .await
        .unwrap();
    let whole_took = started.elapsed();
    let started = std::time::Instant::now();
    let mut levels = Vec::new();
    let mut bound = i64::MAX;
    while let Some(level) = sqlx::query_scalar::<_, i32>(&below)
        .bind("q")
        .bind(bound)
        .fetch_optional(&mut conn)
        .await
        .unwrap()
    {
        levels.push(level);
        bound = i64::from(level);
    }
    let some = sqlx::query(&by_levels)
        .bind("q")
        .bind("q")
        .bind(levels[0])
        .bind(levels[1])
        .bind(now)
        .bind("q")
        .bind(10i64)
        .fetch_all(&mut conn)
        .await
        .unwrap();
    let levels_took = started.elapsed();
    assert_eq!(levels, [5, 0]);
    let ids =
        |rows: &[sqlx::mysql::MySqlRow]| -> Vec<i64> { rows.iter().map(|r| r.get(0)).collect() };
    assert_eq!(
        ids(&some),
        ids(&all),
        "the same two due jobs, in the same order"
    );
    assert_eq!(all.len(), 2);
    eprintln!(
        "short claim among 20,000 delayed jobs: whole queue {whole_took:?}, by level {levels_took:?}"
    );
    conn.close().await.unwrap();
}
