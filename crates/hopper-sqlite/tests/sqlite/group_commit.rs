//! Commands that share a transaction: one failing is rolled back alone; and a thread that
//! sleeps between commands.

use std::time::Duration;

use hopper_core::{Broker, FetchRequest, NewJob, QueueCounts, Settlement};
use hopper_sqlite::{SqliteBroker, SqliteOptions};

use super::support::TempDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_command_is_rolled_back_alone() {
    let db = TempDb::new("group");
    let broker = SqliteBroker::open(db.path()).await.unwrap();
    let bad = broker
        .enqueue(vec![NewJob::new("bad", "x"), NewJob::new("bad", "z")])
        .await
        .unwrap();
    // A trigger refuses the claim of the second job, so a claim of both fails after it
    // updated the first row.
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    raw.execute_batch(&format!(
        "CREATE TRIGGER refuse_second BEFORE UPDATE ON hopper_jobs
         WHEN NEW.id = {} AND NEW.state = 1
         BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;",
        bad[1].0
    ))
    .unwrap();
    drop(raw);

    let mut calls = Vec::new();
    for i in 0..50 {
        let broker = broker.clone();
        calls.push(tokio::spawn(async move {
            if i % 10 == 0 {
                let fetched = broker
                    .fetch(FetchRequest::one("bad", 2, Duration::from_secs(30)))
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
            pending: 2,
            ..QueueCounts::default()
        },
        "the failed claim left both jobs pending"
    );
    assert_eq!(broker.counts("good").await.unwrap().pending, 45);
}

/// With `spin_wait` zero the thread sleeps between every two commands: each call, sent
/// together or one after another, still runs once and is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_that_never_spins_answers_every_call() {
    let db = TempDb::new("nospin");
    let options = SqliteOptions::default().spin_wait(Duration::ZERO);
    let broker = SqliteBroker::open_with(db.path(), options).await.unwrap();
    let mut calls = Vec::new();
    for i in 0..40 {
        let broker = broker.clone();
        calls.push(tokio::spawn(async move {
            broker
                .enqueue(vec![NewJob::new("q", format!("{i}"))])
                .await
                .unwrap()
        }));
    }
    for call in calls {
        call.await.unwrap();
    }
    // One after another: every fetch finds the thread asleep.
    let mut taken = 0;
    for _ in 0..15 {
        let fetched = broker
            .fetch(FetchRequest::one("q", 3, Duration::from_secs(30)))
            .await
            .unwrap();
        let settlements: Vec<Settlement> = fetched.jobs.iter().map(Settlement::ack).collect();
        taken += fetched.jobs.len();
        assert_eq!(
            broker.settle(settlements).await.unwrap().applied,
            fetched.jobs.len()
        );
    }
    assert_eq!(taken, 40);
    assert_eq!(broker.counts("q").await.unwrap(), QueueCounts::default());
}
