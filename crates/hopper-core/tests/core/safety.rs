//! At least once: shutdown, bad payloads, panics, retries.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper_core::worker::STOP_SETTLE_LIMIT;
use hopper_core::{
    Broker, JobContext, JobError, JobId, JobState, MemoryBroker, NewJob, QueueOptions, RetryPolicy,
    Worker, WorkerStats,
};
use serde::Deserialize;
use tokio::time::Instant;

use super::support::{Remote, Settling, enqueue_n, memory, wait_for};

#[tokio::test(start_paused = true)]
async fn shutdown_hands_buffered_jobs_back_without_charging_an_attempt() {
    let (_, broker) = memory();
    let ids = enqueue_n(&broker, "q", 10).await;
    let worker = Worker::builder(broker.clone())
        .queue(
            "q",
            QueueOptions::new().concurrency(1),
            |_job: JobContext<u64>| async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok(())
            },
        )
        .start()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t0 = Instant::now();
    let stats = worker.shutdown().await;
    assert_eq!(
        t0.elapsed(),
        Duration::from_millis(500),
        "waited for the running job only"
    );
    assert_eq!((stats.completed, stats.released), (1, 9));
    assert!(broker.job(ids[0]).await.unwrap().is_none(), "acked");
    for id in &ids[1..] {
        let rec = broker.job(*id).await.unwrap().unwrap();
        assert_eq!(rec.state, JobState::Pending);
        assert_eq!(rec.job.attempt, 0, "a released job is not charged");
    }
}

/// A [`Remote`] that settles as `settling` says, and the memory broker behind it.
fn remote_settling(settling: Settling) -> (MemoryBroker, Arc<dyn Broker>) {
    let mut remote = Remote::new(Duration::from_millis(1));
    remote.settling = settling;
    (remote.inner.clone(), Arc::new(remote))
}

/// Runs three quick jobs on a [`Remote`] that settles as `settling` says, then stops with a
/// grace period of 2 s: how long the stop took, the stats, and the jobs' states after it.
async fn stop_while_settling(
    settling: Settling,
    broker_back_after: Option<(Arc<AtomicBool>, Duration)>,
) -> (Duration, WorkerStats, Vec<JobState>) {
    let (inner, broker) = remote_settling(settling);
    let ids: Vec<JobId> = broker
        .enqueue((0..3u64).map(|i| NewJob::json("q", &i).unwrap()).collect())
        .await
        .unwrap();
    let worker = Worker::builder(broker)
        .queue(
            "q",
            QueueOptions::new().concurrency(3),
            |_job: JobContext<u64>| async { Ok(()) },
        )
        .start()
        .unwrap();
    wait_for(&worker, |s| s.completed == 3).await;
    if let Some((down, after)) = broker_back_after {
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            down.store(false, Ordering::SeqCst);
        });
    }
    let t0 = Instant::now();
    let stats = worker.shutdown_with(Duration::from_secs(2)).await;
    let took = t0.elapsed();
    let mut states = Vec::new();
    for id in ids {
        states.push(
            inner
                .job(id)
                .await
                .unwrap()
                .map_or(JobState::Completed, |r| r.state),
        );
    }
    (took, stats, states)
}

