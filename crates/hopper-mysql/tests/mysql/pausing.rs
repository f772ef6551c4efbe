//! A queue paused by another process: its worker stops taking jobs within a second (what
//! it already held still runs) and takes the rest once the queue is resumed. Real time:
//! the pause reaches the worker only through the database.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hopper_core::{Broker, JobContext, Prefetch, QueueOptions, Worker};
use hopper_mysql::MySqlBroker;
use hopper_testkit::workers::enqueue;

use super::support::broker_with;

const JOBS: usize = 300;

/// The most jobs the worker holds: its concurrency, and its window.
const WINDOW: usize = 2;

async fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_paused_elsewhere_stops_its_workers_until_resumed() {
    let (broker, url) = broker_with(|o| o).await;
    enqueue(&broker, JOBS).await;
    let started = Arc::new(AtomicUsize::new(0));
    let runs = Arc::new(Mutex::new(vec![0u8; JOBS]));
    let (count, seen) = (started.clone(), runs.clone());
    let worker = Worker::builder(broker.clone())
        .queue(
            "q",
            QueueOptions::new()
                .concurrency(WINDOW)
                .prefetch(Prefetch::Fixed(WINDOW)),
            move |job: JobContext<u64>| {
                count.fetch_add(1, Ordering::Relaxed);
                seen.lock().unwrap()[job.payload as usize] += 1;
                async {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
    wait_for("the first jobs", || started.load(Ordering::Relaxed) >= 20).await;

    // Another process, with connections of its own.
    let operator = MySqlBroker::connect(&url).await.unwrap();
    assert!(operator.set_paused("q", true).await.unwrap());
    let at_pause = started.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_a_second = started.load(Ordering::Relaxed);
    // What the worker held, or was claiming, as the pause committed.
    assert!(
        after_a_second - at_pause <= 2 * WINDOW,
        "{} jobs started after the pause",
        after_a_second - at_pause
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stopped = started.load(Ordering::Relaxed);
    assert_eq!(
        stopped, after_a_second,
        "jobs started a second after the pause"
    );
    assert!(stopped < JOBS, "the queue drained before the pause");
    let status = operator.queue_stats("q").await.unwrap();
    assert!(status.paused);
    assert_eq!(status.counts.pending as usize, JOBS - stopped, "{status:?}");

    assert!(operator.set_paused("q", false).await.unwrap());
    wait_for("the rest after resuming", || {
        started.load(Ordering::Relaxed) == JOBS
    })
    .await;
    worker.shutdown().await;
    let runs = runs.lock().unwrap().clone();
    assert!(runs.iter().all(|&n| n == 1), "each job once: {runs:?}");
    assert_eq!(broker.counts("q").await.unwrap(), Default::default());
    operator.close().await;
}
