//! Fetch sizing: prefetch 1, Auto, slots, max_batch, budgets across queues.

use std::time::Duration;

use hopper_core::{JobContext, Prefetch, QueueOptions, Worker};

use super::support::{enqueue_n, memory, wait_for};

fn sleeping(
    ms: u64,
) -> impl Fn(
    JobContext<u64>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = hopper_core::JobResult> + Send>>
+ Send
+ Sync
+ 'static {
    move |_job| {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(())
        })
    }
}

async fn drain_sizes(jobs: usize, ms: u64, opts: QueueOptions) -> Vec<u32> {
    let (_, broker) = memory();
    enqueue_n(&broker, "q", jobs).await;
    let worker = Worker::builder(broker)
        .queue("q", opts, sleeping(ms))
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == jobs as u64).await;
    worker.shutdown().await;
    assert_eq!(stats.fetched_jobs, jobs as u64);
    stats.batch_sizes
}

#[tokio::test(start_paused = true)]
async fn prefetch_one_costs_one_fetch_per_job() {
    let opts = QueueOptions::new()
        .concurrency(1)
        .prefetch(Prefetch::Fixed(1));
    let sizes = drain_sizes(40, 10, opts).await;
    assert_eq!(sizes, vec![1; 40]);
}

#[tokio::test(start_paused = true)]
async fn auto_doubles_after_two_full_fetches_up_to_sixteen() {
    let opts = QueueOptions::new().concurrency(1).prefetch(Prefetch::Auto);
    let sizes = drain_sizes(200, 10, opts).await;
    let mut want = vec![1, 1, 2, 2, 4, 4, 8, 8];
    want.extend([16; 10]);
    want.push(10);
    assert_eq!(
        sizes, want,
        "19 fetches: 1 1 2 2 4 4 8 8, ten of 16, the last 10"
    );
}

#[tokio::test(start_paused = true)]
async fn auto_settles_at_thirteen_for_eighteen_ms_jobs() {
    let opts = QueueOptions::new().concurrency(1).prefetch(Prefetch::Auto);
    let sizes = drain_sizes(200, 18, opts).await;
    assert_eq!(&sizes[..8], &[1, 1, 2, 2, 4, 4, 8, 8]);
    let rest = &sizes[8..];
    assert!(rest[..rest.len() - 1].iter().all(|&n| n == 13), "{sizes:?}");
    assert_eq!(rest.iter().sum::<u32>(), 170);
}

#[tokio::test(start_paused = true)]
async fn auto_stays_at_one_for_long_jobs() {
    let opts = QueueOptions::new().concurrency(1).prefetch(Prefetch::Auto);
    assert_eq!(drain_sizes(10, 300, opts).await, vec![1; 10]);
}

#[tokio::test(start_paused = true)]
async fn auto_short_fetch_sets_the_size_and_an_empty_one_resets_it() {
    let (_, broker) = memory();
    enqueue_n(&broker, "q", 35).await;
    let opts = QueueOptions::new().concurrency(1).prefetch(Prefetch::Auto);
    let worker = Worker::builder(broker.clone())
        .queue("q", opts, sleeping(10))
        .start()
        .unwrap();
    wait_for(&worker, |s| s.completed == 35).await;
    // Idle: the backstop poll makes an empty fetch.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let empties = worker.stats().empty_fetches;
    assert!(empties >= 1, "an idle poll fetched nothing");
    enqueue_n(&broker, "q", 20).await;
    let stats = wait_for(&worker, |s| s.completed == 55).await;
    worker.shutdown().await;
    assert_eq!(
        stats.batch_sizes,
        [1, 1, 2, 2, 4, 4, 8, 8, 5, 1, 1, 2, 2, 4, 4, 6],
        "a short fetch of 5 set the next size to 5; the empty one set it to 1"
    );
}

#[tokio::test(start_paused = true)]
async fn two_queues_size_independently() {
    let (_, broker) = memory();
    enqueue_n(&broker, "fast", 100).await;
    enqueue_n(&broker, "slow", 10).await;
    let opts = QueueOptions::new().concurrency(1).prefetch(Prefetch::Auto);
    let worker = Worker::builder(broker)
        .queue("fast", opts.clone(), sleeping(10))
        .queue("slow", opts, sleeping(300))
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == 110).await;
    worker.shutdown().await;
    let fast = &stats.queues["fast"].fetch_sizes;
    let slow = &stats.queues["slow"].fetch_sizes;
    assert_eq!(&fast[..9], &[1, 1, 2, 2, 4, 4, 8, 8, 16], "{fast:?}");
    assert_eq!(slow, &vec![1; 10]);
}

