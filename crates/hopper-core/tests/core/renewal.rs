//! Lease renewal answers: a lease the broker reports lost while the worker still holds jobs
//! under it drops them; one whose jobs all finished while the renewal was on its way is
//! not a loss.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hopper_core::{Broker, JobContext, Prefetch, QueueOptions, Worker};
use tokio::sync::Notify;

use super::support::{Remote, Renewal, enqueue_n, wait_for};

/// One worker at concurrency 1 with prefetch `prefetch`, a 3 s lease (renewed every 1 s)
/// and jobs of `job` each, over `renewal`; `n` jobs enqueued. Returns the broker, the
/// worker and the count of handler starts.
async fn start(
    renewal: Renewal,
    prefetch: usize,
    job: Duration,
    n: usize,
) -> (hopper_core::Worker, Arc<AtomicU64>) {
    let mut remote = Remote::new(Duration::from_millis(1));
    remote.renewal = renewal;
    let broker: Arc<dyn Broker> = Arc::new(remote);
    enqueue_n(&broker, "q", n).await;
    let starts = Arc::new(AtomicU64::new(0));
    let counted = starts.clone();
    let worker = Worker::builder(broker)
        .lease_ttl(Duration::from_secs(3))
        .queue(
            "q",
            QueueOptions::new()
                .concurrency(1)
                .prefetch(Prefetch::Fixed(prefetch)),
            move |_job: JobContext<u64>| {
                counted.fetch_add(1, Ordering::Relaxed);
                async move {
                    tokio::time::sleep(job).await;
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
    (worker, starts)
}

#[tokio::test(start_paused = true)]
async fn a_lease_whose_last_job_was_settled_first_is_not_lost() {
    // The renewal leaves at 1 s while the job runs; the job ends at 1.5 s and its
    // settlement goes through before the renewal is answered "lost".
    let settled = Arc::new(Notify::new());
    let (worker, starts) = start(
        Renewal::LostAfterSettle(settled),
        1,
        Duration::from_millis(1500),
        1,
    )
    .await;
    let stats = wait_for(&worker, |s| s.completed == 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stats_after = worker.stats();
    worker.shutdown().await;
    assert_eq!(starts.load(Ordering::Relaxed), 1);
    assert_eq!((stats.completed, stats_after.leases_lost), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_while_jobs_wait_drops_them() {
    // Two jobs of 5 s under one lease at concurrency 1: at 1 s the renewal says the lease
    // is lost, and the job still waiting is dropped, not run under it.
    let (worker, starts) = start(Renewal::LostNow, 2, Duration::from_secs(5), 2).await;
    let stats = wait_for(&worker, |s| s.leases_lost == 1).await;
    assert_eq!((stats.running, stats.buffered), (1, 0));
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(
        starts.load(Ordering::Relaxed),
        1,
        "the dropped job did not start"
    );
    worker.shutdown().await;
}
