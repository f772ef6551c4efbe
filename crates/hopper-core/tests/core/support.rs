//! Helpers shared by the test modules.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, Clock, MemoryBroker, NewJob, WorkerHandle, WorkerStats};
use tokio::time::Instant;

/// A memory broker on tokio's clock, so leases and delays follow paused time.
pub fn memory() -> (MemoryBroker, Arc<dyn Broker>) {
    let b = MemoryBroker::with_clock(Clock::tokio());
    let dyn_b: Arc<dyn Broker> = Arc::new(b.clone());
    (b, dyn_b)
}

/// Enqueues `n` jobs whose payload is their index, in one call.
pub async fn enqueue_n(broker: &Arc<dyn Broker>, queue: &str, n: usize) -> Vec<hopper_core::JobId> {
    let jobs = (0..n)
        .map(|i| NewJob::json(queue, &(i as u64)).unwrap())
        .collect();
    broker.enqueue(jobs).await.unwrap()
}

/// Waits, in paused time, until `done(stats)` holds; panics after an hour of virtual time.
pub async fn wait_for(worker: &WorkerHandle, done: impl Fn(&WorkerStats) -> bool) -> WorkerStats {
    let start = Instant::now();
    loop {
        let s = worker.stats();
        if done(&s) {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(3600),
            "condition not reached; stats: {s:#?}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
