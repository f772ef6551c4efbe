//! Worker-level cases for brokers shared by several processes, in real time: a worker that
//! dies holding a batch, and two worker runtimes draining one queue.
//!
//! Each takes `connect`, which opens a NEW broker on the same store (its own connections),
//! as another process would. Workers run on runtimes of their own, on threads of their own,
//! so that dropping one is a crash: no shutdown, no settlement, connections cut.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hopper_core::{Broker, JobContext, NewJob, Prefetch, QueueOptions, Worker};

/// Opens another broker on the store under test.
pub type Connect =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Arc<dyn Broker>> + Send>> + Send + Sync>;

/// Enqueues jobs `0..n` on queue `q`, each payload its number, a thousand per call.
pub async fn enqueue(broker: &Arc<dyn Broker>, n: usize) {
    let all: Vec<u64> = (0..n as u64).collect();
    for chunk in all.chunks(1000) {
        let jobs = chunk
            .iter()
            .map(|i| NewJob::json("q", i).unwrap())
            .collect();
        broker.enqueue(jobs).await.unwrap();
    }
}

fn own_runtime<T>(f: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime for a worker")
        .block_on(f)
}

/// 20 jobs; a worker with a window of 8 and a 1 s lease claims 8 and dies. A second worker
/// runs all 20 once each: the 8 at attempt 2 after their lease expired, the rest at 1.
pub async fn dead_worker_jobs_run_after_the_lease(broker: Arc<dyn Broker>, connect: Connect) {
    enqueue(&broker, 20).await;
    let doomed = std::thread::spawn(move || {
        own_runtime(async move {
            let w = Worker::builder(connect().await)
                .lease_ttl(Duration::from_secs(1))
                .queue(
                    "q",
                    QueueOptions::new()
                        .concurrency(4)
                        .prefetch(Prefetch::Fixed(8)),
                    |_job: JobContext<u64>| async {
                        std::future::pending::<()>().await;
                        Ok(())
                    },
                )
                .start()
                .unwrap();
            while w.stats().fetched_jobs < 8 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // Past the first renewal, so the crash is not merely before any extension.
            tokio::time::sleep(Duration::from_millis(600)).await;
            w.stats().fetched_jobs
        })
        // The runtime drops here with the worker and its broker inside it.
    });
    assert_eq!(
        doomed.join().unwrap(),
        8,
        "the doomed worker held its window"
    );
    assert_eq!(broker.counts("q").await.unwrap().leased, 8);

    let runs = Arc::new(Mutex::new(HashMap::<u64, Vec<u32>>::new()));
    let seen = runs.clone();
    let rescuer = Worker::builder(broker.clone())
        .queue(
            "q",
            QueueOptions::new().concurrency(4),
            move |job: JobContext<u64>| {
                seen.lock()
                    .unwrap()
                    .entry(job.payload)
                    .or_default()
                    .push(job.job.attempt);
                async { Ok(()) }
            },
        )
        .start()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while rescuer.stats().completed < 20 {
        assert!(Instant::now() < deadline, "{:?}", rescuer.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rescuer.shutdown().await;
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 20, "every job ran");
    assert!(
        runs.values().all(|a| a.len() == 1),
        "each job ran once here: {runs:?}"
    );
    let second = runs.values().filter(|a| a[0] == 2).count();
    let first = runs.values().filter(|a| a[0] == 1).count();
    assert_eq!(
        (second, first),
        (8, 12),
        "the 8 the dead worker held were charged once: {runs:?}"
    );
    assert_eq!(broker.counts("q").await.unwrap(), Default::default());
}

/// Two worker runtimes, each on a broker of its own, drain `jobs` jobs: none lost, none run
/// twice, both take part. A worker's first jobs wait until the other has started one too,
/// so that a worker fast enough to drain the backlog before the other starts cannot make
/// the case pass or fail by timing: it passes only if neither holds back the other.
pub async fn two_runtimes_drain_once_each(broker: Arc<dyn Broker>, connect: Connect, jobs: usize) {
    enqueue(&broker, jobs).await;
    let runs = Arc::new(Mutex::new(vec![0u8; jobs]));
    let handled = Arc::new(AtomicUsize::new(0));
    // Workers that have started a job.
    let joined = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    for _ in 0..2 {
        let (connect, seen, handled) = (connect.clone(), runs.clone(), handled.clone());
        let joined = joined.clone();
        threads.push(std::thread::spawn(move || {
            own_runtime(async move {
                let counter = handled.clone();
                let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
                let worker = Worker::builder(connect().await)
                    .queue(
                        "q",
                        QueueOptions::new().concurrency(10),
                        move |job: JobContext<u64>| {
                            seen.lock().unwrap()[job.payload as usize] += 1;
                            counter.fetch_add(1, Ordering::Relaxed);
                            if first.swap(false, Ordering::Relaxed) {
                                joined.fetch_add(1, Ordering::Relaxed);
                            }
                            let joined = joined.clone();
                            async move {
                                while joined.load(Ordering::Relaxed) < 2 {
                                    tokio::time::sleep(Duration::from_millis(1)).await;
                                }
                                Ok(())
                            }
                        },
                    )
                    .start()
                    .unwrap();
                let deadline = Instant::now() + Duration::from_secs(120);
                while handled.load(Ordering::Relaxed) < jobs {
                    let n = handled.load(Ordering::Relaxed);
                    assert!(Instant::now() < deadline, "stuck at {n} handled");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                // Shutdown flushes the settlements still buffered.
                worker.shutdown().await.completed
            })
        }));
    }
    let per_worker: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let runs = runs.lock().unwrap().clone();
    let lost = runs.iter().filter(|&&n| n == 0).count();
    let twice = runs.iter().filter(|&&n| n > 1).count();
    assert_eq!((lost, twice), (0, 0), "lost / run twice");
    assert_eq!(per_worker.iter().sum::<u64>(), jobs as u64);
    assert!(
        per_worker.iter().all(|&n| n > 0),
        "both workers took part: {per_worker:?}"
    );
    assert_eq!(broker.counts("q").await.unwrap(), Default::default());
}
