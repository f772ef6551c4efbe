//! Batch handlers over pushed deliveries: a batch closes at its size, or `batch_wait` after
//! its first delivery, and a window smaller than the size caps it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hopper_core::{JobContext, JobResult, Prefetch, QueueOptions, Worker};

use super::support::{enqueue_n, setup, wait_for};

type Calls = Arc<Mutex<Vec<(usize, Instant)>>>;

fn batch_worker(
    broker: Arc<dyn hopper_core::Broker>,
    queue: &str,
    prefetch: usize,
    size: usize,
    wait: Duration,
    calls: Calls,
) -> hopper_core::Worker {
    Worker::builder(broker)
        .batch_queue(
            queue,
            QueueOptions::new()
                .concurrency(1)
                .prefetch(Prefetch::Fixed(prefetch))
                .batch(size, wait),
            move |jobs: Vec<JobContext<u64>>| {
                calls.lock().unwrap().push((jobs.len(), Instant::now()));
                async move { jobs.iter().map(|_| JobResult::Ok(())).collect() }
            },
        )
        .start()
        .unwrap()
}

#[tokio::test]
async fn a_batch_closes_at_its_size() {
    let s = setup("batch_size").await;
    enqueue_n(&s.broker, &s.queue, 100).await;
    let calls = Calls::default();
    let worker = batch_worker(
        s.dyn_broker(),
        &s.queue,
        50,
        10,
        Duration::from_millis(50),
        calls.clone(),
    );
    let stats = wait_for(&worker, 30, "100 jobs", |s| s.completed == 100).await;
    worker.shutdown().await;
    let sizes: Vec<usize> = calls.lock().unwrap().iter().map(|c| c.0).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 100);
    assert!(
        sizes.iter().all(|&n| n <= 10),
        "a batch above its size: {sizes:?}"
    );
    let full = sizes.iter().filter(|&&n| n == 10).count();
    // A loaded machine may close a batch on its 50 ms before ten arrived; most are full.
    assert!(
        full >= 8,
        "batches of 10: {full} of {} ({sizes:?})",
        sizes.len()
    );
    assert_eq!(
        stats.fetches,
        sizes.len() as u64,
        "on RabbitMQ a fetch is a batch handed over"
    );
    assert_eq!(
        stats
            .batch_sizes
            .iter()
            .map(|&n| n as usize)
            .collect::<Vec<_>>(),
        sizes
    );
}

#[tokio::test]
async fn a_short_batch_closes_fifty_ms_after_its_first_delivery() {
    let s = setup("batch_wait").await;
    let calls = Calls::default();
    let worker = batch_worker(
        s.dyn_broker(),
        &s.queue,
        50,
        10,
        Duration::from_millis(50),
        calls.clone(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await; // subscribed and idle
    let published = Instant::now();
    enqueue_n(&s.broker, &s.queue, 3).await;
    wait_for(&worker, 10, "3 jobs", |s| s.completed == 3).await;
    worker.shutdown().await;
    let calls = calls.lock().unwrap().clone();
    assert_eq!(
        calls.iter().map(|c| c.0).collect::<Vec<_>>(),
        vec![3],
        "one batch of 3"
    );
    let after = calls[0].1 - published;
    // The first delivery arrives about when the publish is confirmed: the batch waits 50 ms
    // from there. Generous on the high side for a loaded machine.
    assert!(
        after >= Duration::from_millis(45),
        "handed over after {after:?}, before batch_wait"
    );
    assert!(
        after < Duration::from_millis(1500),
        "handed over only after {after:?}"
    );
}

#[tokio::test]
async fn a_window_smaller_than_the_batch_caps_it() {
    let s = setup("batch_cap").await;
    enqueue_n(&s.broker, &s.queue, 40).await;
    let calls = Calls::default();
    // Batches of 10 with a 2 s wait, but a window of 4: each batch closes at 4 at once.
    let started = Instant::now();
    let worker = batch_worker(
        s.dyn_broker(),
        &s.queue,
        4,
        10,
        Duration::from_secs(2),
        calls.clone(),
    );
    wait_for(&worker, 30, "40 jobs", |s| s.completed == 40).await;
    let took = started.elapsed();
    worker.shutdown().await;
    let sizes: Vec<usize> = calls.lock().unwrap().iter().map(|c| c.0).collect();
    assert_eq!(sizes, vec![4; 10], "ten batches of 4");
    assert!(
        took < Duration::from_secs(5),
        "batches waited for their 2 s: {took:?}"
    );
}
