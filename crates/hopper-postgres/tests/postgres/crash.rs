//! The server crashes mid-drain (`pg_ctl stop -m immediate` on a private cluster, then
//! start): claims and renewals commit without waiting for the WAL flush, and with
//! `durable_settlements(false)` so do acks, so the crash loses some of each. No job may be
//! lost, and the worker must carry on by itself.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hopper_core::{Broker, JobContext, QueueOptions, Worker};
use hopper_postgres::{PgBroker, PgOptions};

use hopper_testkit::pg_cluster::Cluster;

const JOBS: usize = 20_000;

#[derive(Debug)]
struct Tally {
    lost: usize,
    duplicated: usize,
    held_at_crash: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_crash_mid_drain_loses_no_job_and_reruns_only_what_was_held() {
    let tally = crash_mid_drain(PgOptions::default()).await;
    // Acks are durable, and each durable commit flushes the claims before it: only jobs
    // claimed since the last ack can run again, and those were held (running, waiting in
    // the window or in a fetch on the wire) when the server went.
    assert_eq!(tally.lost, 0, "{tally:?}");
    assert!(tally.duplicated <= tally.held_at_crash, "{tally:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_crash_with_relaxed_settlements_loses_no_job() {
    let tally = crash_mid_drain(PgOptions::default().durable_settlements(false)).await;
    // Acks lost with the crash re-run their jobs: duplicates are allowed, losses are not.
    assert_eq!(tally.lost, 0, "{tally:?}");
}

async fn crash_mid_drain(options: PgOptions) -> Tally {
    let cluster = Cluster::start();
    let url = cluster.url();
    hopper_postgres::migrate_with(&url, &options)
        .await
        .expect("migrate");
    let broker = Arc::new(PgBroker::connect_with(&url, options).await.unwrap()) as Arc<dyn Broker>;
    hopper_testkit::workers::enqueue(&broker, JOBS).await;
    let runs = Arc::new(Mutex::new(vec![0u32; JOBS]));
    let started = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let worker = {
        let (runs, started, finished) = (runs.clone(), started.clone(), finished.clone());
        Worker::builder(broker.clone())
            .lease_ttl(Duration::from_secs(2))
            .queue(
                "q",
                QueueOptions::new().concurrency(10),
                move |job: JobContext<u64>| {
                    runs.lock().unwrap()[job.payload as usize] += 1;
                    started.fetch_add(1, Ordering::Relaxed);
                    let finished = finished.clone();
                    async move {
                        tokio::time::sleep(Duration::from_micros(200)).await;
                        finished.fetch_add(1, Ordering::Relaxed);
                        Ok(())
                    }
                },
            )
            .start()
            .unwrap()
    };
    wait_for("a quarter of the jobs", || {
        finished.load(Ordering::Relaxed) >= JOBS / 4
    })
    .await;
    // A job can run twice only if it was fetched and its ack had not been applied when the
    // server went: fewer than the jobs fetched by just after the restart, less the acks
    // applied by just before the crash.
    let before = worker.stats();
    cluster.restart_immediate();
    let after = worker.stats();
    let held_at_crash = (after.fetched_jobs - before.completed) as usize;
    wait_for("every job to run", || {
        runs.lock().unwrap().iter().all(|&n| n > 0)
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match broker.counts("q").await {
            Ok(c) if c == Default::default() => break,
            other => assert!(Instant::now() < deadline, "queue not empty: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = worker.shutdown().await;
    let runs = runs.lock().unwrap().clone();
    let tally = Tally {
        lost: runs.iter().filter(|&&n| n == 0).count(),
        duplicated: runs.iter().map(|&n| n.saturating_sub(1) as usize).sum(),
        held_at_crash,
    };
    eprintln!(
        "crash mid-drain: {tally:?}, started {}, completed {}",
        started.load(Ordering::Relaxed),
        report.completed
    );
    tally
}

async fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
