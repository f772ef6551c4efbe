//! A job's way through a worker: run once and acknowledged, retried with backoff until it
//! succeeds, or dead-lettered with its error once its attempts run out.

use std::time::Duration;

use hopper_core::{JobContext, JobError, JobState, NewJob, QueueOptions, RetryPolicy};

use super::{Runs, Target, builder, choose_clock, counts, skip_for, wait_for};
use crate::helpers::{enqueue, enqueue_n};

/// Backoff of 20 ms doubling, without jitter: attempt n waits 20 × 2^(n−1) ms.
fn quick_retries() -> RetryPolicy {
    RetryPolicy {
        base: Duration::from_millis(20),
        cap: Duration::from_secs(1),
        factor: 2.0,
        jitter: 0.0,
        max_attempts: None,
    }
}

/// 40 jobs through a worker at concurrency 4: each runs exactly once, on attempt 1, and is
/// acknowledged; the queue is empty afterwards and the stop reports 40 completed.
pub async fn enqueue_run_ack(target: Target) {
    const N: usize = 40;
    let Target { broker, queue, .. } = target;
    choose_clock(&broker);
    enqueue_n(&broker, &queue, N).await;
    let runs = Runs::default();
    let seen = runs.clone();
    let worker = builder(&broker)
        .queue(
            queue.clone(),
            QueueOptions::new().concurrency(4),
            move |job: JobContext<u64>| {
                seen.record(&job);
                async { Ok(()) }
            },
        )
        .start()
        .expect("start");
    wait_for(&worker, "40 jobs completed", |s| s.completed >= N as u64).await;
    let stats = worker.shutdown().await;
    let attempts = runs.attempts();
    assert_eq!(attempts.len(), N, "distinct jobs run: {attempts:?}");
    assert!(
        attempts.values().all(|a| a == &[1]),
        "each job ran once, on attempt 1: {attempts:?}"
    );
    assert_eq!(
        (stats.completed, stats.retried, stats.dead, stats.released),
        (N as u64, 0, 0, 0),
        "completed / retried / dead / released"
    );
    let left = counts(&broker, &queue).await;
    assert_eq!(
        (left.pending, left.scheduled, left.leased, left.dead),
        (0, 0, 0, 0),
        "pending / scheduled / leased / dead after the run"
    );
}

/// A handler fails the first 3 attempts of each of 2 jobs: each job runs 4 times, with
/// attempts 1, 2, 3, 4, each retry no sooner than the policy's backoff (20, 40, 80 ms),
/// then is acknowledged; the stop reports 6 retried and 2 completed.
pub async fn retry_backoff_then_success(target: Target) {
    const JOBS: usize = 2;
    const FAILS: u32 = 3;
    let Target { broker, queue, .. } = target;
    if !broker.capabilities().delayed {
        return skip_for(
            "retry_backoff_then_success",
            "delayed",
            "a retry's backoff is a delay",
        );
    }
    choose_clock(&broker);
    enqueue_n(&broker, &queue, JOBS).await;
    let runs = Runs::default();
    let seen = runs.clone();
    let policy = quick_retries();
    let worker = builder(&broker)
        .retry(policy)
        .queue(
            queue.clone(),
            QueueOptions::new().concurrency(2),
            move |job: JobContext<u64>| {
                seen.record(&job);
                let attempt = job.job.attempt;
                async move {
                    if attempt <= FAILS {
                        Err(JobError::retry(format!("failure {attempt}")))
                    } else {
                        Ok(())
                    }
                }
            },
        )
        .start()
        .expect("start");
    wait_for(&worker, "both jobs completed", |s| {
        s.completed >= JOBS as u64
    })
    .await;
    let stats = worker.shutdown().await;
    let attempts = runs.attempts();
    assert_eq!(
        attempts.values().cloned().collect::<Vec<_>>(),
        vec![vec![1, 2, 3, 4]; JOBS],
        "attempts of each job"
    );
    assert_eq!(
        (stats.retried, stats.completed, stats.dead),
        (JOBS as u64 * FAILS as u64, JOBS as u64, 0),
        "retried / completed / dead"
    );
    for payload in 0..JOBS as u64 {
        let mine: Vec<_> = runs
            .all()
            .into_iter()
            .filter(|r| r.payload == payload)
            .collect();
        for pair in mine.windows(2) {
            let backoff = policy.delay(pair[0].attempt);
            let gap = pair[1].at - pair[0].at;
            assert!(
                gap >= backoff,
                "job {payload}: attempt {} started {gap:?} after attempt {}, before its \
                 backoff of {backoff:?}",
                pair[1].attempt,
                pair[0].attempt
            );
        }
    }
    let left = counts(&broker, &queue).await;
    assert_eq!(
        (left.pending, left.scheduled, left.leased, left.dead),
        (0, 0, 0, 0),
        "pending / scheduled / leased / dead after the run"
    );
}

