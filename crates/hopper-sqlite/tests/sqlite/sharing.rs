//! Two brokers, each with its own connection and thread, sharing one file.

use std::sync::Arc;

use hopper_core::{Broker, QueueCounts};
use hopper_sqlite::SqliteBroker;
use hopper_testkit::helpers::{assert_each_once, claim_concurrently, enqueue_n};

use super::support::TempDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_brokers_on_one_file_never_take_the_same_job() {
    let db = TempDb::new("shared");
    let one: Arc<dyn Broker> = Arc::new(SqliteBroker::open(db.path()).await.unwrap());
    let two: Arc<dyn Broker> = Arc::new(SqliteBroker::open(db.path()).await.unwrap());
    let mut made = Vec::with_capacity(2_000);
    for broker in [&one, &two, &one, &two] {
        made.extend(enqueue_n(broker, "q", 500).await);
    }
    let seen = claim_concurrently(&[one.clone(), two.clone()], "q", 8, 25).await;
    assert_each_once(&seen, &made);
    assert_eq!(two.counts("q").await.unwrap(), QueueCounts::default());
}
