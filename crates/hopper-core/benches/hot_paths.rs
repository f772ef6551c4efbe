//! Micro-benchmarks of the runtime's hot paths, one group each: fetch sizing, hand-off to
//! the pool, settlement of a grouped batch, and payload encode/decode. Run with
//! `cargo bench -p hopper-core`; criterion prints the time per iteration, and each group's
//! throughput is per job. Whole-system figures come from `hopper bench` (BENCHMARKS.md).

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use hopper_core::{
    AutoSizer, Broker, FetchRequest, JobContext, MemoryBroker, NewJob, QueueOptions, Settlement,
    Worker,
};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

#[derive(Serialize, Deserialize)]
struct Email {
    to: String,
    template: String,
    user_id: u64,
}

fn email(i: u64) -> Email {
    Email {
        to: format!("user{i}@example.com"),
        template: "welcome".into(),
        user_id: i,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The Auto rule's bookkeeping for one fetch: a job timed, the fetch recorded, the next
/// size read.
fn fetch_sizing(c: &mut Criterion) {
    let mut g = c.benchmark_group("fetch_sizing");
    g.throughput(Throughput::Elements(1));
    g.bench_function("record+fetched+size", |b| {
        let mut sizer = AutoSizer::default();
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            sizer.record(Duration::from_micros(900 + i % 200));
            let n = sizer.size();
            sizer.fetched(n, if i % 7 == 0 { n / 2 } else { n });
            black_box(sizer.size())
        });
    });
    g.finish();
}

/// A worker at concurrency 8 draining 10,000 no-op jobs from the memory broker: the event
/// loop, batched hand-offs to pool tasks and grouped settlements, per job.
fn handoff(c: &mut Criterion) {
    const JOBS: usize = 10_000;
    let rt = runtime();
    let mut g = c.benchmark_group("handoff");
    g.throughput(Throughput::Elements(JOBS as u64));
    g.sample_size(20);
    g.bench_function("drain 10k no-op jobs, c=8", |b| {
        b.to_async(&rt).iter_batched(
            || {
                let broker = Arc::new(MemoryBroker::new());
                let jobs = (0..JOBS as u64)
                    .map(|i| NewJob::json("q", &i).expect("a u64 encodes"))
                    .collect::<Vec<_>>();
                (broker, jobs)
            },
            |(broker, jobs)| async move {
                broker.enqueue(jobs).await.expect("enqueue");
                let done = Arc::new(AtomicUsize::new(0));
                let all = Arc::new(Notify::new());
                let (d, a) = (done.clone(), all.clone());
                let worker = Worker::builder(broker)
                    .queue(
                        "q",
                        QueueOptions::new().concurrency(8),
                        move |_job: JobContext<u64>| {
                            let (d, a) = (d.clone(), a.clone());
                            async move {
                                if d.fetch_add(1, Ordering::Relaxed) + 1 == JOBS {
                                    a.notify_one();
                                }
                                Ok(())
                            }
                        },
                    )
                    .start()
                    .expect("a valid worker");
                all.notified().await;
                worker.shutdown().await;
            },
            BatchSize::PerIteration,
        );
    });
    g.finish();
}

/// One grouped settlement of 256 acks, as the event loop sends it, on the memory broker.
fn settlement_grouping(c: &mut Criterion) {
    const GROUP: usize = 256;
    let rt = runtime();
    let mut g = c.benchmark_group("settlement_grouping");
    g.throughput(Throughput::Elements(GROUP as u64));
    g.bench_function("settle 256 acks", |b| {
        // Setup (enqueue, fetch) is async too, so each iteration times only the settle.
        b.to_async(&rt).iter_custom(|iters| async move {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let broker = MemoryBroker::new();
                let jobs = (0..GROUP as u64)
                    .map(|i| NewJob::json("q", &i).expect("a u64 encodes"))
                    .collect();
                broker.enqueue(jobs).await.expect("enqueue");
                let fetched = broker
                    .fetch(FetchRequest::one("q", GROUP, Duration::from_secs(60)))
                    .await
                    .expect("fetch");
                let acks: Vec<Settlement> = fetched.jobs.iter().map(Settlement::ack).collect();
                let started = Instant::now();
                let report = broker.settle(acks).await.expect("settle");
                timed += started.elapsed();
                assert_eq!(report.applied, GROUP);
            }
            timed
        });
    });
    g.finish();
}

/// A typical payload through serde_json both ways, as `NewJob::json` and a handler's
/// `JobContext<T>` do.
fn payload(c: &mut Criterion) {
    let mut g = c.benchmark_group("payload");
    g.throughput(Throughput::Elements(1));
    g.bench_function("encode", |b| {
        let value = email(42);
        b.iter(|| black_box(NewJob::json("emails", black_box(&value)).expect("encodes")));
    });
    let bytes = serde_json::to_vec(&email(42)).expect("encodes");
    g.bench_function("decode", |b| {
        b.iter(|| {
            let e: Email = serde_json::from_slice(black_box(&bytes)).expect("decodes");
            black_box(e.user_id)
        });
    });
    g.finish();
}

criterion_group!(benches, fetch_sizing, handoff, settlement_grouping, payload);
criterion_main!(benches);
