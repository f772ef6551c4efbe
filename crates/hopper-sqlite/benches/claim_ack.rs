//! Claim-then-ack throughput of one `SqliteBroker`: 100,000 jobs enqueued in batches of
//! 1,000, then drained by `tasks` concurrent loops that each fetch `batch` jobs and ack them
//! in one settle. Prints jobs per second for each shape; run with `cargo bench -p
//! hopper-sqlite`. Figures on a 2-core machine (release, WAL, synchronous = NORMAL): about
//! 22k jobs/s at batch 1 × 8 tasks, 45k at 10 × 1, 115k at 10 × 8, 150k at 100 × 1 and
//! 190k at 100 × 8. One task is bound by the two thread hops per call; concurrent tasks
//! share transactions (group commit).
//!
//! For comparisons: `HOPPER_BENCH_JOBS=N` drains N jobs instead, `HOPPER_BENCH_SHAPES=10x1,100x1`
//! runs only those shapes (batch x tasks), and `HOPPER_BENCH_RATE=MAX/PER_MS` puts the
//! queue under that rate limit (one that never binds measures what keeping the window costs
//! a claim).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hopper_core::{Broker, FetchRequest, NewJob, RateLimit, Settlement};
use hopper_sqlite::SqliteBroker;

const JOBS: usize = 100_000;
const SHAPES: [(usize, usize); 5] = [(1, 8), (10, 1), (10, 8), (100, 1), (100, 8)];

fn remove(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(name);
    }
}

async fn drain(broker: Arc<dyn Broker>, batch: usize) -> usize {
    let mut done = 0;
    loop {
        let request = FetchRequest::one("bench", batch, Duration::from_secs(60));
        let fetched = broker.fetch(request).await.expect("fetch");
        if fetched.jobs.is_empty() {
            return done;
        }
        done += fetched.jobs.len();
        let acks = fetched.jobs.iter().map(Settlement::ack).collect();
        broker.settle(acks).await.expect("settle");
    }
}

/// The shapes to run: `HOPPER_BENCH_SHAPES` (`10x1,100x8`), else [`SHAPES`].
fn shapes() -> Vec<(usize, usize)> {
    let Ok(text) = std::env::var("HOPPER_BENCH_SHAPES") else {
        return SHAPES.to_vec();
    };
    text.split(',')
        .map(|shape| {
            let (batch, tasks) = shape.split_once('x').expect("a shape is BATCHxTASKS");
            (
                batch.trim().parse().expect("a batch"),
                tasks.trim().parse().expect("a task count"),
            )
        })
        .collect()
}

/// The rate limit of `HOPPER_BENCH_RATE` (`MAX/PER_MS`), if set.
fn rate() -> Option<RateLimit> {
    let text = std::env::var("HOPPER_BENCH_RATE").ok()?;
    let (max, per) = text.split_once('/').expect("a rate is MAX/PER_MS");
    let per = Duration::from_millis(per.parse().expect("a window in ms"));
    Some(RateLimit::new(max.parse().expect("a max"), per).expect("a valid limit"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let path = std::env::temp_dir().join(format!("hopper-bench-{}.db", std::process::id()));
    let jobs: usize =
        std::env::var("HOPPER_BENCH_JOBS").map_or(JOBS, |n| n.parse().expect("a count"));
    for (batch, tasks) in shapes() {
        remove(&path);
        let broker: Arc<dyn Broker> = Arc::new(SqliteBroker::open(&path).await.expect("open"));
        if let Some(limit) = rate() {
            broker
                .set_rate_limit("bench", Some(limit))
                .await
                .expect("a rate limit");
        }
        let started = Instant::now();
        for chunk in 0..jobs.div_ceil(1_000) {
            let batch = (chunk * 1_000..jobs.min((chunk + 1) * 1_000))
                .map(|i| NewJob::new("bench", (i as u64).to_le_bytes()))
                .collect();
            broker.enqueue(batch).await.expect("enqueue");
        }
        let enqueue_rate = jobs as f64 / started.elapsed().as_secs_f64();

        let started = Instant::now();
        let loops: Vec<_> = (0..tasks)
            .map(|_| tokio::spawn(drain(broker.clone(), batch)))
            .collect();
        let mut done = 0;
        for task in loops {
            done += task.await.expect("drain task");
        }
        assert_eq!(done, jobs, "every job acked once");
        let rate = done as f64 / started.elapsed().as_secs_f64();
        println!(
            "batch {batch:>3} x {tasks} tasks: claim+ack {rate:>8.0} jobs/s \
             (enqueue {enqueue_rate:.0} jobs/s)"
        );
        drop(broker);
    }
    remove(&path);
}
