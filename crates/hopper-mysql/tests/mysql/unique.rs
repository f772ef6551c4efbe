//! Unique keys on the real server: jobs without keys never reach `hopper_unique` (a user
//! the server refuses it to still works them), keys compare byte for byte, a hold for a
//! period ends at `created_at` plus the period on the database clock, racing producers take
//! over lapsed keys once, heartbeats prune lapsed holds a window at a time, and the
//! statements on the table use its primary key.

use std::time::Duration;

use hopper_core::{
    Broker, Clock, Enqueued, FetchRequest, NewJob, Outcome, QueueBeat, Settlement, UniqueScope,
    WorkerBeat, WorkerInfo,
};
use hopper_mysql::{MySqlBroker, MySqlOptions};
use sqlx::{Connection, MySqlConnection, Row};

use super::support::{CountedUser, TempDatabase, broker_with};

const TTL: Duration = Duration::from_secs(30);

/// Everything a producer and a worker do with jobs that have no key (enqueues of one
/// statement and of a chunked transaction, claims with the reaper, every settlement,
/// cancels, purges) works for a user the server refuses `hopper_unique` (and
/// `hopper_ordering`) to: none of it touches the tables. An enqueue without keys is still its one `INSERT`, as the server
/// counts it. The first job with a key is refused, and leaves nothing stored.
#[tokio::test]
async fn jobs_without_keys_never_touch_the_unique_table() {
    let db = TempDatabase::migrated().await;
    let tables = [
        "hopper_migrations",
        "hopper_jobs",
        "hopper_paused",
        "hopper_rate_limits",
        "hopper_workers",
        "hopper_throughput",
    ];
    let user = CountedUser::with_tables(&db, &tables).await;
    let options = MySqlOptions::default().wake_poll(None).connections(1);
    let broker = MySqlBroker::connect_with(&user.url, options)
        .await
        .expect("connect as the user without hopper_unique");

    let few: Vec<NewJob> = (0..6).map(|i| NewJob::json("q", &i).unwrap()).collect();
    let before = user.statements().await;
    let ids = broker.enqueue(few).await.unwrap();
    // MariaDB counts a statement after its reply (see `idle`): real time, not tokio's.
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(user.statements().await - before, 1, "one INSERT");
    let many: Vec<NewJob> = (0..1500)
        .map(|i| NewJob::json("bulk", &i).unwrap())
        .collect();
    assert_eq!(broker.enqueue(many).await.unwrap().len(), 1500);
    let held = broker.fetch(FetchRequest::one("q", 5, TTL)).await.unwrap();
    assert_eq!(held.jobs.len(), 5);
    let later = Duration::from_secs(60);
    let outcomes = [
        Outcome::Ack,
        Outcome::Retry {
            delay: later,
            error: "again".into(),
            step_aside: false,
        },
        Outcome::Release,
        Outcome::Snooze { delay: later },
        Outcome::DeadLetter { error: "no".into() },
    ];
    let settlements = held
        .jobs
        .iter()
        .zip(outcomes)
        .map(|(job, outcome)| Settlement {
            job: job.id,
            lease: held.lease,
            outcome,
        })
        .collect();
    assert_eq!(broker.settle(settlements).await.unwrap().applied, 5);
    broker.cancel(ids[5]).await.unwrap();
    assert_eq!(broker.purge("bulk").await.unwrap(), 1500);

    let keyed = vec![
        NewJob::new("q", "plain"),
        NewJob::new("q", "keyed").unique_key("k"),
    ];
    let refused = broker.enqueue(keyed).await.unwrap_err().to_string();
    assert!(refused.contains("hopper_unique"), "{refused}");
    let c = broker.counts("q").await.unwrap();
    assert_eq!(
        c.pending + c.scheduled + c.leased,
        3,
        "the refused batch stored nothing: {c:?}"
    );
    broker.close().await;
}

/// Keys are bytes: case, trailing spaces and accents make other keys, and a key of 255
/// bytes is kept whole.
#[tokio::test]
async fn keys_compare_byte_for_byte() {
    let (broker, _url) = broker_with(|o| o.wake_poll(None)).await;
    let long = "é".repeat(127) + "x";
    assert_eq!(long.len(), 255);
    let keys = ["k", "k ", "K", "ké", "ke", long.as_str()];
    let batch = || {
        keys.iter()
            .map(|k| NewJob::new("q", *k).unique_key(*k))
            .collect::<Vec<_>>()
    };
    let first = broker.enqueue_reported(batch()).await.unwrap();
    assert!(first.iter().all(|e| !e.existing), "{first:?}");
    let again = broker.enqueue_reported(batch()).await.unwrap();
    let expected: Vec<Enqueued> = first.iter().map(|e| Enqueued::existing(e.id)).collect();
    assert_eq!(again, expected);
    assert_eq!(broker.counts("q").await.unwrap().pending, keys.len() as u64);
}

