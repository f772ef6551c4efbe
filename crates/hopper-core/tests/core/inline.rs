//! One-job hand-offs run on the event loop's own task (docs/design.md, "In-process
//! hand-offs"): when they do, and that panics, shutdowns, stats and commands behave there as
//! on a pool task.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper_core::{JobContext, JobState, NewJob, QueueOptions, Worker, WorkerStats};
use tokio::time::Instant;

use super::support::{enqueue_n, memory, noop, wait_for};

/// Enqueues `n` jobs and runs them at concurrency 4 with `handler`; each job's start in
/// paused time (ms, in start order), and the worker's statistics once all `n` completed.
async fn run_four_at_a_time<F, Fut>(n: usize, handler: F) -> (Vec<u64>, WorkerStats)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = hopper_core::JobResult> + Send + 'static,
{
    let (_, broker) = memory();
    let starts = Arc::new(Mutex::new(Vec::new()));
    let t0 = Instant::now();
    enqueue_n(&broker, "q", n).await;
    let seen = starts.clone();
    let worker = Worker::builder(broker)
        .queue(
            "q",
            QueueOptions::new().concurrency(4),
            move |_job: JobContext<u64>| {
                seen.lock().unwrap().push(t0.elapsed().as_millis() as u64);
                handler()
            },
        )
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == n as u64).await;
    worker.shutdown().await;
    let starts = starts.lock().unwrap().clone();
    (starts, stats)
}

#[tokio::test(start_paused = true)]
async fn once_its_polls_are_timed_brief_a_one_job_hand_off_runs_on_the_event_loop() {
    let (starts, stats) = run_four_at_a_time(40, || async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(())
    })
    .await;
    // Jobs of 10 ms go one per hand-off. The first four go to pool tasks, before any poll
    // was timed; every later one runs on the event loop's own task.
    assert_eq!(stats.handoffs, 40);
    assert!(stats.handoff_sizes.iter().all(|&k| k == 1));
    assert_eq!(stats.inline_handoffs, 36);
    assert_eq!(stats.pool_tasks_started, 4);
    // Still four at a time, and every slot busy throughout: four starts each 10 ms.
    let expected: Vec<u64> = (0..40).map(|i| i / 4 * 10).collect();
    assert_eq!(starts, expected);
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_holds_the_thread_always_gets_a_pool_task() {
    // What a computing handler looks like on the paused clock: its first poll takes a
    // millisecond (`advance` ends it with a yield), and twenty-one brief ones follow.
    // Every job of it goes to one of the four pool tasks.
    let (_, stats) = run_four_at_a_time(20, || async {
        tokio::time::advance(Duration::from_millis(1)).await;
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        Ok(())
    })
    .await;
    assert_eq!(
        (
            stats.handoffs,
            stats.inline_handoffs,
            stats.pool_tasks_started
        ),
        (20, 0, 4)
    );
}

/// Sets its flag when dropped: a handler's future holding one was dropped.
struct DropFlag(Arc<Mutex<bool>>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = true;
    }
}

