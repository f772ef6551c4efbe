//! Commands that share a transaction: one failing is rolled back alone.

use std::time::Duration;

use hopper_core::{Broker, FetchRequest, NewJob, QueueCounts};
use hopper_sqlite::SqliteBroker;

use super::support::TempDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_command_is_rolled_back_alone() {
    let db = TempDb::new("group");
    let broker = SqliteBroker::open(db.path()).await.unwrap();
    let bad = broker.enqueue(vec![NewJob::new("bad", "x")]).await.unwrap()[0];
    // Headers that do not decode make the claim of this job fail after it updated the row.
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    raw.execute(
        "UPDATE hopper_jobs SET headers = 'not json' WHERE id = ?1",
        [bad.0],
    )
    .unwrap();
    drop(raw);

    let mut calls = Vec::new();
    for i in 0..50 {
        let broker = broker.clone();
        calls.push(tokio::spawn(async move {
            if i % 10 == 0 {
                let fetched = broker
                    .fetch(FetchRequest::one("bad", 1, Duration::from_secs(30)))
                    .await;
                assert!(fetched.unwrap_err().is_broker(), "the bad claim failed");
            } else {
                broker
                    .enqueue(vec![NewJob::new("good", "y")])
                    .await
                    .expect("an enqueue beside a failing claim");
            }
        }));
    }
    for call in calls {
        call.await.unwrap();
    }
    assert_eq!(
        broker.counts("bad").await.unwrap(),
        QueueCounts {
            pending: 1,
            ..QueueCounts::default()
        },
        "the failed claim left its job pending"
    );
    assert_eq!(broker.counts("good").await.unwrap().pending, 45);
}