/// On the database clock, a hold for a period ends at the job's `created_at` plus the
/// period, exactly: one clock reading serves the whole enqueue.
#[tokio::test]
async fn a_period_runs_from_created_at_on_the_database_clock() {
    let (broker, url) = broker_with(|o| o.wake_poll(None)).await;
    let period = UniqueScope::For(Duration::from_millis(1500));
    let job = || vec![NewJob::new("q", "p").unique("p", period)];
    let first = broker.enqueue_reported(job()).await.unwrap()[0];
    assert!(!first.existing);
    let mut raw = MySqlConnection::connect(&url).await.unwrap();
    let span: i64 = sqlx::query_scalar(
        "SELECT u.until - j.created_at FROM hopper_unique AS u
         JOIN hopper_jobs AS j ON j.id = u.job_id",
    )
    .fetch_one(&mut raw)
    .await
    .unwrap();
    assert_eq!(span, 1500);
    let again = broker.enqueue_reported(job()).await.unwrap();
    assert_eq!(again, [Enqueued::existing(first.id)]);
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let later = broker.enqueue_reported(job()).await.unwrap()[0];
    assert!(!later.existing && later.id != first.id, "{later:?}");
    let _ = raw.close().await;
}

/// The suite's race of 8 producers over 100 keys, each key held by a job that completed:
/// every key is taken over exactly once, on the database clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_producers_take_over_each_lapsed_key_once() {
    let (broker, _url) = broker_with(|o| o.wake_poll(None)).await;
    let jobs = (0..100)
        .map(|k| NewJob::new("race", "old").unique_key(format!("k{k}")))
        .collect();
    broker.enqueue(jobs).await.unwrap();
    let held = broker
        .fetch(FetchRequest::one("race", 100, TTL))
        .await
        .unwrap();
    let acks = held
        .jobs
        .iter()
        .map(|job| Settlement {
            job: job.id,
            lease: held.lease,
            outcome: Outcome::Ack,
        })
        .collect();
    assert_eq!(broker.settle(acks).await.unwrap().applied, 100);
    hopper_testkit::cases::unique_keys_racing_producers(broker).await;
}

async fn holds_in(conn: &mut MySqlConnection, queue: &str) -> Vec<String> {
    let rows = sqlx::query("SELECT `key` FROM hopper_unique WHERE queue = ? ORDER BY `key`")
        .bind(queue)
        .fetch_all(conn)
        .await
        .unwrap();
    rows.iter()
        .map(|r| String::from_utf8(r.get::<Vec<u8>, _>(0)).unwrap())
        .collect()
}

