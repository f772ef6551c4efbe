//! Two brokers, each with its own connection and thread, sharing one file (and, in one
//! process, one wake signal).

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, JobContext, NewJob, QueueCounts, QueueOptions, Worker};
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

/// A job enqueued through one broker wakes an idle worker on another broker of the same
/// file in this process: they share one wake signal. The worker's poll is 60 s, so only
/// the signal can start the job within the 10 s allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_on_one_broker_wakes_a_worker_on_another_of_the_same_file() {
    let db = TempDb::new("wake");
    let producer = SqliteBroker::open(db.path()).await.unwrap();
    let consumer: Arc<dyn Broker> = Arc::new(SqliteBroker::open(db.path()).await.unwrap());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = Worker::builder(consumer)
        .poll_interval(Duration::from_secs(60))
        .queue(
            "q",
            QueueOptions::new().concurrency(1),
            move |job: JobContext<u32>| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(job.payload);
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
    for i in 0..3u32 {
        // Let the worker find the queue empty and go idle first.
        tokio::time::sleep(Duration::from_millis(100)).await;
        producer
            .enqueue(vec![NewJob::json("q", &i).unwrap()])
            .await
            .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("woken by the shared signal, not the 60 s poll");
        assert_eq!(got, Some(i));
    }
    assert_eq!(worker.shutdown().await.completed, 3);
}
