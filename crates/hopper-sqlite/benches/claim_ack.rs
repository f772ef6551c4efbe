//! Claim-then-ack throughput of one `SqliteBroker`: 100,000 jobs enqueued in batches of
//! 1,000, then drained by `tasks` concurrent loops that each fetch `batch` jobs and ack them
//! in one settle. Prints jobs per second for each shape; run with `cargo bench -p
//! hopper-sqlite`. Figures on a 2-core machine (release, WAL, synchronous = NORMAL): about
//! 22k jobs/s at batch 1 × 8 tasks, 45k at 10 × 1, 115k at 10 × 8, 150k at 100 × 1 and
//! 190k at 100 × 8. One task is bound by the two thread hops per call; concurrent tasks
//! share transactions (group commit).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hopper_core::{Broker, FetchRequest, NewJob, Settlement};
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let path = std::env::temp_dir().join(format!("hopper-bench-{}.db", std::process::id()));
    for (batch, tasks) in SHAPES {
        remove(&path);
        let broker: Arc<dyn Broker> = Arc::new(SqliteBroker::open(&path).await.expect("open"));
        let started = Instant::now();
        for chunk in 0..JOBS / 1_000 {
            let jobs = (0..1_000)
                .map(|i| NewJob::new("bench", ((chunk * 1_000 + i) as u64).to_le_bytes()))
                .collect();
            broker.enqueue(jobs).await.expect("enqueue");
        }
        let enqueue_rate = JOBS as f64 / started.elapsed().as_secs_f64();

        let started = Instant::now();
        let loops: Vec<_> = (0..tasks)
            .map(|_| tokio::spawn(drain(broker.clone(), batch)))
            .collect();
        let mut done = 0;
        for task in loops {
            done += task.await.expect("drain task");
        }
        assert_eq!(done, JOBS, "every job acked once");
        let rate = done as f64 / started.elapsed().as_secs_f64();
        println!(
            "batch {batch:>3} x {tasks} tasks: claim+ack {rate:>8.0} jobs/s \
             (enqueue {enqueue_rate:.0} jobs/s)"
        );
        drop(broker);
    }
    remove(&path);
}