/// Heartbeats delete lapsed holds, at most once a minute and a bounded walk at a time:
/// 10,500 holds of jobs long gone take two prunes, a minute apart. Holds that stand stay
/// (a pending job's, a period's whose job completed); the lapsed ones of a completed job
/// and of a queued-scope job a worker took go.
#[tokio::test(start_paused = true)]
async fn heartbeats_prune_lapsed_holds_a_window_at_a_time() {
    let (broker, url) = broker_with(|o| o.clock(Clock::tokio()).wake_poll(None)).await;
    let mut raw = MySqlConnection::connect(&url).await.unwrap();
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                  UNION ALL SELECT 8 UNION ALL SELECT 9)";
    sqlx::raw_sql(&format!(
        "INSERT INTO hopper_unique (queue, `key`, job_id, scope, until)
         SELECT 'old', CONCAT('k', LPAD(i, 5, '0')), 0, 1, NULL
         FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS i
               FROM {digits} AS a, {digits} AS b, {digits} AS c, {digits} AS e,
                    {digits} AS f) AS n
         WHERE i < 10500"
    ))
    .execute(&mut raw)
    .await
    .unwrap();

    let keyed = |key: &str, scope| vec![NewJob::new("q", key.to_owned()).unique(key, scope)];
    let hour = UniqueScope::For(Duration::from_secs(3600));
    let done = broker
        .enqueue(keyed("done", UniqueScope::Unfinished))
        .await
        .unwrap()[0];
    let period = broker.enqueue(keyed("period", hour)).await.unwrap()[0];
    broker
        .enqueue(keyed("taken", UniqueScope::Queued))
        .await
        .unwrap();
    let held = broker.fetch(FetchRequest::one("q", 3, TTL)).await.unwrap();
    assert_eq!(held.jobs.len(), 3);
    let ack = |job| Settlement {
        job,
        lease: held.lease,
        outcome: Outcome::Ack,
    };
    broker.settle(vec![ack(done), ack(period)]).await.unwrap();
    let waiting = broker
        .enqueue(keyed("waiting", UniqueScope::Unfinished))
        .await
        .unwrap()[0];

    let worker = WorkerInfo::this_process(
        0,
        vec![QueueBeat {
            queue: "q".into(),
            concurrency: 1,
            ..QueueBeat::default()
        }],
    );
    let beat = WorkerBeat {
        worker,
        ttl: TTL,
        settled: Vec::new(),
    };
    broker.heartbeat(&beat).await.unwrap();
    assert_eq!(holds_in(&mut raw, "old").await.len(), 500, "ten windows");
    assert_eq!(holds_in(&mut raw, "q").await.len(), 4, "not reached yet");
    broker.heartbeat(&beat).await.unwrap();
    assert_eq!(holds_in(&mut raw, "old").await.len(), 500, "once a minute");

    tokio::time::advance(Duration::from_secs(60)).await;
    broker.heartbeat(&beat).await.unwrap();
    assert!(holds_in(&mut raw, "old").await.is_empty());
    assert_eq!(holds_in(&mut raw, "q").await, ["period", "waiting"]);
    let again = broker
        .enqueue_reported(keyed("waiting", UniqueScope::Unfinished))
        .await;
    assert_eq!(again.unwrap(), [Enqueued::existing(waiting)]);
    let again = broker.enqueue_reported(keyed("period", hour)).await;
    assert_eq!(again.unwrap(), [Enqueued::existing(period)]);
    let _ = raw.close().await;
}

/// The statements on `hopper_unique` read ranges of its primary key, and the holders'
/// rows by theirs, among a few thousand holds. Lists of one key are sent padded to two,
/// as here: a one-tuple list bounds no range in MariaDB's `DELETE`.
#[tokio::test]
async fn unique_statements_use_the_primary_key() {
    let db = TempDatabase::migrated().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                  UNION ALL SELECT 8 UNION ALL SELECT 9)";
    sqlx::raw_sql(&format!(
        "INSERT INTO hopper_unique (queue, `key`, job_id, scope, until)
         SELECT ELT(1 + i % 3, 'a', 'b', 'c'), CONCAT('k', i), i, i % 3, NULL
         FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d AS i
               FROM {digits} AS a, {digits} AS b, {digits} AS c, {digits} AS e
               WHERE e.d < 3) AS n;
         ANALYZE TABLE hopper_unique"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let file =
        |text: &str| super::plans::statement(text).replace("{triples}", "(?, ?, ?), (?, ?, ?)");
    let checks = [
        (
            file(include_str!("../../sql/unique_holders.sql")),
            vec!["a", "k3", "a", "k3"],
        ),
        (
            file(include_str!("../../sql/unique_window.sql")),
            vec!["a", "a", "k5", "1000"],
        ),
        (
            file(include_str!("../../sql/unique_expire.sql")),
            vec!["a", "k3", "3", "a", "k3", "3"],
        ),
    ];
    for (sql, binds) in checks {
        let explain = format!("EXPLAIN {sql}");
        let mut query = sqlx::query(&explain);
        for b in binds {
            query = match b.parse::<i64>() {
                Ok(n) => query.bind(n),
                Err(_) => query.bind(b),
            };
        }
        let rows = query.fetch_all(&mut conn).await.unwrap();
        let steps: Vec<(String, String, String)> = rows
            .iter()
            .map(|r| {
                let get = |c: &str| {
                    r.try_get::<Option<String>, _>(c)
                        .unwrap()
                        .unwrap_or_default()
                };
                (get("table"), get("type"), get("key"))
            })
            .collect();
        // `const` where the optimiser saw the two keys are one.
        let (_, kind, key) = &steps[0];
        assert!(
            ["range", "const"].contains(&kind.as_str()) && key == "PRIMARY",
            "{sql}: {steps:?}"
        );
        for (table, kind, key) in &steps[1..] {
            assert!(
                table == "j" && ["eq_ref", "const"].contains(&kind.as_str()) && key == "PRIMARY",
                "{sql}: {steps:?}"
            );
        }
    }
    conn.close().await.unwrap();
}
