//! Job timeouts: a handler still running at its queue's timeout is stopped, its future
//! dropped, and the attempt charged; and a shutdown that has to stop a handler after the
//! grace period charges its attempt too, so a job that always hangs ends dead-lettered
//! instead of coming back forever.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hopper_core::{JobContext, JobState, NewJob, QueueOptions, RetryPolicy, Worker, WorkerStats};
use tokio::time::Instant;

use super::support::{memory, wait_for};

/// Retries 1 s after a failure, exactly.
fn one_second_retries() -> RetryPolicy {
    RetryPolicy {
        base: Duration::from_secs(1),
        factor: 1.0,
        jitter: 0.0,
        ..RetryPolicy::default()
    }
}

/// Counts the handler futures dropped, finished or not.
struct Dropped(Arc<AtomicUsize>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn a_handler_past_its_timeout_is_stopped_and_charged() {
    let (_, broker) = memory();
    // Job 0 never returns and has two attempts; jobs 1..=20 take 100 ms each.
    let mut jobs = vec![NewJob::json("q", &0u64).unwrap().max_attempts(2)];
    jobs.extend((1..=20u64).map(|i| NewJob::json("q", &i).unwrap()));
    let ids = broker.enqueue(jobs).await.unwrap();
    let dropped = Arc::new(AtomicUsize::new(0));
    let counted = dropped.clone();
    let started = Instant::now();
    let worker = Worker::builder(broker.clone())
        .retry(one_second_retries())
        .poll_interval(Duration::from_millis(100))
        .queue(
            "q",
            QueueOptions::new()
                .concurrency(2)
                .timeout(Duration::from_secs(1)),
            move |job: JobContext<u64>| {
                let guard = Dropped(counted.clone());
                async move {
                    let _guard = guard;
                    if job.payload == 0 {
                        std::future::pending::<()>().await;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
    let stats: WorkerStats = wait_for(&worker, |s| s.dead == 1 && s.completed == 20).await;
    let took = started.elapsed();
    worker.shutdown().await;
    assert_eq!((stats.completed, stats.retried, stats.dead), (20, 1, 1));
    // 21 handlers ran to their end or were dropped at the timeout: job 0 twice.
    assert_eq!(dropped.load(Ordering::SeqCst), 22);
    let rec = broker.job(ids[0]).await.unwrap().unwrap();
    assert_eq!(rec.state, JobState::Dead);
    assert_eq!(rec.job.attempt, 2);
    assert_eq!(rec.last_error.as_deref(), Some("timed out after 1s"));
    // The first attempt times out at 1 s, the retry is due at 2 s and times out at 3 s
    // (give or take the 100 ms poll that finds it due); the other slot served the rest.
    assert!(
        took >= Duration::from_secs(3) && took <= Duration::from_millis(3_200),
        "dead-lettered after {took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_batch_past_its_timeout_fails_every_job_in_it() {
    let (_, broker) = memory();
    let jobs = (0..3u64)
        .map(|i| NewJob::json("q", &i).unwrap().max_attempts(1))
        .collect();
    let ids = broker.enqueue(jobs).await.unwrap();
    let worker = Worker::builder(broker.clone())
        .batch_queue(
            "q",
            QueueOptions::new()
                .batch(3, Duration::from_millis(10))
                .timeout(Duration::from_millis(500)),
            |_jobs: Vec<JobContext<u64>>| async {
                std::future::pending::<()>().await;
                Vec::new()
            },
        )
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.dead == 3).await;
    worker.shutdown().await;
    assert_eq!((stats.completed, stats.dead), (0, 3));
    for id in ids {
        let rec = broker.job(id).await.unwrap().unwrap();
        assert_eq!(rec.state, JobState::Dead);
        assert_eq!(rec.last_error.as_deref(), Some("timed out after 500ms"));
    }
}

#[tokio::test(start_paused = true)]
async fn a_zero_timeout_is_refused_by_name() {
    let (_, broker) = memory();
    let err = Worker::builder(broker)
        .queue(
            "emails",
            QueueOptions::new().timeout(Duration::ZERO),
            |_job: JobContext<u64>| async { Ok(()) },
        )
        .start()
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("timeout of queue emails"), "{text}");
}

/// A handler still running when the grace period ends is stopped, and its attempt
/// charged: it started, and a job that hangs every time must not be handed back
/// uncharged forever. Job 0 is at its last attempt and is dead-lettered; job 1 is retried
/// later.
#[tokio::test(start_paused = true)]
async fn the_grace_period_ends_with_running_jobs_charged() {
    let (_, broker) = memory();
    let jobs = vec![
        NewJob::json("q", &0u64).unwrap().max_attempts(1),
        NewJob::json("q", &1u64).unwrap().max_attempts(5),
    ];
    let ids = broker.enqueue(jobs).await.unwrap();
    let worker = Worker::builder(broker.clone())
        .retry(one_second_retries())
        .queue(
            "q",
            QueueOptions::new().concurrency(2),
            |_job: JobContext<u64>| async {
                std::future::pending::<()>().await;
                Ok(())
            },
        )
        .start()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let t0 = Instant::now();
    let stats = worker.shutdown_with(Duration::from_secs(2)).await;
    assert_eq!(t0.elapsed(), Duration::from_secs(2));
    assert_eq!(
        (stats.released, stats.dead, stats.retried),
        (0, 1, 1),
        "charged, not released"
    );
    let stopped = "stopped at shutdown: the handler was still running when the grace period ended";
    let dead = broker.job(ids[0]).await.unwrap().unwrap();
    assert_eq!((dead.state, dead.job.attempt), (JobState::Dead, 1));
    assert_eq!(dead.last_error.as_deref(), Some(stopped));
    let retried = broker.job(ids[1]).await.unwrap().unwrap();
    assert_eq!((retried.state, retried.job.attempt), (JobState::Pending, 1));
    assert_eq!(retried.last_error.as_deref(), Some(stopped));
    let counts = broker.counts("q").await.unwrap();
    assert_eq!(
        (counts.scheduled, counts.dead),
        (1, 1),
        "retried after its backoff"
    );
}
