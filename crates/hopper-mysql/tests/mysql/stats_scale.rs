//! Queue statistics at a million pending jobs, timed through the broker: the exact counts
//! of `queue_stats` against the dashboard's bounded `queue_glance`, and `queues()` beside a
//! few small queues and paused ones. Not run by default (filling the table takes about
//! 20 s): `cargo test --release -p hopper-mysql --test mysql -- --ignored --nocapture
//! glance_at_a_million`.

use std::time::{Duration, Instant};

use hopper_core::Broker;
use hopper_core::admin::COUNT_BOUND;
use hopper_mysql::{MySqlBroker, MySqlOptions};
use sqlx::{Connection, MySqlConnection};

use super::support::TempDatabase;

const JOBS: i64 = 1_000_000;
const RUNS: usize = 9;

/// The median of [`RUNS`] runs of `call`, after one to warm up, and its last result.
async fn median<T, F: Future<Output = T>>(mut call: impl FnMut() -> F) -> (Duration, T) {
    let mut out = call().await;
    let mut took = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let started = Instant::now();
        out = call().await;
        took.push(started.elapsed());
    }
    took.sort();
    (took[RUNS / 2], out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fills a million jobs; run for the figures"]
async fn glance_at_a_million_pending_jobs() {
    let db = TempDatabase::migrated().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    // A million due jobs on three priority levels and 1,000 dead letters in `big`; five
    // small queues of ten jobs, pending or leased; two paused queues, one of them empty.
    sqlx::raw_sql(&format!(
        "SET SESSION max_recursive_iterations = {JOBS};
         INSERT INTO hopper_jobs (queue, state, priority, run_at, max_attempts, payload,
                                  created_at)
         WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {JOBS})
         SELECT 'big', 0, i % 3 - 1, 1000000 + i, 25, 'payload of a job', 1 FROM n;
         INSERT INTO hopper_jobs (queue, state, priority, run_at, max_attempts, payload,
                                  created_at, last_error, finished_at)
         WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
         SELECT 'big', 3, 0, 1000000, 25, 'x', 1, 'boom', 2000000 + i FROM n;
         INSERT INTO hopper_jobs (queue, state, priority, run_at, max_attempts, payload,
                                  created_at, lease_id, lease_expires)
         WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50)
         SELECT CONCAT('small', i % 5), i % 2, 0, 1000, 25, 'x', 1,
                IF(i % 2 = 1, i, NULL), IF(i % 2 = 1, 9000000000000, NULL) FROM n;
         INSERT INTO hopper_paused (queue, paused_at) VALUES ('small3', 1), ('idle', 1);
         ANALYZE TABLE hopper_jobs;"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let _ = conn.close().await;

    let broker = MySqlBroker::connect_with(&db.url, MySqlOptions::default().wake_poll(None))
        .await
        .unwrap();
    let report = |what: &str, took: Duration| eprintln!("{what:<48} {took:>10.2?}");

    let (took, stats) = median(|| broker.queue_stats("big")).await;
    let stats = stats.unwrap();
    assert_eq!(
        (stats.counts.pending, stats.counts.dead, stats.bound),
        (JOBS as u64, 1000, None)
    );
    report("queue_stats(big), counting 1,001,000 jobs", took);
    let (took, glance) = median(|| broker.queue_glance("big", COUNT_BOUND)).await;
    let glance = glance.unwrap();
    assert_eq!(
        (glance.counts.pending, glance.counts.dead, glance.bound),
        (COUNT_BOUND + 1, 1000, Some(COUNT_BOUND))
    );
    assert_eq!((glance.lag.is_some(), glance.paused), (true, false));
    report("queue_glance(big, 10,000)", took);
    let (took, small) = median(|| broker.queue_glance("small3", COUNT_BOUND)).await;
    let small = small.unwrap();
    assert_eq!(
        (small.counts.pending, small.counts.leased, small.paused),
        (5, 5, true)
    );
    report("queue_glance(small3, 10,000)", took);
    let (took, names) = median(|| broker.queues()).await;
    assert_eq!(
        names.unwrap(),
        [
            "big", "idle", "small0", "small1", "small2", "small3", "small4"
        ]
    );
    report("queues(), 7 queues", took);
    broker.close().await;
}
