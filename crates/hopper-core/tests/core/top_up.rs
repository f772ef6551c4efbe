//! Top-ups on a broker with a round trip: a worker waits up to one fetch round trip for the
//! rest of its window to free up, so fetches claim the whole window rather than
//! alternating between nearly all of it and one job; and a slot freed beside a long job
//! waits no more than that round trip.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, JobContext, NewJob, Prefetch, QueueOptions, Worker};
use tokio::time::Instant;

use super::support::{Remote, wait_for};

/// The fetch round trip.
const RTT: Duration = Duration::from_millis(20);

/// Enqueues one job per duration (in microseconds) and drains them at concurrency 10 with
/// prefetch slots over a 20 ms round trip. Returns the fetch sizes and when the jobs
/// finished, in order of completion, measured from the start of the drain.
async fn drain(durations_us: &[u64]) -> (Vec<u32>, Vec<Duration>) {
    let broker: Arc<dyn Broker> = Arc::new(Remote::new(RTT));
    let jobs = durations_us
        .iter()
        .map(|us| NewJob::json("q", us).unwrap())
        .collect();
    broker.enqueue(jobs).await.unwrap();
    let started = Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = Worker::builder(broker)
        .queue(
            "q",
            QueueOptions::new()
                .concurrency(10)
                .prefetch(Prefetch::Slots),
            move |job: JobContext<u64>| {
                let tx = tx.clone();
                async move {
                    tokio::time::sleep(Duration::from_micros(job.payload)).await;
                    let _ = tx.send(started.elapsed());
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
    let n = durations_us.len() as u64;
    let stats = wait_for(&worker, |s| s.completed == n).await;
    worker.shutdown().await;
    let mut finished = Vec::new();
    while let Ok(t) = rx.try_recv() {
        finished.push(t);
    }
    (stats.batch_sizes, finished)
}

#[tokio::test(start_paused = true)]
async fn short_jobs_finishing_apart_are_claimed_a_whole_window_at_a_time() {
    // Each window's ten jobs finish 1 ms apart (tokio's timer granularity), all within
    // the 20 ms round trip.
    let durations: Vec<u64> = (0..100).map(|i| 1_000 + (i % 10) * 1_000).collect();
    let (sizes, _) = drain(&durations).await;
    assert_eq!(sizes, vec![10; 10]);
}

#[tokio::test(start_paused = true)]
async fn a_slot_freed_beside_a_long_job_waits_one_round_trip_at_most() {
    // One job of 2 s, then 99 of 10 ms: the nine other slots must not wait for the long
    // job to fill the window. Each round of nine costs 10 ms of work plus at most two round
    // trips (the hold and the fetch), so the 99 short jobs end by the first fetch plus
    // 11 × 50 ms, long before the long job.
    let mut durations = vec![2_000_000];
    durations.extend(std::iter::repeat_n(10_000, 99));
    let (sizes, finished) = drain(&durations).await;
    assert_eq!(sizes[0], 10);
    assert!(sizes[1..].iter().all(|&n| n == 9), "{sizes:?}");
    assert_eq!(finished.len(), 100);
    let last_short = finished[98];
    assert!(
        last_short <= RTT + 11 * (Duration::from_millis(10) + 2 * RTT),
        "the 99th job ended at {last_short:?}"
    );
    assert!(finished[99] >= Duration::from_secs(2));
}
