//! Workers on the real server: a worker dropped mid-batch, and two runtimes sharing a queue.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper_core::{Broker, JobContext, NewJob, Prefetch, QueueOptions, Worker};
use hopper_postgres::{PgBroker, PgOptions};

use super::support::{broker_with, url};

async fn enqueue(broker: &Arc<dyn Broker>, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let jobs = chunk
            .iter()
            .map(|i| NewJob::json("q", &(*i as u64)).unwrap())
            .collect();
        broker.enqueue(jobs).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_dies_mid_batch_has_its_jobs_run_by_another_after_the_lease() {
    let (broker, pg) = broker_with(|o| o).await;
    enqueue(&broker, 20).await;
    // The doomed worker runs on a runtime of its own, with connections of its own, so that
    // dropping the runtime is a crash: no shutdown, no settlement, connections cut.
    let schema = pg.schema().to_owned();
    let doomed = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let b = PgBroker::connect_with(&url(), PgOptions::default().schema(schema))
                .await
                .unwrap();
            let w = Worker::builder(Arc::new(b))
                .lease_ttl(Duration::from_secs(1))
                .queue(
                    "q",
                    QueueOptions::new()
                        .concurrency(4)
                        .prefetch(Prefetch::Fixed(8)),
                    |_j: JobContext<u64>| async {
                        std::future::pending::<()>().await;
                        Ok(())
                    },
                )
                .start()
                .unwrap();
            while w.stats().fetched_jobs < 8 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            w.stats().fetched_jobs
        })
        // The runtime drops here with the worker inside it.
    });
    let held = doomed.join().unwrap();
    assert_eq!(held, 8);
    assert_eq!(broker.counts("q").await.unwrap().leased, 8);

    let runs = Arc::new(Mutex::new(HashMap::<u64, Vec<u32>>::new()));
    let seen = runs.clone();
    let rescuer = Worker::builder(broker.clone())
        .queue(
            "q",
            QueueOptions::new().concurrency(4),
            move |j: JobContext<u64>| {
                seen.lock()
                    .unwrap()
                    .entry(j.payload)
                    .or_default()
                    .push(j.job.attempt);
                async { Ok(()) }
            },
        )
        .start()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while rescuer.stats().completed < 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            rescuer.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rescuer.shutdown().await;
    let runs = runs.lock().unwrap();
    assert_eq!(runs.len(), 20);
    assert!(
        runs.values().all(|a| a.len() == 1),
        "each job ran once here: {runs:?}"
    );
    let second_attempts = runs.values().filter(|a| a[0] == 2).count();
    assert_eq!(
        second_attempts, 8,
        "the 8 the dead worker held were charged once already"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_worker_runtimes_drain_ten_thousand_jobs_once_each() {
    let (broker, pg) = broker_with(|o| o).await;
    enqueue(&broker, 10_000).await;
    let runs = Arc::new(Mutex::new(vec![0u8; 10_000]));
    let mut workers = Vec::new();
    for _ in 0..2 {
        let own = PgBroker::connect_with(&url(), PgOptions::default().schema(pg.schema()))
            .await
            .unwrap();
        let seen = runs.clone();
        workers.push(
            Worker::builder(Arc::new(own))
                .queue(
                    "q",
                    QueueOptions::new().concurrency(10),
                    move |j: JobContext<u64>| {
                        seen.lock().unwrap()[j.payload as usize] += 1;
                        async { Ok(()) }
                    },
                )
                .start()
                .unwrap(),
        );
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let done: u64 = workers.iter().map(|w| w.stats().completed).sum();
        if done >= 10_000 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "stuck at {done}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut per_worker = Vec::new();
    for w in workers {
        per_worker.push(w.shutdown().await.completed);
    }
    let runs = runs.lock().unwrap().clone();
    assert!(
        runs.iter().all(|&n| n == 1),
        "lost {} / twice {}",
        runs.iter().filter(|&&n| n == 0).count(),
        runs.iter().filter(|&&n| n > 1).count()
    );
    assert_eq!(per_worker.iter().sum::<u64>(), 10_000);
    assert!(
        per_worker.iter().all(|&n| n > 0),
        "both workers took part: {per_worker:?}"
    );
    assert_eq!(broker.counts("q").await.unwrap(), Default::default());
}