/// A job allowed 3 attempts whose handler always fails runs 3 times (attempts 1, 2, 3),
/// is retried twice and dead-lettered once; the broker counts it dead and lists it with
/// the handler's error of the last attempt.
pub async fn dead_letter_after_max_attempts(target: Target) {
    const MAX: u32 = 3;
    let Target { broker, queue, .. } = target;
    choose_clock(&broker);
    let made = enqueue(
        &broker,
        vec![
            NewJob::json(queue.as_str(), &7u64)
                .expect("JSON")
                .max_attempts(MAX),
        ],
    )
    .await;
    let runs = Runs::default();
    let seen = runs.clone();
    let worker = builder(&broker)
        .retry(quick_retries())
        .queue(
            queue.clone(),
            QueueOptions::new().concurrency(1),
            move |job: JobContext<u64>| {
                seen.record(&job);
                let attempt = job.job.attempt;
                async move { Err(JobError::retry(format!("boom on attempt {attempt}"))) }
            },
        )
        .start()
        .expect("start");
    wait_for(&worker, "the job dead-lettered", |s| s.dead >= 1).await;
    let stats = worker.shutdown().await;
    assert_eq!(
        runs.attempts().into_iter().collect::<Vec<_>>(),
        vec![(7, vec![1, 2, 3])],
        "runs of the job"
    );
    assert_eq!(
        (stats.retried, stats.dead, stats.completed),
        (2, 1, 0),
        "retried / dead / completed"
    );
    let left = counts(&broker, &queue).await;
    assert_eq!(
        (left.pending, left.scheduled, left.leased, left.dead),
        (0, 0, 0, 1),
        "pending / scheduled / leased / dead"
    );
    match broker.dead_letters(&queue, 10).await {
        Ok(dead) => {
            let got: Vec<_> = dead
                .iter()
                .map(|r| (r.state, r.job.attempt, r.last_error.as_deref()))
                .collect();
            assert_eq!(
                got,
                vec![(JobState::Dead, MAX, Some("boom on attempt 3"))],
                "the dead letters of the queue"
            );
            if !broker.capabilities().pushed {
                assert_eq!(
                    dead[0].job.id, made[0],
                    "the dead letter is the job enqueued"
                );
            }
        }
        Err(hopper_core::Error::NotSupported { what, .. }) => crate::helpers::skip(
            "dead_letter_after_max_attempts",
            &format!(
                "reading the dead letter back: the broker does not support {what} (no \
                 Capabilities field says so); counted dead above"
            ),
        ),
        Err(e) => panic!("dead_letters failed: {e:?}"),
    }
}

/// A job allowed one attempt whose handler snoozes it twice for 300 ms runs three times,
/// each time as attempt 1, no sooner than 300 ms after the run before, and completes: a
/// snooze charges nothing and is no failure. The stop reports 2 snoozed, 1 completed.
pub async fn snoozed_job_is_not_charged(target: Target) {
    const SNOOZE: Duration = Duration::from_millis(300);
    let Target { broker, queue, .. } = target;
    if !broker.capabilities().delayed {
        return skip_for(
            "snoozed_job_is_not_charged",
            "delayed",
            "a snooze is a delay",
        );
    }
    choose_clock(&broker);
    let job = NewJob::json(&queue, &0u64).unwrap().max_attempts(1);
    enqueue(&broker, vec![job]).await;
    let runs = Runs::default();
    let seen = runs.clone();
    let worker = builder(&broker)
        .queue(
            queue.clone(),
            QueueOptions::new().concurrency(2),
            move |job: JobContext<u64>| {
                seen.record(&job);
                let earlier = seen.all().len();
                async move {
                    match earlier {
                        1 | 2 => Err(JobError::snooze(SNOOZE)),
                        _ => Ok(()),
                    }
                }
            },
        )
        .start()
        .expect("start");
    wait_for(&worker, "the job completed", |s| s.completed >= 1).await;
    let stats = worker.shutdown().await;
    assert_eq!(runs.attempts()[&0], vec![1, 1, 1], "attempts of each run");
    for pair in runs.all().windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= SNOOZE,
            "ran again {gap:?} after a snooze of {SNOOZE:?}"
        );
    }
    assert_eq!(
        (stats.snoozed, stats.completed, stats.retried, stats.dead),
        (2, 1, 0, 0),
        "snoozed / completed / retried / dead"
    );
    let left = counts(&broker, &queue).await;
    assert_eq!(
        (left.pending, left.scheduled, left.leased, left.dead),
        (0, 0, 0, 0),
        "pending / scheduled / leased / dead after the run"
    );
}
