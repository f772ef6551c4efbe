//! Hand-offs inside the process (docs/design.md, "In-process hand-offs") and the elastic pool.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper_core::worker::POOL_KEEP_ALIVE;
use hopper_core::{JobContext, QueueOptions, Worker, WorkerStats};
use tokio::time::Instant;

use super::support::{enqueue_n, memory, noop, wait_for};

/// Drains `n` no-op jobs from a fresh memory broker with `opts`; the worker's statistics.
async fn drain_noop(opts: QueueOptions, n: u64) -> WorkerStats {
    let (_, broker) = memory();
    enqueue_n(&broker, "q", n as usize).await;
    let worker = Worker::builder(broker)
        .queue("q", opts, noop)
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == n).await;
    worker.shutdown().await;
    stats
}

#[tokio::test(start_paused = true)]
async fn concurrency_one_hands_off_up_to_thirty_two() {
    let stats = drain_noop(QueueOptions::new().concurrency(1), 100).await;
    assert_eq!(stats.handoff_sizes[0], 32);
    assert_eq!(stats.handoff_sizes.iter().max(), Some(&32));
    assert_eq!(stats.handoff_sizes.iter().sum::<u32>(), 100);
}

#[tokio::test(start_paused = true)]
async fn a_timed_worker_splits_eight_cheap_jobs_four_two_one_one() {
    let (_, broker) = memory();
    enqueue_n(&broker, "q", 2).await;
    let worker = Worker::builder(broker.clone())
        .queue("q", QueueOptions::new().concurrency(2), noop)
        .start()
        .unwrap();
    wait_for(&worker, |s| s.completed == 2).await;
    enqueue_n(&broker, "q", 8).await;
    let stats = wait_for(&worker, |s| s.completed == 10).await;
    worker.shutdown().await;
    assert_eq!(
        &stats.handoff_sizes[..2],
        &[1, 1],
        "untimed: one job per hand-off"
    );
    assert_eq!(&stats.handoff_sizes[2..], &[4, 2, 1, 1]);
    assert_eq!(stats.handoffs, 6, "every hand-off counted");
}

#[tokio::test(start_paused = true)]
async fn a_fresh_worker_above_concurrency_one_hands_out_single_jobs() {
    let stats = drain_noop(QueueOptions::new().concurrency(4), 20).await;
    assert_eq!(&stats.handoff_sizes[..4], &[1, 1, 1, 1]);
}

