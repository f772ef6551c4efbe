//! Snoozing through a real worker: a job its handler puts off waits in a retry queue like
//! a retry, and comes back on the attempt it had, its earlier error kept and none added.
//! The broker suite's `snooze_is_attempt_neutral` fetches right after settling, which a
//! pushed broker does not offer, so these stand in for it here.

use std::time::Duration;

use hopper_amqp::topology::{retry_bucket, retry_queue};
use hopper_amqp::wire::{ATTEMPT, ERROR};
use hopper_amqp::{AmqpOptions, QueueKind};
use hopper_core::{Broker, JobContext, JobError, NewJob, QueueOptions, Worker};
use hopper_testkit::worker_cases::snoozed_job_is_not_charged;

use super::retries::{get_one, int, text};
use super::support::{setup, wait_for};
use super::worker_suite::target_with;

/// The worker suite's `snoozed_job_is_not_charged` runs on classic queues; this runs it on
/// a quorum queue, where the server's delivery count is part of the attempt: a snoozed
/// copy is a new message whose count starts again, so the job still runs as attempt 1
/// each time and completes on its one attempt.
#[tokio::test]
async fn a_snoozed_job_comes_back_on_the_same_attempt_on_a_quorum_queue() {
    let options = AmqpOptions::new()
        .declare(true)
        .queue_kind(QueueKind::Quorum);
    snoozed_job_is_not_charged(target_with(options).await).await;
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
