//! Steering a running worker: pausing and resuming a queue, cancelling a job before it
//! starts; and the worker as its broker lists it.

use std::time::Duration;

use hopper_core::{
    CancelOutcome, JobContext, JobError, JobState, NewJob, Prefetch, QueueOptions, RetryPolicy,
    Throughput,
};
use tokio::time::Instant;

use super::{Gate, PATIENCE, Runs, Target, builder, choose_clock, counts, skip_for, wait_for};
use crate::helpers::{enqueue, enqueue_n};

/// A queue paused before 10 jobs arrive starts none of them over half a second (ten idle
/// polls): the worker counts 10 pending and 0 processing, and so does the broker. After
/// `resume` all 10 run, once each, on attempt 1. (A fetch already out when the pause came
/// may bring jobs back; the pause releases them uncharged, so they too run on attempt 1.)
pub async fn pause_and_resume(target: Target) {
    const N: usize = 10;
    let Target { broker, queue, .. } = target;
    choose_clock(&broker);
    let runs = Runs::default();
    let seen = runs.clone();
    let worker = builder(&broker)
        .queue(
            queue.clone(),
            QueueOptions::new().concurrency(2),
            move |job: JobContext<u64>| {
                seen.record(&job);
                async { Ok(()) }
            },
        )
        .start()
        .expect("start");
    worker.pause(&queue).await.expect("pause");
    enqueue_n(&broker, &queue, N).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(runs.all().len(), 0, "jobs started while paused");
    let held = worker.counts(&queue).await.expect("worker counts");
    assert_eq!(
        (held.pending, held.processing),
        (N as u64, 0),
        "the worker's pending / processing while paused"
    );
    let c = counts(&broker, &queue).await;
    assert_eq!(
        (c.pending, c.leased),
        (N as u64, 0),
        "the broker's pending / leased while paused"
    );
    worker.resume(&queue).await.expect("resume");
    wait_for(&worker, "10 jobs after resume", |s| s.completed >= N as u64).await;
    let stats = worker.shutdown().await;
    let attempts = runs.attempts();
    assert_eq!(attempts.len(), N, "distinct jobs run after resume");
    assert!(
        attempts.values().all(|a| a == &[1]),
        "each job ran once, on attempt 1: {attempts:?}"
    );
    assert_eq!(stats.completed, N as u64, "completed");
}

/// 4 jobs, a worker at concurrency 1 with a window of 2: job 0 runs (held at a gate), job
/// 1 waits in the buffer, jobs 2 and 3 are pending in the broker. Job 2 is cancelled in the
/// broker, job 1 through `Worker::cancel` (settled with `Cancel`), and cancelling the
/// running job 0 is refused. Once the gate opens, jobs 0 and 3 run, 1 and 2 never do, and
/// both are recorded cancelled.
pub async fn cancel_before_start(target: Target) {
    let Target { broker, queue, .. } = target;
    if broker.capabilities().pushed {
        return skip_for(
            "cancel_before_start",
            "pushed to be false",
            "a job is cancelled by the id enqueue returned, which a pushed broker's \
             deliveries do not carry, and its server cannot take back a queued message",
        );
    }
    choose_clock(&broker);
    let made = enqueue_n(&broker, &queue, 4).await;
    let gate = Gate::new();
    let runs = Runs::default();
    let (seen, held) = (runs.clone(), gate.clone());
    let worker = builder(&broker)
        .queue(
            queue.clone(),
            QueueOptions::new()
                .concurrency(1)
                .prefetch(Prefetch::Fixed(2)),
            move |job: JobContext<u64>| {
                seen.record(&job);
                let held = held.clone();
                async move {
                    held.passed().await;
                    Ok(())
                }
            },
        )
        .start()
        .expect("start");
    wait_for(&worker, "1 job running and 1 buffered", |s| {
        s.running == 1 && s.buffered == 1
    })
    .await;
    assert_eq!(runs.all()[0].id, made[0], "the first job runs first");
    assert_eq!(
        broker.cancel(made[2]).await.expect("cancel"),
        CancelOutcome::Cancelled,
        "job 2, pending in the broker"
    );
    assert!(
        worker.cancel(made[1]).await.expect("cancel"),
        "job 1, buffered in the worker"
    );
    assert!(
        !worker.cancel(made[0]).await.expect("cancel"),
        "job 0 is running: cancelling it must be refused"
    );
    gate.open();
    wait_for(&worker, "jobs 0 and 3", |s| s.completed >= 2).await;
    let stats = worker.shutdown().await;
    let ran: Vec<u64> = runs.all().iter().map(|r| r.payload).collect();
    assert_eq!(ran, vec![0, 3], "jobs that ran");
    assert_eq!(
        (stats.completed, stats.cancelled, stats.released),
        (2, 1, 0),
        "completed / cancelled while held / released"
    );
    for id in [made[1], made[2]] {
        let rec = broker.job(id).await.expect("job()");
        assert_eq!(
            rec.map(|r| r.state),
            Some(JobState::Cancelled),
            "job {id} after cancelling"
        );
    }
}

/// A running worker is listed by the broker with its process, queue and concurrency; once
/// stopped it is not, and the queue's throughput counts exactly what it settled: 8 jobs,
/// 2 of which fail both their attempts, give 6 completed, 2 failed attempts and 2 dead.
pub async fn worker_listed_while_running(target: Target) {
    let Target { broker, queue, .. } = target;
    if !broker.capabilities().admin.workers {
        return skip_for(
            "worker_listed_while_running",
            "admin.workers",
            "the broker keeps no worker reports",
        );
    }
    choose_clock(&broker);
    let jobs = (0..8u64)
        .map(|i| {
            NewJob::json(queue.as_str(), &i)
                .expect("JSON")
                .max_attempts(2)
        })
        .collect();
    enqueue(&broker, jobs).await;
    let worker = builder(&broker)
        .heartbeat(Duration::from_millis(100))
        .retry(RetryPolicy {
            base: Duration::from_millis(10),
            jitter: 0.0,
            ..RetryPolicy::default()
        })
        .queue(
            queue.clone(),
            QueueOptions::new().concurrency(3),
            |job: JobContext<u64>| async move {
                if job.payload < 2 {
                    return Err(JobError::retry("fails every time"));
                }
                Ok(())
            },
        )
        .start()
        .expect("start");
    wait_for(&worker, "8 jobs settled", |s| s.completed + s.dead >= 8).await;
    let deadline = Instant::now() + PATIENCE;
    let me = loop {
        let listed = broker.workers().await.expect("workers()");
        if let Some(w) = listed.iter().find(|w| w.pid == std::process::id()) {
            break w.clone();
        }
        assert!(Instant::now() < deadline, "never listed: {listed:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(me.queues.len(), 1, "{me:?}");
    assert_eq!(
        (me.queues[0].queue.as_str(), me.queues[0].concurrency),
        (queue.as_str(), 3),
        "{me:?}"
    );
    assert!(me.expires_at > me.heartbeat_at && me.heartbeat_at >= me.started_at);
    let stats = worker.shutdown().await;
    assert_eq!((stats.completed, stats.retried, stats.dead), (6, 2, 2));
    let listed = broker.workers().await.expect("workers()");
    assert!(
        listed.iter().all(|w| w.id != me.id),
        "a stopped worker removes itself: {listed:?}"
    );
    let status = broker.queue_stats(&queue).await.expect("queue_stats");
    let settled = Throughput {
        completed: 6,
        failed: 2,
        dead: 2,
    };
    assert_eq!(status.last_minute, Some(settled), "what the worker settled");
    assert_eq!(status.last_hour, Some(settled));
}