#[tokio::test(start_paused = true)]
async fn the_pool_grows_to_the_limit_and_shrinks_back_to_one_idle_task() {
    let (_, broker) = memory();
    let starts = Arc::new(Mutex::new(Vec::new()));
    let t0 = Instant::now();
    enqueue_n(&broker, "q", 6).await;
    let seen = starts.clone();
    let worker = Worker::builder(broker)
        .queue(
            "q",
            QueueOptions::new().concurrency(4),
            move |_job: JobContext<u64>| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(t0.elapsed().as_millis() as u64);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
    // Four tasks run jobs 1–4; at 1 s two of them take jobs 5 and 6, and two go idle. A
    // task idle for a second ends, except the last one.
    tokio::time::sleep_until(t0 + Duration::from_millis(1500)).await;
    assert_eq!(live_and_idle(&worker), (4, 2));
    tokio::time::sleep_until(t0 + Duration::from_millis(2500)).await;
    assert_eq!(worker.stats().completed, 6);
    assert_eq!(live_and_idle(&worker), (2, 2));
    // The last two went idle at 2 s: both live until 3 s, one after.
    tokio::time::sleep_until(t0 + Duration::from_millis(2999)).await;
    assert_eq!(live_and_idle(&worker), (2, 2));
    tokio::time::sleep_until(t0 + Duration::from_millis(3001)).await;
    let stats = worker.stats();
    assert_eq!(*starts.lock().unwrap(), [0, 0, 0, 0, 1000, 1000]);
    assert_eq!(stats.peak_pool_tasks, 4);
    assert_eq!(stats.pool_tasks_started, 4);
    assert_eq!((stats.pool_tasks, stats.idle_tasks), (1, 1));
    worker.shutdown().await;
}

fn live_and_idle(worker: &Worker) -> (usize, usize) {
    let s = worker.stats();
    (s.pool_tasks, s.idle_tasks)
}

#[tokio::test(start_paused = true)]
async fn bursts_closer_than_the_keep_alive_reuse_the_pool_tasks() {
    let (_, broker) = memory();
    let worker = Worker::builder(broker.clone())
        .queue(
            "q",
            QueueOptions::new().concurrency(4),
            |_job: JobContext<u64>| async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok(())
            },
        )
        .start()
        .unwrap();
    for burst in 1..=5u64 {
        enqueue_n(&broker, "q", 4).await;
        let stats = wait_for(&worker, |s| s.completed == 4 * burst).await;
        assert_eq!(stats.peak_pool_tasks, 4);
        tokio::time::sleep(POOL_KEEP_ALIVE / 2).await;
    }
    // Every burst ran on the four tasks of the first; ending the idle ones at once, as
    // before, spawned three again for each later burst (16 in all).
    assert_eq!(worker.stats().pool_tasks_started, 4);
    tokio::time::sleep(POOL_KEEP_ALIVE).await;
    assert_eq!(live_and_idle(&worker), (1, 1));
    worker.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn batches_close_at_their_size_or_after_batch_wait() {
    let (_, broker) = memory();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let seen = calls.clone();
    let t0 = Instant::now();
    enqueue_n(&broker, "q", 25).await;
    let worker = Worker::builder(broker)
        .batch_queue(
            "q",
            QueueOptions::new()
                .concurrency(1)
                .batch(10, Duration::from_millis(50)),
            move |jobs: Vec<JobContext<u64>>| {
                let seen = seen.clone();
                async move {
                    seen.lock()
                        .unwrap()
                        .push((jobs.len(), t0.elapsed().as_millis() as u64));
                    jobs.iter().map(|_| Ok(())).collect()
                }
            },
        )
        .start()
        .unwrap();
    wait_for(&worker, |s| s.completed == 25).await;
    worker.shutdown().await;
    assert_eq!(*calls.lock().unwrap(), [(10, 0), (10, 0), (5, 50)]);
}

#[tokio::test(start_paused = true)]
async fn a_smaller_window_caps_the_batch() {
    let (_, broker) = memory();
    enqueue_n(&broker, "q", 12).await;
    let worker = Worker::builder(broker)
        .batch_queue(
            "q",
            QueueOptions::new()
                .concurrency(1)
                .prefetch(hopper_core::Prefetch::Fixed(4))
                .batch(10, Duration::from_millis(50)),
            |jobs: Vec<JobContext<u64>>| async move { jobs.iter().map(|_| Ok(())).collect() },
        )
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == 12).await;
    worker.shutdown().await;
    assert_eq!(stats.queues["q"].batch_sizes, [4, 4, 4]);
}

