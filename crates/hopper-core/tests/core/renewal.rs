//! Lease renewal answers: a lease the broker reports lost while the worker still holds jobs
//! under it drops them; one whose jobs all finished while the renewal was on its way is
//! not a loss; and a lease no renewal confirms in time is given up by the worker itself,
//! its running job stopped before the broker could hand it to another worker.

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

/// A handler of `job` that records, in `stopped`, when its future ended or was dropped.
fn recorded(
    job: Duration,
    stopped: Arc<std::sync::Mutex<Vec<Duration>>>,
) -> impl Fn(
    JobContext<u64>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = hopper_core::JobResult> + Send>>
+ Send
+ Sync
+ 'static {
    let origin = tokio::time::Instant::now();
    move |_job: JobContext<u64>| {
        struct Stop(tokio::time::Instant, Arc<std::sync::Mutex<Vec<Duration>>>);
        impl Drop for Stop {
            fn drop(&mut self) {
                self.1.lock().unwrap().push(self.0.elapsed());
            }
        }
        let stop = Stop(origin, stopped.clone());
        Box::pin(async move {
            let _stop = stop;
            tokio::time::sleep(job).await;
            Ok(())
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_worker_cut_off_from_its_broker_stops_its_jobs_before_the_lease_ends() {
    // A 3 s lease whose renewals never come back. The fetch leaves at 0 and the broker's
    // lease runs to 3.001 s (1 ms round trip): the worker gives it up at 2.7 s (a tenth
    // early), stopping the 10 s job it runs and dropping the one waiting, so no other
    // worker can be running them while this one still does.
    let mut remote = Remote::new(Duration::from_millis(1));
    remote.renewal = Renewal::Hangs;
    let broker: Arc<dyn Broker> = Arc::new(remote);
    enqueue_n(&broker, "q", 2).await;
    let stopped = Arc::new(std::sync::Mutex::new(Vec::new()));
    let worker = Worker::builder(broker)
        .lease_ttl(Duration::from_secs(3))
        .queue(
            "q",
            QueueOptions::new()
                .concurrency(1)
                .prefetch(Prefetch::Fixed(2)),
            recorded(Duration::from_secs(10), stopped.clone()),
        )
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.leases_lost == 1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*stopped.lock().unwrap(), [Duration::from_millis(2700)]);
    assert_eq!((stats.buffered, stats.completed), (0, 0));
    assert_eq!(worker.stats().running, 0);
    worker.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn renewed_leases_are_kept_however_long_the_job_runs() {
    // The same 10 s job with renewals answered: every one confirms the lease again, and
    // the job runs to its end.
    let broker: Arc<dyn Broker> = Arc::new(Remote::new(Duration::from_millis(1)));
    enqueue_n(&broker, "q", 1).await;
    let stopped = Arc::new(std::sync::Mutex::new(Vec::new()));
    let worker = Worker::builder(broker)
        .lease_ttl(Duration::from_secs(3))
        .queue(
            "q",
            QueueOptions::new().concurrency(1),
            recorded(Duration::from_secs(10), stopped.clone()),
        )
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == 1).await;
    assert_eq!(stats.leases_lost, 0);
    assert_eq!(*stopped.lock().unwrap(), [Duration::from_millis(10_001)]);
    worker.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_job_whose_settlement_waits_keeps_its_lease_until_the_broker_has_it() {
    // The broker refuses settlements for 10 s while a 3 s lease's only job finishes at
    // 0.1 s. The lease is renewed until the acknowledgement goes through, so the job is
    // not taken back and run again meanwhile.
    let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let mut remote = Remote::new(Duration::from_millis(1));
    remote.settling = super::support::Settling::FailsWhile(down.clone());
    let broker: Arc<dyn Broker> = Arc::new(remote);
    enqueue_n(&broker, "q", 1).await;
    let starts = Arc::new(AtomicU64::new(0));
    let counted = starts.clone();
    let worker = Worker::builder(broker.clone())
        .lease_ttl(Duration::from_secs(3))
        .poll_interval(Duration::from_millis(100))
        .queue(
            "q",
            QueueOptions::new().concurrency(1),
            move |_: JobContext<u64>| {
                counted.fetch_add(1, Ordering::Relaxed);
                async {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    down.store(false, Ordering::SeqCst);
    let stats = wait_for(&worker, |s| s.settle_calls >= 1).await;
    worker.shutdown().await;
    assert_eq!(starts.load(Ordering::Relaxed), 1, "{stats:?}");
    assert_eq!(stats.leases_lost, 0);
    let counts = broker.counts("q").await.unwrap();
    assert_eq!((counts.pending, counts.leased), (0, 0), "{counts:?}");
}
