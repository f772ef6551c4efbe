//! A queue paused by another process stops every worker of the schema: the claim itself
//! skips it, so a worker draining the queue takes nothing more once the pause commits,
//! beyond the jobs it already held, and wakes to take the rest when it is resumed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hopper_core::{Broker, JobContext, NewJob, Prefetch, QueueOptions, Worker};
use hopper_postgres::{PgBroker, PgOptions};

use super::support::{broker_with, url};

/// The most jobs the worker holds at once, running or waiting in its buffer.
const WINDOW: usize = 2;

/// How many of `starts` came at or after `since`.
fn started_since(starts: &Mutex<Vec<Instant>>, since: Instant) -> usize {
    starts
        .lock()
        .unwrap()
        .iter()
        .filter(|t| **t >= since)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_from_another_process_stops_a_draining_worker_and_a_resume_wakes_it() {
    let (broker, pg) = broker_with(|o| o).await;
    // Another process: connections of its own, and no part in the worker's wake-ups.
    let operator = PgBroker::connect_with(&url(), PgOptions::default().schema(pg.schema()))
        .await
        .unwrap();
    let jobs = |n: u64| (0..n).map(|i| NewJob::json("q", &i).unwrap()).collect();
    broker.enqueue(jobs(400)).await.unwrap();

    let starts = Arc::new(Mutex::new(Vec::new()));
    let seen = starts.clone();
    // A poll a minute apart: only NOTIFY can bring the worker back within the test.
    let worker = Worker::builder(broker.clone())
        .poll_interval(Duration::from_secs(60))
        .queue(
            "q",
            QueueOptions::new()
                .concurrency(WINDOW)
                .prefetch(Prefetch::Fixed(WINDOW)),
            move |_job: JobContext<u64>| {
                seen.lock().unwrap().push(Instant::now());
                async {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while starts.lock().unwrap().len() < 50 {
        assert!(Instant::now() < deadline, "the worker did not start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    assert!(operator.set_paused("q", true).await.unwrap());
    let paused = Instant::now();
    // Jobs enqueued while paused wake the worker, whose claims must skip the queue.
    operator.enqueue(jobs(10)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let settled = Instant::now();
    let after_pause = started_since(&starts, paused);
    assert!(
        after_pause <= WINDOW,
        "{after_pause} jobs started after the pause, more than the worker held"
    );
    operator.enqueue(jobs(10)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        started_since(&starts, settled),
        0,
        "jobs started a second after the pause"
    );
    let done = starts.lock().unwrap().len();
    assert!(done < 420, "the queue drained before the pause");
    let status = broker.queue_stats("q").await.unwrap();
    assert!(status.paused);
    assert_eq!(status.counts.pending, 420 - done as u64, "{status:?}");

    assert!(operator.set_paused("q", false).await.unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while starts.lock().unwrap().len() < 420 {
        let n = starts.lock().unwrap().len();
        assert!(
            Instant::now() < deadline,
            "{n} of 420 started after the resume"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stats = worker.shutdown().await;
    assert_eq!(stats.completed, 420);
    assert_eq!(broker.counts("q").await.unwrap(), Default::default());
    operator.close().await;
}
