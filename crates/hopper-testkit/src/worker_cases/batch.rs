//! Batch handlers: a backlog is handed over in batches of the configured size.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper_core::{JobContext, JobResult, Prefetch, QueueOptions};

use super::{Runs, Target, builder, choose_clock, wait_for};
use crate::helpers::enqueue_n;

/// A backlog of 23 jobs through a batch handler of size 5 at concurrency 1 (window 5):
/// batches of 5, 5, 5, 5 and a last one of 3 once its wait has passed. The handler's
/// sizes and the worker's statistics agree, sum to 23, and each job ran once.
pub async fn batch_sizes(target: Target) {
    const BACKLOG: usize = 23;
    const SIZE: usize = 5;
    let Target { broker, queue, .. } = target;
    choose_clock(&broker);
    enqueue_n(&broker, &queue, BACKLOG).await;
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let runs = Runs::default();
    let (seen, sized) = (runs.clone(), sizes.clone());
    let worker = builder(&broker)
        .batch_queue(
            queue.clone(),
            QueueOptions::new()
                .concurrency(1)
                .prefetch(Prefetch::Slots)
                .batch(SIZE, Duration::from_millis(200)),
            move |jobs: Vec<JobContext<u64>>| {
                sized.lock().unwrap().push(jobs.len());
                for job in &jobs {
                    seen.record(job);
                }
                let results: Vec<JobResult> = jobs.iter().map(|_| Ok(())).collect();
                async move { results }
            },
        )
        .start()
        .expect("start");
    wait_for(&worker, "the backlog of 23", |s| {
        s.completed >= BACKLOG as u64
    })
    .await;
    let stats = worker.shutdown().await;
    let sizes = sizes.lock().unwrap().clone();
    assert_eq!(sizes, vec![5, 5, 5, 5, 3], "batch sizes the handler saw");
    assert_eq!(sizes.iter().sum::<usize>(), BACKLOG);
    let counted: Vec<usize> = stats.queues[&queue]
        .batch_sizes
        .iter()
        .map(|&n| n as usize)
        .collect();
    assert_eq!(counted, sizes, "batch sizes in the worker's statistics");
    let attempts = runs.attempts();
    assert_eq!(attempts.len(), BACKLOG, "distinct jobs run");
    assert!(
        attempts.values().all(|a| a == &[1]),
        "each job ran once: {attempts:?}"
    );
    assert_eq!(stats.completed, BACKLOG as u64);
}
