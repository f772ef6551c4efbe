//! What the operator calls cost on a large queue: 1,000,000 pending jobs enqueued in
//! batches of 1,000 (each batch sharing its `run_at`, so a cursor lands among ties), beside
//! ten small queues holding dead letters. Prints the best and median of 20 calls, timed
//! from the caller (the hop to the database thread included), for a page of 100 at the
//! front and half-way down, both ways, and for `queues()`, `queue_stats()`, `queue_glance()`
//! (counts bounded by `COUNT_BOUND`, as the dashboard asks) and `counts()`.
//! Run with `cargo bench -p hopper-sqlite --bench admin_pages`.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hopper_core::admin::COUNT_BOUND;
use hopper_core::{Broker, Cursor, FetchRequest, JobQuery, ListState, NewJob, Outcome, Settlement};
use hopper_sqlite::SqliteBroker;

const JOBS: usize = 1_000_000;
const PAGE: usize = 100;
const RUNS: usize = 20;

fn remove(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(name);
    }
}

/// Runs `call` [`RUNS`] times; prints the best and the median.
async fn time<F, Fut, T>(what: &str, mut call: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let mut took: Vec<Duration> = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let started = Instant::now();
        std::hint::black_box(call().await);
        took.push(started.elapsed());
    }
    took.sort();
    println!(
        "{what:<44} best {:>8.3} ms, median {:>8.3} ms",
        took[0].as_secs_f64() * 1e3,
        took[RUNS / 2].as_secs_f64() * 1e3
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let path = std::env::temp_dir().join(format!("hopper-admin-{}.db", std::process::id()));
    remove(&path);
    let broker: Arc<dyn Broker> = Arc::new(SqliteBroker::open(&path).await.expect("open"));
    let started = Instant::now();
    let mut made = Vec::with_capacity(JOBS);
    for chunk in 0..JOBS / 1_000 {
        let jobs = (0..1_000)
            .map(|i| NewJob::new("bench", ((chunk * 1_000 + i) as u64).to_le_bytes()))
            .collect();
        made.extend(broker.enqueue(jobs).await.expect("enqueue"));
    }
    for q in 0..10 {
        let queue = format!("small-{q}");
        let jobs = (0..10).map(|_| NewJob::new(queue.as_str(), "x")).collect();
        broker.enqueue(jobs).await.expect("enqueue");
        let held = broker
            .fetch(FetchRequest::one(
                queue.as_str(),
                5,
                Duration::from_secs(60),
            ))
            .await
            .expect("fetch");
        let dead = held
            .jobs
            .iter()
            .map(|j| Settlement {
                job: j.id,
                lease: held.lease,
                outcome: Outcome::DeadLetter {
                    error: "broken".into(),
                },
            })
            .collect();
        broker.settle(dead).await.expect("settle");
    }
    println!(
        "{JOBS} pending jobs enqueued in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let middle = broker
        .job(made[JOBS / 2])
        .await
        .expect("job")
        .expect("the middle job");
    let deep = Cursor {
        key: i64::from(middle.job.priority),
        sub: middle.job.run_at,
        id: middle.job.id,
    };
    let pages = [
        ("pending, first page", ListState::Pending, false, None),
        (
            "pending, half-way down",
            ListState::Pending,
            false,
            Some(deep),
        ),
        (
            "pending newest first, first page",
            ListState::Pending,
            true,
            None,
        ),
        (
            "pending newest first, half-way up",
            ListState::Pending,
            true,
            Some(deep),
        ),
        (
            "scheduled (none), first page",
            ListState::Scheduled,
            false,
            None,
        ),
    ];
    for (what, state, newest_first, after) in pages {
        let query = JobQuery {
            newest_first,
            after,
            ..JobQuery::new("bench", state, PAGE)
        };
        let page = broker.list_jobs(&query).await.expect("list");
        let expected = if state == ListState::Scheduled {
            0
        } else {
            PAGE
        };
        assert_eq!(page.jobs.len(), expected, "{what}");
        time(&format!("list_jobs {PAGE}: {what}"), || {
            broker.list_jobs(&query)
        })
        .await;
    }
    let queues = broker.queues().await.expect("queues");
    assert_eq!(queues.len(), 11);
    time("queues() (11 queues)", || broker.queues()).await;
    time("queue_stats(bench)", || broker.queue_stats("bench")).await;
    let glance = broker
        .queue_glance("bench", COUNT_BOUND)
        .await
        .expect("glance");
    assert_eq!(glance.bound, Some(COUNT_BOUND));
    assert_eq!(
        glance.counts.pending,
        COUNT_BOUND + 1,
        "more than the bound"
    );
    time("queue_glance(bench, COUNT_BOUND)", || {
        broker.queue_glance("bench", COUNT_BOUND)
    })
    .await;
    time("counts(bench), within queue_stats", || {
        broker.counts("bench")
    })
    .await;
    drop(broker);
    remove(&path);
}