#[tokio::test(start_paused = true)]
async fn counts_and_cancel_see_jobs_waiting_in_a_hand_off() {
    let (_, broker) = memory();
    let ids = enqueue_n(&broker, "q", 5).await;
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
    tokio::time::sleep(Duration::from_millis(10)).await;
    let stats = worker.stats();
    assert_eq!(
        stats.handoff_sizes,
        [5],
        "concurrency 1: the whole backlog in one hand-off"
    );
    let counts = worker.counts("q").await.unwrap();
    assert_eq!((counts.pending, counts.processing), (4, 1));
    assert!(
        worker.cancel(ids[2]).await.unwrap(),
        "waiting in the hand-off: cancellable"
    );
    assert!(
        !worker.cancel(ids[0]).await.unwrap(),
        "running: not cancellable"
    );
    let counts = worker.counts("q").await.unwrap();
    assert_eq!((counts.pending, counts.processing), (3, 1));
    let stats = wait_for(&worker, |s| s.completed == 4).await;
    worker.shutdown().await;
    assert_eq!(stats.cancelled, 1);
    let rec = broker.job(ids[2]).await.unwrap().unwrap();
    assert_eq!(rec.state, hopper_core::JobState::Cancelled);
    // A job still in the broker is cancelled there.
    let later = enqueue_n(&broker, "q", 1).await;
    let idle = Worker::builder(broker.clone())
        .queue("other", QueueOptions::new(), |_j: JobContext<u64>| async {
            Ok(())
        })
        .start()
        .unwrap();
    assert!(idle.cancel(later[0]).await.unwrap());
    assert_eq!(broker.counts("q").await.unwrap().pending, 0);
    idle.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pause_hands_buffered_jobs_back_and_resume_continues() {
    let (_, broker) = memory();
    enqueue_n(&broker, "q", 10).await;
    let worker = Worker::builder(broker.clone())
        .queue(
            "q",
            QueueOptions::new().concurrency(1),
            |_job: JobContext<u64>| async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok(())
            },
        )
        .start()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    worker.pause("q").await.unwrap();
    let s = worker.stats();
    assert_eq!(
        s.released, 8,
        "one finished, one running, eight handed back"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let s = worker.stats();
    assert_eq!(s.completed, 2, "nothing started while paused");
    assert_eq!(broker.counts("q").await.unwrap().pending, 8);
    worker.resume("q").await.unwrap();
    let s = wait_for(&worker, |s| s.completed == 10).await;
    assert_eq!(s.released, 8);
    assert!(
        worker
            .pause("nope")
            .await
            .unwrap_err()
            .to_string()
            .contains("invalid queue `nope`")
    );
    worker.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_due_batch_waits_for_a_free_slot_without_spinning() {
    let (_, broker) = memory();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let seen = calls.clone();
    let t0 = Instant::now();
    enqueue_n(&broker, "q", 3).await;
    let worker = Worker::builder(broker)
        .batch_queue(
            "q",
            QueueOptions::new()
                .concurrency(1)
                .batch(2, Duration::from_millis(50)),
            move |jobs: Vec<JobContext<u64>>| {
                let seen = seen.clone();
                async move {
                    seen.lock()
                        .unwrap()
                        .push((jobs.len(), t0.elapsed().as_millis() as u64));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    jobs.iter().map(|_| Ok(())).collect()
                }
            },
        )
        .start()
        .unwrap();
    wait_for(&worker, |s| s.completed == 3).await;
    worker.shutdown().await;
    assert_eq!(*calls.lock().unwrap(), [(2, 0), (1, 1000)]);
}

#[tokio::test(start_paused = true)]
async fn small_fetches_keep_the_window_buffered_so_hand_offs_stay_large() {
    // Jobs that take no time: the window grows to 4 slots × 2 hand-offs × 32 = 256 once a
    // batch was timed, and fetches of at most 10 keep it topped up while every slot is
    // busy, so the even split over 4 slots hands out 32 at a time. Fetching only once the
    // buffer ran dry, no hand-off could pass 10 / 4.
    let stats = drain_noop(QueueOptions::new().concurrency(4).max_batch(10), 1000).await;
    assert!(
        stats.batch_sizes.iter().all(|&n| n <= 10),
        "max_batch holds"
    );
    assert_eq!(
        stats.queues["q"].peak_held, 256,
        "the window is reached, never passed"
    );
    let sizes = &stats.handoff_sizes;
    assert_eq!(sizes.iter().sum::<u32>(), 1000);
    assert_eq!(
        &sizes[..8],
        &[1; 8],
        "untimed: one job per hand-off, two per slot"
    );
    assert_eq!(sizes[8], 32, "the first timed hand-off");
    assert!(sizes.len() <= 80, "{} hand-offs for 1000 jobs", sizes.len());
}

#[tokio::test(start_paused = true)]
async fn fetches_as_large_as_the_window_top_up_by_an_eighth_of_it() {
    // Window 256 once timed (8 before) and max_batch 256: a top-up waits for 32 free places
    // (an eighth of the window), not 128 (half a fetch), so the buffer never runs half
    // empty.
    let stats = drain_noop(QueueOptions::new().concurrency(4).max_batch(256), 1000).await;
    let sizes = &stats.batch_sizes;
    assert_eq!(sizes.iter().sum::<u32>(), 1000);
    assert_eq!(sizes[0], 8, "untimed: two per slot");
    assert_eq!(stats.queues["q"].peak_held, 256, "then the whole window");
    let (_, top_ups) = sizes[2..].split_last().expect("top-ups");
    assert!(top_ups.iter().all(|&n| n >= 32), "top-ups: {top_ups:?}");
    assert!(
        top_ups.iter().any(|&n| n < 128),
        "top-ups below half a fetch: {top_ups:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn slow_jobs_are_held_two_per_slot_at_most() {
    // 40 jobs of 5 ms at concurrency 2.
    let (_, broker) = memory();
    enqueue_n(&broker, "q", 40).await;
    let worker = Worker::builder(broker)
        .queue(
            "q",
            QueueOptions::new().concurrency(2),
            |_job: JobContext<u64>| async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(())
            },
        )
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == 40).await;
    worker.shutdown().await;
    // 5 ms a job: a hand-off carries one and the window is two per slot, where it was 32
    // per slot whatever the jobs took: a worker holds no more than it will soon run.
    assert_eq!(
        stats.queues["q"].peak_held, 4,
        "fetches {:?}",
        stats.batch_sizes
    );
    assert!(stats.handoff_sizes.iter().all(|&n| n == 1));
}
