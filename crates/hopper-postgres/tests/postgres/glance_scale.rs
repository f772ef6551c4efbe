//! The dashboard's calls at a million pending jobs, timed through the broker: exact queue
//! statistics against a glance bounded by `COUNT_BOUND`, and the queue names. Not run by
//! default (filling the table takes a few seconds; time it in release):
//! `cargo test --release -p hopper-postgres --test postgres -- --ignored --nocapture
//! at_a_million`.

use std::time::{Duration, Instant};

use hopper_core::Broker;
use hopper_core::admin::COUNT_BOUND;
use hopper_postgres::PgBroker;
use sqlx::{Connection, PgConnection};

use super::plans::DropSchema;
use super::support::{schema, url};

/// The median of nine runs of `call`, after one to warm up, and its last result.
async fn timed<T, F: Future<Output = T>>(mut call: impl FnMut() -> F) -> (Duration, T) {
    let mut out = call().await;
    let mut took = Vec::new();
    for _ in 0..9 {
        let started = Instant::now();
        out = call().await;
        took.push(started.elapsed());
    }
    took.sort();
    (took[took.len() / 2], out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fills a million jobs; run for the figures"]
async fn queue_statistics_at_a_million_pending_jobs() {
    let options = schema().await;
    let name = options.schema.clone();
    let _cleanup = DropSchema(name.clone());
    let mut conn = PgConnection::connect(&url()).await.unwrap();
    // A million due jobs over three priorities in `big`, 1,000 dead letters, and five
    // small queues of ten jobs each.
    sqlx::raw_sql(&format!(
        "INSERT INTO {name}.hopper_jobs (queue, priority, run_at, max_attempts, payload,
                                         created_at)
         SELECT 'big', i % 3 - 1, 1000000 + i, 25, 'payload of a job', 1
         FROM generate_series(1, 1000000) AS i;
         INSERT INTO {name}.hopper_jobs (queue, state, run_at, max_attempts, payload,
                                         created_at, last_error, finished_at)
         SELECT 'big', 3, 1000000, 25, 'x', 1, 'boom', 2000000 + i
         FROM generate_series(1, 1000) AS i;
         INSERT INTO {name}.hopper_jobs (queue, run_at, max_attempts, payload, created_at)
         SELECT 'small' || i % 5, 1000000 + i, 25, 'x', 1 FROM generate_series(1, 50) AS i"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let vacuum = format!("VACUUM (ANALYZE) {name}.hopper_jobs");
    sqlx::raw_sql(&vacuum).execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();

    let broker = PgBroker::connect_with(&url(), options.listen(false))
        .await
        .unwrap();
    let report = |what: &str, took: Duration| eprintln!("{what:<36} {took:>10.2?}");

    let (took, full) = timed(|| broker.queue_stats("big")).await;
    report("queue_stats(big)", took);
    let full = full.unwrap();
    assert_eq!((full.counts.pending, full.counts.dead), (1_000_000, 1000));
    assert_eq!(full.bound, None);

    let (took, glance) = timed(|| broker.queue_glance("big", COUNT_BOUND)).await;
    report("queue_glance(big, COUNT_BOUND)", took);
    let glance = glance.unwrap();
    assert_eq!(
        glance.counts.pending,
        COUNT_BOUND + 1,
        "more than the bound"
    );
    assert_eq!(glance.counts.dead, 1000, "under the bound, exact");
    assert_eq!(glance.bound, Some(COUNT_BOUND));
    // The lag grows with the clock between the two calls.
    assert!(glance.lag >= full.lag && !glance.paused, "{glance:?}");

    let (took, glance) = timed(|| broker.queue_glance("small1", COUNT_BOUND)).await;
    report("queue_glance(small1, COUNT_BOUND)", took);
    assert_eq!(glance.unwrap().counts.pending, 10);

    // A paused queue without jobs is listed too.
    assert!(broker.set_paused("idle", true).await.unwrap());
    let (took, names) = timed(|| broker.queues()).await;
    report("queues()", took);
    let names = names.unwrap();
    let listed = [
        "big", "idle", "small0", "small1", "small2", "small3", "small4",
    ];
    assert_eq!(names, listed);
}