/// The job's attempt is charged and its handler's future dropped (cancelled) by the time
/// the shutdown returns, not left to whenever the loop is dropped.
#[tokio::test(start_paused = true)]
async fn a_job_running_on_the_event_loop_is_stopped_when_the_grace_period_ends() {
    let (_, broker) = memory();
    enqueue_n(&broker, "q", 2).await;
    let dropped = Arc::new(Mutex::new(false));
    let flag = dropped.clone();
    let worker = Worker::builder(broker.clone())
        .queue(
            "q",
            QueueOptions::new().concurrency(2),
            move |job: JobContext<u64>| {
                let guard = (job.payload == 99).then(|| DropFlag(flag.clone()));
                async move {
                    // The first two start on pool tasks and time the queue's polls brief;
                    // the third, enqueued after them, runs on the event loop and never
                    // finishes.
                    if let Some(_guard) = guard {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
    wait_for(&worker, |s| s.completed == 2).await;
    let third = broker
        .enqueue(vec![NewJob::json("q", &99u64).unwrap()])
        .await
        .unwrap()[0];
    let stats = wait_for(&worker, |s| s.running == 1).await;
    assert_eq!((stats.handoffs, stats.inline_handoffs), (3, 1));
    let t0 = Instant::now();
    let stats = worker.shutdown_with(Duration::from_secs(2)).await;
    assert_eq!(t0.elapsed(), Duration::from_secs(2));
    assert_eq!((stats.completed, stats.released, stats.retried), (2, 0, 1));
    assert!(
        *dropped.lock().unwrap(),
        "the abandoned handler's future is dropped"
    );
    let rec = broker.job(third).await.unwrap().unwrap();
    assert_eq!(rec.state, JobState::Pending);
    assert_eq!(rec.job.attempt, 1, "a stopped handler's attempt is charged");
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_panics_before_its_first_await_fails_the_attempt_wherever_it_runs() {
    let (_, broker) = memory();
    let jobs = (0..6u64)
        .map(|i| two_attempts(NewJob::json("q", &i)))
        .collect();
    let ids = broker.enqueue(jobs).await.unwrap();
    let worker = Worker::builder(broker.clone())
        .queue(
            "q",
            QueueOptions::new().concurrency(2),
            |job: JobContext<u64>| {
                // Job 0 panics on a pool task (the first hand-offs, before any poll was
                // timed), job 3 on the event loop; both again on their retries.
                assert!(job.payload % 3 != 0, "job {} refused", job.payload);
                async {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == 4 && s.dead == 2).await;
    assert_eq!(stats.retried, 2);
    // Eight hand-offs (six jobs, two retries): the first two on pool tasks, the rest on
    // the event loop, both retries included.
    assert_eq!((stats.handoffs, stats.inline_handoffs), (8, 6));
    worker.shutdown().await;
    for (i, id) in [(0, ids[0]), (3, ids[3])] {
        let rec = broker.job(id).await.unwrap().unwrap();
        assert_eq!(rec.state, JobState::Dead);
        let error = rec.last_error.unwrap();
        assert!(
            error.contains(&format!("handler panicked: job {i} refused")),
            "{error}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_handler_on_the_event_loop_can_read_the_worker_stats() {
    type Shared = Arc<Mutex<Option<Arc<Worker>>>>;
    let (_, broker) = memory();
    enqueue_n(&broker, "q", 8).await;
    let handle: Shared = Arc::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (h, saw) = (handle.clone(), seen.clone());
    let worker = Worker::builder(broker)
        .queue(
            "q",
            QueueOptions::new().concurrency(2),
            move |_job: JobContext<u64>| {
                let (h, saw) = (h.clone(), saw.clone());
                async move {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    let worker = h.lock().unwrap().clone().unwrap();
                    saw.lock().unwrap().push(worker.stats().completed);
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
    let worker = Arc::new(worker);
    *handle.lock().unwrap() = Some(worker.clone());
    let stats = wait_for(&worker, |s| s.completed == 8).await;
    // Six of the eight ran on the event loop and read the stats from there. Two that wake
    // together finish one after the other, and the first is counted before the second is
    // polled: the second reads one more.
    assert_eq!(stats.inline_handoffs, 6);
    assert_eq!(*seen.lock().unwrap(), [0, 0, 2, 3, 4, 5, 6, 7]);
}

#[tokio::test(start_paused = true)]
async fn a_loop_running_brief_jobs_itself_lets_other_tasks_run_and_hears_commands() {
    let (_, broker) = memory();
    enqueue_n(&broker, "a", 2000).await;
    enqueue_n(&broker, "b", 2000).await;
    let four = || QueueOptions::new().concurrency(4);
    // Two queues: every hand-off is one job, and once the first are timed, every one runs
    // on the event loop and finishes on its first poll.
    let worker = Worker::builder(broker)
        .queue("a", four(), noop)
        .queue("b", four(), noop)
        .start()
        .unwrap();
    while worker.stats().inline_handoffs < 100 {
        tokio::task::yield_now().await;
    }
    let stats = worker.shutdown().await;
    assert!(
        stats.completed < 4000,
        "the stop came mid-drain: {stats:#?}"
    );
    assert!(stats.released > 0, "buffered jobs handed back: {stats:#?}");
}

#[tokio::test(start_paused = true)]
async fn a_batch_handler_that_panics_before_its_first_await_fails_the_decoded_jobs_only() {
    let (_, broker) = memory();
    let jobs = vec![
        two_attempts(NewJob::json("q", &1u64)),
        two_attempts(NewJob::json("q", &"one")),
    ];
    let ids = broker.enqueue(jobs).await.unwrap();
    let worker = Worker::builder(broker.clone())
        .batch_queue(
            "q",
            QueueOptions::new()
                .concurrency(1)
                .batch(2, Duration::from_millis(50)),
            |jobs: Vec<JobContext<u64>>| {
                assert!(jobs.is_empty(), "batch of {} refused", jobs.len());
                async { Vec::new() }
            },
        )
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.dead == 2).await;
    worker.shutdown().await;
    // The decoded job fails its attempt and is retried; the one that did not decode is
    // dead-lettered at once with the decoder's error.
    assert_eq!((stats.retried, stats.completed), (1, 0));
    let panicked = broker.job(ids[0]).await.unwrap().unwrap();
    assert_eq!(panicked.state, JobState::Dead);
    let error = panicked.last_error.unwrap();
    assert!(
        error.contains("handler panicked: batch of 1 refused"),
        "{error}"
    );
    let undecoded = broker.job(ids[1]).await.unwrap().unwrap();
    assert_eq!(
        undecoded.job.attempt, 1,
        "dead-lettered on its first attempt"
    );
    let error = undecoded.last_error.unwrap();
    assert!(error.contains("payload does not decode"), "{error}");
}

/// `job`, dead-lettered after its second failed attempt.
fn two_attempts(job: hopper_core::Result<NewJob>) -> NewJob {
    let mut job = job.unwrap();
    job.max_attempts = 2;
    job
}
