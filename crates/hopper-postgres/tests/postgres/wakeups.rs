//! LISTEN/NOTIFY: an idle worker finds a job enqueued, re-driven or resumed by another
//! process within a round trip, not a poll tick.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hopper_core::{
    Broker, FetchRequest, JobContext, NewJob, Outcome, QueueOptions, Selection, Settlement, Worker,
};
use tokio::sync::mpsc;

use super::support::{broker_with, url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_wakes_on_notify_from_another_connection() {
    let (broker, pg) = broker_with(|o| o).await;
    // A second broker on the same schema stands for another process.
    let producer = hopper_postgres::PgBroker::connect_with(
        &url(),
        hopper_postgres::PgOptions::default()
            .schema(pg.schema())
            .listen(false),
    )
    .await
    .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let worker = Worker::builder(broker.clone())
        .poll_interval(Duration::from_secs(60))
        .queue(
            "q",
            QueueOptions::new().concurrency(1),
            move |job: JobContext<u64>| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send((job.payload, Instant::now()));
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
    // Let the worker go idle: its first fetch finds nothing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut waits = Vec::new();
    for i in 0..20u64 {
        producer
            .enqueue(vec![NewJob::json("q", &i).unwrap()])
            .await
            .unwrap();
        // Measured from the commit: the enqueue's own fsync is the producer's cost.
        let sent = Instant::now();
        let (got, started) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("woken well before the 60 s poll")
            .unwrap();
        assert_eq!(got, i);
        waits.push(started - sent);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stats = worker.shutdown().await;
    assert_eq!(stats.completed, 20);
    // No assertion on speed (that is the benchmark's), only that no wake waited for a poll.
    waits.sort();
    eprintln!(
        "commit-to-start of an idle worker woken by NOTIFY: p50 {:?}, max {:?}",
        waits[waits.len() / 2],
        waits[waits.len() - 1]
    );
    assert!(
        waits.iter().all(|w| *w < Duration::from_secs(10)),
        "{waits:?}"
    );
    producer.close().await;
    drop(Arc::clone(&broker));
}

/// Re-driven dead letters and a resumed queue wake the workers of every process, as an
/// enqueue does: another broker's wake signal changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_drive_or_a_resume_by_another_process_wakes_idle_workers() {
    let (broker, pg) = broker_with(|o| o).await;
    let operator = hopper_postgres::PgBroker::connect_with(
        &url(),
        hopper_postgres::PgOptions::default()
            .schema(pg.schema())
            .listen(false),
    )
    .await
    .unwrap();
    let id = broker
        .enqueue(vec![NewJob::json("q", &1).unwrap().max_attempts(1)])
        .await
        .unwrap()[0];
    let held = broker
        .fetch(FetchRequest::one("q", 1, Duration::from_secs(30)))
        .await
        .unwrap();
    let dead = Outcome::DeadLetter {
        error: "boom".into(),
    };
    broker
        .settle(vec![Settlement {
            job: id,
            lease: held.lease,
            outcome: dead,
        }])
        .await
        .unwrap();
    let mut wake = broker.wake_signal().expect("a wake signal");
    // Past the listener's own wake-ups: connecting, and the enqueue above.
    tokio::time::sleep(Duration::from_millis(300)).await;
    wake.borrow_and_update();

    let retried = operator.retry_dead(&Selection::Jobs(vec![id])).await;
    assert_eq!(retried.unwrap(), 1);
    tokio::time::timeout(Duration::from_secs(10), wake.changed())
        .await
        .expect("woken by the re-drive")
        .unwrap();

    assert!(operator.set_paused("q", true).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    wake.borrow_and_update();
    assert!(operator.set_paused("q", false).await.unwrap());
    tokio::time::timeout(Duration::from_secs(10), wake.changed())
        .await
        .expect("woken by the resume")
        .unwrap();
    operator.close().await;
}
