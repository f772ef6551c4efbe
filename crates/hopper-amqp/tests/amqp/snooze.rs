//! Snoozing through a real worker: a job its handler puts off waits in a retry queue like
//! a retry, and comes back on the attempt it had, its earlier error kept and none added.
//! The broker suite's `snooze_is_attempt_neutral` fetches right after settling, which a
//! pushed broker does not offer, so these stand in for it here.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hopper_amqp::topology::{retry_bucket, retry_queue};
use hopper_amqp::wire::{ATTEMPT, ERROR};
use hopper_amqp::{AmqpOptions, QueueKind};
use hopper_core::{Broker, JobContext, JobError, NewJob, QueueOptions, Worker};

use super::retries::{get_one, int, text};
use super::support::{setup, setup_with, wait_for};

const SNOOZE: Duration = Duration::from_millis(300);

/// A job allowed one attempt, snoozed twice and then done, completes on attempt 1 every
/// time: snoozes charge nothing, so it never reaches its limit. On a quorum queue the
/// server's delivery count is part of the attempt, and a snoozed copy is a new message
/// whose count starts again, so the same holds there.
#[tokio::test]
async fn a_snoozed_job_comes_back_on_the_same_attempt_after_its_delay() {
    for kind in [QueueKind::Classic, QueueKind::Quorum] {
        let options = AmqpOptions::new().declare(true).queue_kind(kind);
        let s = setup_with("snooze", options).await;
        s.broker
            .enqueue(vec![NewJob::json(&s.queue, &1u64).unwrap().max_attempts(1)])
            .await
            .unwrap();
        let runs: Arc<Mutex<Vec<(u32, Instant)>>> = Arc::default();
        let r = runs.clone();
        let worker = Worker::builder(s.dyn_broker())
            .queue(
                &s.queue,
                QueueOptions::new().concurrency(1),
                move |job: JobContext<u64>| {
                    let mut runs = r.lock().unwrap();
                    runs.push((job.job.attempt, Instant::now()));
                    let again = runs.len() <= 2;
                    async move {
                        if again {
                            Err(JobError::snooze(SNOOZE))
                        } else {
                            Ok(())
                        }
                    }
                },
            )
            .start()
            .unwrap();
        wait_for(&worker, 15, "the snoozed job to complete", |s| {
            s.completed == 1
        })
        .await;
        let stats = worker.shutdown().await;
        let runs = runs.lock().unwrap().clone();
        assert_eq!(
            runs.iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![1, 1, 1],
            "{kind:?}: the attempt of each run"
        );
        assert_eq!(
            (stats.snoozed, stats.retried, stats.dead, stats.completed),
            (2, 0, 0, 1),
            "{kind:?}: snoozed twice, then done"
        );
        for pair in runs.windows(2) {
            let gap = pair[1].1 - pair[0].1;
            assert!(
                gap >= SNOOZE,
                "{kind:?}: came back after {gap:?}, before its {SNOOZE:?}"
            );
        }
        // Counted after the worker's channels closed, so a delivery left unsettled would
        // be back among the ready ones; `scheduled` covers the retry queue snoozes used.
        let counts = s.broker.counts(&s.queue).await.unwrap();
        assert_eq!(
            (counts.pending, counts.scheduled, counts.dead),
            (0, 0, 0),
            "{kind:?}: nothing left: {counts:?}"
        );
    }
}

/// The copy a snooze leaves in the retry queue: one attempt fewer charged than the
/// delivery ran on, and the error of the retry before it, not the snooze's own words.
#[tokio::test]
async fn a_snoozed_copy_keeps_the_earlier_error_and_gives_the_attempt_back() {
    let s = setup("snooze_copy").await;
    s.broker
        .enqueue(vec![NewJob::json(&s.queue, &2u64).unwrap()])
        .await
        .unwrap();
    let later = Duration::from_secs(60);
    let worker = Worker::builder(s.dyn_broker())
        .queue(
            &s.queue,
            QueueOptions::new().concurrency(1),
            move |job: JobContext<u64>| {
                let attempt = job.job.attempt;
                async move {
                    if attempt == 1 {
                        Err(JobError::retry_after("boom", Duration::from_millis(20)))
                    } else {
                        Err(JobError::snooze(later))
                    }
                }
            },
        )
        .start()
        .unwrap();
    wait_for(&worker, 15, "a retry, then a snooze", |s| {
        s.retried == 1 && s.snoozed == 1
    })
    .await;
    worker.shutdown().await;
    let bucket = retry_queue(&s.queue, retry_bucket(later).unwrap());
    let (body, headers) = get_one(&bucket).await.expect("the snoozed copy");
    assert_eq!(body, b"2");
    let h = headers.inner();
    assert_eq!(
        int(h.get(ATTEMPT)),
        1,
        "ran on attempt 2, one attempt charged"
    );
    assert_eq!(text(h.get(ERROR)), "boom", "the retry's error, kept");
}