#[tokio::test(start_paused = true)]
async fn slots_claim_at_most_the_free_slots() {
    let opts = QueueOptions::new()
        .concurrency(10)
        .max_batch(50)
        .prefetch(Prefetch::Slots);
    let sizes = drain_sizes(100, 10, opts).await;
    assert_eq!(sizes[0], 10);
    assert!(sizes.iter().all(|&n| n <= 10), "{sizes:?}");

    let opts = QueueOptions::new()
        .concurrency(12)
        .max_batch(100)
        .prefetch(Prefetch::Slots);
    let sizes = drain_sizes(100, 10, opts).await;
    assert_eq!(sizes[0], 12);
    assert!(sizes.iter().all(|&n| n <= 12), "{sizes:?}");

    let opts = QueueOptions::new()
        .concurrency(10)
        .max_batch(1)
        .prefetch(Prefetch::Slots);
    let sizes = drain_sizes(30, 10, opts).await;
    assert_eq!(sizes, vec![1; 30]);
}

#[tokio::test(start_paused = true)]
async fn fixed_window_holds_at_most_n() {
    let (_, broker) = memory();
    enqueue_n(&broker, "q", 50).await;
    let opts = QueueOptions::new()
        .concurrency(2)
        .prefetch(Prefetch::Fixed(8));
    let worker = Worker::builder(broker)
        .queue("q", opts, sleeping(5))
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == 50).await;
    worker.shutdown().await;
    assert_eq!(stats.batch_sizes[0], 8);
    assert_eq!(stats.queues["q"].peak_held, 8);
}

#[tokio::test(start_paused = true)]
async fn budgets_keep_a_hot_queue_from_taking_another_share() {
    let (_, broker) = memory();
    enqueue_n(&broker, "a", 40).await;
    enqueue_n(&broker, "b", 40).await;
    let worker = Worker::builder(broker)
        .queue(
            "a",
            QueueOptions::new().concurrency(5).prefetch(Prefetch::Slots),
            sleeping(100),
        )
        .queue(
            "b",
            QueueOptions::new().concurrency(2).prefetch(Prefetch::Slots),
            sleeping(100),
        )
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == 80).await;
    worker.shutdown().await;
    assert_eq!(stats.batch_sizes[0], 7, "one fetch carried both budgets");
    assert_eq!(stats.queues["a"].fetch_sizes[0], 5);
    assert_eq!(stats.queues["b"].fetch_sizes[0], 2);
    assert_eq!(stats.queues["a"].peak_held, 5);
    assert_eq!(stats.queues["b"].peak_held, 2);
}

#[tokio::test(start_paused = true)]
async fn pop_ahead_fetches_while_the_last_job_runs() {
    for (pop_ahead, want_peak) in [(false, 1), (true, 2)] {
        let (_, broker) = memory();
        enqueue_n(&broker, "q", 10).await;
        let opts = QueueOptions::new()
            .concurrency(1)
            .prefetch(Prefetch::Slots)
            .pop_ahead(pop_ahead);
        let worker = Worker::builder(broker)
            .queue("q", opts, sleeping(100))
            .start()
            .unwrap();
        let stats = wait_for(&worker, |s| s.completed == 10).await;
        worker.shutdown().await;
        assert_eq!(
            stats.queues["q"].peak_held, want_peak,
            "pop_ahead {pop_ahead}"
        );
        assert_eq!(stats.batch_sizes, vec![1; 10]);
    }
}

#[tokio::test(start_paused = true)]
async fn leases_of_waiting_jobs_are_renewed_until_they_run() {
    use hopper_core::FetchRequest;
    let (_, broker) = memory();
    let ids = enqueue_n(&broker, "q", 4).await;
    let opts = QueueOptions::new()
        .concurrency(1)
        .prefetch(Prefetch::Fixed(4));
    let worker = Worker::builder(broker.clone())
        .lease_ttl(Duration::from_secs(3))
        .queue("q", opts, sleeping(5_000))
        .start()
        .unwrap();
    // At 12 s the last job has waited four lease lengths in the worker.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let rival = broker
        .fetch(FetchRequest::one("q", 10, Duration::from_secs(3)))
        .await
        .unwrap();
    assert_eq!(rival.jobs.len(), 0, "renewed leases kept every job");
    let stats = wait_for(&worker, |s| s.completed == 4).await;
    worker.shutdown().await;
    assert_eq!((stats.fetches, stats.retried), (1, 0));
    for id in ids {
        assert!(
            broker.job(id).await.unwrap().is_none(),
            "acked under its lease"
        );
    }
}