#[tokio::test(start_paused = true)]
async fn a_stop_gives_up_on_a_broker_that_refuses_settlements() {
    let down = Arc::new(AtomicBool::new(true));
    let (took, stats, states) = stop_while_settling(Settling::FailsWhile(down), None).await;
    assert_eq!(took, Duration::from_secs(2) + STOP_SETTLE_LIMIT);
    assert_eq!(stats.settlements_undelivered, 3);
    assert_eq!(
        states,
        [JobState::Leased; 3],
        "still leased: they run again once the lease expires"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stop_gives_up_on_a_settlement_that_never_returns() {
    let (took, stats, states) = stop_while_settling(Settling::Hangs, None).await;
    assert_eq!(took, Duration::from_secs(2) + STOP_SETTLE_LIMIT);
    assert_eq!(stats.settlements_undelivered, 3);
    assert_eq!(states, [JobState::Leased; 3]);
}

#[tokio::test(start_paused = true)]
async fn a_stop_at_the_end_of_the_grace_period_is_counted_when_it_cannot_be_delivered() {
    let (inner, broker) = remote_settling(Settling::FailsWhile(Arc::new(AtomicBool::new(true))));
    let ids = broker
        .enqueue(vec![NewJob::json("q", &1u64).unwrap()])
        .await
        .unwrap();
    let worker = Worker::builder(broker)
        .queue(
            "q",
            QueueOptions::new().concurrency(1),
            |_job: JobContext<u64>| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(())
            },
        )
        .start()
        .unwrap();
    wait_for(&worker, |s| s.running == 1).await;
    let t0 = Instant::now();
    let stats = worker.shutdown_with(Duration::from_secs(2)).await;
    assert_eq!(t0.elapsed(), Duration::from_secs(2) + STOP_SETTLE_LIMIT);
    assert_eq!((stats.retried, stats.settlements_undelivered), (1, 1));
    let held = inner.job(ids[0]).await.unwrap().unwrap();
    assert_eq!(
        (held.state, held.job.attempt),
        (JobState::Leased, 1),
        "the failed attempt never reached the broker: the job stays leased until the \
         lease expires"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stop_delivers_settlements_to_a_broker_that_comes_back_in_time() {
    let down = Arc::new(AtomicBool::new(true));
    let back = (down.clone(), Duration::from_secs(3));
    let (took, stats, states) = stop_while_settling(Settling::FailsWhile(down), Some(back)).await;
    // Failed settlements are retried every 200 ms: the first retry once the broker is
    // back at 3 s delivers them.
    assert!(
        took >= Duration::from_secs(3) && took <= Duration::from_millis(3200),
        "{took:?}"
    );
    assert_eq!(stats.settlements_undelivered, 0);
    assert_eq!(states, [JobState::Completed; 3], "acknowledged: gone");
}

#[derive(Debug, Deserialize)]
struct Email {
    #[allow(dead_code)]
    to: String,
}

#[tokio::test(start_paused = true)]
async fn a_payload_that_does_not_decode_is_dead_lettered_at_once() {
    let (_, broker) = memory();
    let called = Arc::new(Mutex::new(0));
    let ids = broker
        .enqueue(vec![NewJob::new("mail", b"{\"to\": 7}".to_vec())])
        .await
        .unwrap();
    let c = called.clone();
    let worker = Worker::builder(broker.clone())
        .queue(
            "mail",
            QueueOptions::new(),
            move |_job: JobContext<Email>| {
                *c.lock().unwrap() += 1;
                async { Ok(()) }
            },
        )
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.dead == 1).await;
    worker.shutdown().await;
    assert_eq!(*called.lock().unwrap(), 0);
    assert_eq!(stats.retried, 0);
    let rec = broker.job(ids[0]).await.unwrap().unwrap();
    assert_eq!(rec.state, JobState::Dead);
    assert_eq!(rec.job.attempt, 1);
    let err = rec.last_error.unwrap();
    assert!(
        err.starts_with("payload does not decode: invalid type: integer `7`"),
        "{err}"
    );
    assert_eq!(broker.dead_letters("mail", 10).await.unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_is_retried_with_backoff_then_dead_lettered() {
    let (_, broker) = memory();
    let ids = broker
        .enqueue(vec![NewJob::json("q", &1u64).unwrap().max_attempts(3)])
        .await
        .unwrap();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let seen = calls.clone();
    let t0 = Instant::now();
    let policy = RetryPolicy {
        jitter: 0.0,
        ..RetryPolicy::default()
    };
    let worker = Worker::builder(broker.clone())
        .retry(policy)
        .poll_interval(Duration::from_millis(100))
        .queue("q", QueueOptions::new(), move |job: JobContext<u64>| {
            seen.lock()
                .unwrap()
                .push((job.job.attempt, t0.elapsed().as_millis() / 100));
            async { panic!("boom") }
        })
        .start()
        .unwrap();
    wait_for(&worker, |s| s.dead == 1).await;
    let stats = worker.shutdown().await;
    assert_eq!(stats.retried, 2);
    // Backoff 1 s then 2 s; the worker finds a due retry within one poll (100 ms here).
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.iter().map(|c| c.0).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(calls[0].1, 0);
    assert!((10..=11).contains(&calls[1].1), "{calls:?}");
    assert!((30..=32).contains(&calls[2].1), "{calls:?}");
    let rec = broker.job(ids[0]).await.unwrap().unwrap();
    assert_eq!(rec.state, JobState::Dead);
    assert_eq!(rec.last_error.as_deref(), Some("handler panicked: boom"));
}

/// A panic in the handler's body, before its future exists, is a failed attempt like a
/// panic in the future: retried after its backoff, and the next attempt runs.
#[tokio::test(start_paused = true)]
async fn a_handler_panicking_before_its_future_is_retried() {
    let (_, broker) = memory();
    broker
        .enqueue(vec![NewJob::json("q", &1u64).unwrap().max_attempts(3)])
        .await
        .unwrap();
    let policy = RetryPolicy {
        jitter: 0.0,
        ..RetryPolicy::default()
    };
    let worker = Worker::builder(broker.clone())
        .retry(policy)
        .poll_interval(Duration::from_millis(100))
        .queue("q", QueueOptions::new(), |job: JobContext<u64>| {
            if job.job.attempt == 1 {
                panic!("before the future");
            }
            async { Ok(()) }
        })
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == 1).await;
    worker.shutdown().await;
    assert_eq!((stats.retried, stats.dead, stats.completed), (1, 0, 1));
}

#[tokio::test(start_paused = true)]
async fn handler_errors_steer_the_job() {
    let (_, broker) = memory();
    let ids = broker
        .enqueue(vec![
            NewJob::json("q", &1u64).unwrap(),
            NewJob::json("q", &2u64).unwrap(),
        ])
        .await
        .unwrap();
    let worker = Worker::builder(broker.clone())
        .queue(
            "q",
            QueueOptions::new(),
            |job: JobContext<u64>| async move {
                match (job.payload, job.job.attempt) {
                    (1, 1) => Err(JobError::retry_after("not yet", Duration::from_secs(30))),
                    (1, _) => Ok(()),
                    _ => Err(JobError::discard("never")),
                }
            },
        )
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == 1 && s.dead == 1).await;
    worker.shutdown().await;
    assert_eq!(stats.retried, 1);
    let dead = broker.job(ids[1]).await.unwrap().unwrap();
    assert_eq!(
        (dead.state, dead.last_error.as_deref()),
        (JobState::Dead, Some("never"))
    );
    assert!(broker.job(ids[0]).await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_stale_holder_cannot_settle_after_its_lease_expired() {
    use hopper_core::{FetchRequest, Outcome, Settlement};
    let (_, broker) = memory();
    enqueue_n(&broker, "q", 3).await;
    let ttl = Duration::from_secs(30);
    let first = broker.fetch(FetchRequest::one("q", 3, ttl)).await.unwrap();
    tokio::time::advance(Duration::from_secs(31)).await;
    let second = broker.fetch(FetchRequest::one("q", 3, ttl)).await.unwrap();
    assert_eq!(second.jobs.len(), 3, "the expired lease returned its jobs");
    assert!(second.jobs.iter().all(|j| j.attempt == 2));
    let stale: Vec<Settlement> = first
        .jobs
        .iter()
        .map(|j| Settlement {
            job: j.id,
            lease: first.lease,
            outcome: Outcome::Ack,
        })
        .collect();
    let report = broker.settle(stale).await.unwrap();
    assert_eq!((report.applied, report.fenced.len()), (0, 3));
    assert_eq!(broker.counts("q").await.unwrap().leased, 3);
}
