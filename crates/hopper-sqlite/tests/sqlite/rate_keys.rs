//! Rate limits per key kept in the file: brokers on their own connections race on one
//! queue's key windows and claim no more than each key's limit between them; a file from
//! before them (schema version 11) keeps its limit and its jobs, and takes a limit per key.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, FetchRequest, NewJob, RateLimit};
use hopper_sqlite::SqliteBroker;
use hopper_testkit::helpers::race_on_rate_keys;

use super::support::{TempDb, file_at_version, file_version};

const HOUR: Duration = Duration::from_secs(3600);

fn per_key(max: u32) -> RateLimit {
    RateLimit::new(max, HOUR).unwrap().per_key()
}

/// Two brokers, each with its own connection and thread, race 8 claimers in batches of 7
/// on a queue of 3 keys with 40 jobs each and 20 without, limited to 5 an hour per key:
/// 20 are claimed between them, 5 of each key and 5 without, and the rest wait, moved to
/// their keys' next room an hour on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_brokers_claim_no_more_than_each_keys_limit_between_them() {
    let db = TempDb::new("rate_keys_shared");
    let one: Arc<dyn Broker> = Arc::new(SqliteBroker::open(db.path()).await.unwrap());
    let two: Arc<dyn Broker> = Arc::new(SqliteBroker::open(db.path()).await.unwrap());
    one.set_rate_limit("q", Some(per_key(5))).await.unwrap();
    race_on_rate_keys(&[two, one]).await;
}

/// A file at version 11 with a limited queue and a pending job: the upgrade keeps both (the
/// limit is for the queue, the job has no rate key), and the queue then takes a limit per
/// key.
#[tokio::test]
async fn a_file_from_before_rate_keys_keeps_its_limit_and_takes_one_per_key() {
    let db = TempDb::new("rate_keys_migrate");
    let raw = file_at_version(&db, 11);
    raw.execute_batch(
        "INSERT INTO hopper_rate_limits (queue, max, per_ms) VALUES ('q', 1, 3600000);
         INSERT INTO hopper_jobs (id, queue, state, priority, run_at, attempt, max_attempts,
                                  payload, created_at)
         VALUES (1, 'q', 0, 0, 1000, 0, 5, CAST('old' AS BLOB), 1000),
                (2, 'q', 0, 0, 1000, 0, 5, CAST('old' AS BLOB), 1000);",
    )
    .unwrap();
    drop(raw);
    let broker = SqliteBroker::open(db.path()).await.unwrap();
    assert_eq!(file_version(&db), 12);
    let limit = broker.queue_stats("q").await.unwrap().rate_limit;
    assert_eq!(
        limit,
        Some(RateLimit::new(1, HOUR).unwrap()),
        "kept, for the queue"
    );
    let got = broker
        .fetch(FetchRequest::one("q", 10, HOUR))
        .await
        .unwrap();
    assert_eq!(got.jobs.len(), 1, "one an hour, for the queue");

    broker.set_rate_limit("q", Some(per_key(1))).await.unwrap();
    let keyed = vec![
        NewJob::new("q", b"x".to_vec()).rate_key("x"),
        NewJob::new("q", b"y".to_vec()).rate_key("y"),
    ];
    broker.enqueue(keyed).await.unwrap();
    let got = broker
        .fetch(FetchRequest::one("q", 10, HOUR))
        .await
        .unwrap();
    assert_eq!(
        got.jobs.len(),
        3,
        "one per key: x, y, and the old job without a key"
    );
    let stats = broker.queue_stats("q").await.unwrap();
    assert_eq!(stats.rate_limit, Some(per_key(1)));
}
