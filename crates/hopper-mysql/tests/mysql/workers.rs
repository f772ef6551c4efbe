//! Workers on the real server, in real time: a worker that dies holding a batch, and two
//! worker runtimes sharing one queue.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hopper_core::{Broker, JobContext, NewJob, Prefetch, QueueOptions, Worker};
use hopper_mysql::MySqlBroker;

use super::support::broker_with;

async fn enqueue(broker: &Arc<dyn Broker>, n: usize) {
    let all: Vec<u64> = (0..n as u64).collect();
    for chunk in all.chunks(1000) {
        let jobs = chunk
            .iter()
            .map(|i| NewJob::json("q", i).unwrap())
            .collect();
        broker.enqueue(jobs).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_dies_mid_batch_has_its_jobs_run_by_another_after_the_lease() {
    let (broker, url) = broker_with(|o| o).await;
    enqueue(&broker, 20).await;
    // The doomed worker runs on a runtime of its own with a broker of its own, so that
    // dropping the runtime is a crash: no shutdown, no settlement, connections cut.
    let doomed = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let b = MySqlBroker::connect(&url).await.unwrap();
            let w = Worker::builder(Arc::new(b))
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
            // Past the first renewal, so the crash is not merely before the lease's first
            // extension.
            tokio::time::sleep(Duration::from_millis(600)).await;
            w.stats().fetched_jobs
        })
        // The runtime drops here with the worker and its broker inside it.
    });
    let held = doomed.join().unwrap();
    assert_eq!(held, 8, "the doomed worker held its window");
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
        "the 8 the dead worker held were charged once already: {runs:?}"
    );
    assert_eq!(broker.counts("q").await.unwrap(), Default::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_worker_runtimes_drain_ten_thousand_jobs_once_each() {
    const JOBS: usize = 10_000;
    let (broker, url) = broker_with(|o| o).await;
    enqueue(&broker, JOBS).await;
    let runs = Arc::new(Mutex::new(vec![0u8; JOBS]));
    let handled = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    for _ in 0..2 {
        let url = url.clone();
        let seen = runs.clone();
        let handled = handled.clone();
        // Each worker on a runtime and a broker of its own, as two processes would be.
        threads.push(std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let own = MySqlBroker::connect(&url).await.unwrap();
                let counter = handled.clone();
                let worker = Worker::builder(Arc::new(own))
                    .queue(
                        "q",
                        QueueOptions::new().concurrency(10),
                        move |job: JobContext<u64>| {
                            seen.lock().unwrap()[job.payload as usize] += 1;
                            counter.fetch_add(1, Ordering::Relaxed);
                            async { Ok(()) }
                        },
                    )
                    .start()
                    .unwrap();
                let deadline = Instant::now() + Duration::from_secs(120);
                while handled.load(Ordering::Relaxed) < JOBS {
                    assert!(
                        Instant::now() < deadline,
                        "stuck at {} handled",
                        handled.load(Ordering::Relaxed)
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                // Shutdown flushes the settlements still buffered.
                worker.shutdown().await.completed
            })
        }));
    }
    let per_worker: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let runs = runs.lock().unwrap().clone();
    assert!(
        runs.iter().all(|&n| n == 1),
        "lost {} / twice {}",
        runs.iter().filter(|&&n| n == 0).count(),
        runs.iter().filter(|&&n| n > 1).count()
    );
    assert_eq!(per_worker.iter().sum::<u64>(), JOBS as u64);
    assert!(
        per_worker.iter().all(|&n| n > 0),
        "both workers took part: {per_worker:?}"
    );
    assert_eq!(broker.counts("q").await.unwrap(), Default::default());
}
