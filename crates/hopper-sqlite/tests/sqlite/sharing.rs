//! Two brokers, each with its own connection and thread, sharing one file (and, in one
//! process, one wake signal).

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{
    Broker, FetchRequest, JobContext, NewJob, QueueCounts, QueueOptions, Settlement, Worker,
};
use hopper_sqlite::SqliteBroker;
use hopper_testkit::helpers::{assert_each_once, claim_concurrently, enqueue_n};
use tokio::sync::mpsc::UnboundedReceiver;

use super::support::TempDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_brokers_on_one_file_never_take_the_same_job() {
    let db = TempDb::new("shared");
    let one: Arc<dyn Broker> = Arc::new(SqliteBroker::open(db.path()).await.unwrap());
    let two: Arc<dyn Broker> = Arc::new(SqliteBroker::open(db.path()).await.unwrap());
    let mut made = Vec::with_capacity(2_000);
    for broker in [&one, &two, &one, &two] {
        made.extend(enqueue_n(broker, "q", 500).await);
    }
    let seen = claim_concurrently(&[one.clone(), two.clone()], "q", 8, 25).await;
    assert_each_once(&seen, &made);
    assert_eq!(two.counts("q").await.unwrap(), QueueCounts::default());
}

/// A job enqueued through one broker wakes an idle worker on another broker of the same
/// file in this process: they share one wake signal. The worker's poll is 60 s, so only
/// the signal can start the job within the 10 s allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_on_one_broker_wakes_a_worker_on_another_of_the_same_file() {
    let db = TempDb::new("wake");
    let producer = SqliteBroker::open(db.path()).await.unwrap();
    let consumer: Arc<dyn Broker> = Arc::new(SqliteBroker::open(db.path()).await.unwrap());
    let (worker, mut rx) = recording_worker(consumer, Duration::from_secs(60));
    for i in 0..3u32 {
        // Let the worker find the queue empty and go idle first.
        tokio::time::sleep(Duration::from_millis(100)).await;
        producer
            .enqueue(vec![NewJob::json("q", &i).unwrap()])
            .await
            .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("woken by the shared signal, not the 60 s poll")
            .map(|(payload, _)| payload);
        assert_eq!(got, Some(i));
    }
    assert_eq!(worker.shutdown().await.completed, 3);
}

/// A worker at concurrency 1 on queue `q` that polls every `poll` and reports each job's
/// payload and the time it started (µs since the epoch).
fn recording_worker(
    broker: Arc<dyn Broker>,
    poll: Duration,
) -> (Worker, UnboundedReceiver<(u32, u64)>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = Worker::builder(broker)
        .poll_interval(poll)
        .queue(
            "q",
            QueueOptions::new().concurrency(1),
            move |job: JobContext<u32>| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send((job.payload, micros_now()));
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
    (worker, rx)
}

/// The environment variables that make [`producer_process`] enqueue.
const PRODUCER_DB: &str = "HOPPER_TEST_PRODUCER_DB";
const PRODUCER_PAYLOAD: &str = "HOPPER_TEST_PRODUCER_PAYLOAD";

/// A job committed by another process wakes an idle worker: each broker watches its file.
/// The other process is this test binary run again, as [`producer_process`]; the worker
/// polls once an hour, so only the watch can start a job within the 30 s allowed. The
/// broker's own commits wake nothing: claims and acks of another queue through it leave
/// the idle worker's fetch count as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_by_another_process_wakes_an_idle_worker() {
    let db = TempDb::new("other-process");
    let consumer: Arc<dyn Broker> = Arc::new(SqliteBroker::open(db.path()).await.unwrap());
    let (worker, mut rx) = recording_worker(consumer.clone(), Duration::from_secs(3600));
    let exe = std::env::current_exe().unwrap();
    for i in 0..3u32 {
        // Let the worker find the queue empty and go idle first.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (exe, path) = (exe.clone(), db.path().to_owned());
        let output = tokio::task::spawn_blocking(move || {
            std::process::Command::new(exe)
                .args(["--exact", "sqlite::sharing::producer_process", "--ignored"])
                .args(["--nocapture", "--quiet"])
                .env(PRODUCER_DB, &path)
                .env(PRODUCER_PAYLOAD, i.to_string())
                .output()
        })
        .await
        .unwrap()
        .unwrap();
        assert!(output.status.success(), "the producer process failed");
        let (got, started_us) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("woken by the file watch, not the hour's poll")
            .unwrap();
        assert_eq!(got, i);
        // What the producer printed: when its enqueue returned (committed), in µs.
        let committed_us = String::from_utf8_lossy(&output.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("committed_us=")?.parse::<u64>().ok());
        if let Some(committed_us) = committed_us {
            eprintln!(
                "job {i}: committed by the other process, started {} µs later",
                started_us.saturating_sub(committed_us)
            );
        }
    }
    // The broker's own commits wake nothing. Jobs of another queue are enqueued through
    // it first (which wakes the worker in this process, once, by design), then claimed
    // and acknowledged through it while the worker is idle: six commits of its own, each
    // setting off a series of checks, and not one fetch by the worker.
    let others = (0..3u32)
        .map(|n| NewJob::json("other", &n).unwrap())
        .collect();
    consumer.enqueue(others).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fetches = |w: &Worker| {
        let stats = w.stats();
        stats.fetches + stats.empty_fetches
    };
    let before = fetches(&worker);
    for _ in 0..3 {
        let got = consumer
            .fetch(FetchRequest::one("other", 1, Duration::from_secs(30)))
            .await
            .unwrap();
        assert_eq!(got.jobs.len(), 1, "a job of the other queue");
        consumer
            .settle(vec![Settlement::ack(&got.jobs[0])])
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        fetches(&worker),
        before,
        "the broker's own commits woke its idle worker"
    );
    assert_eq!(worker.shutdown().await.completed, 3);
}

/// Not a test of its own: the other process of
/// [`a_commit_by_another_process_wakes_an_idle_worker`], which enqueues one job through a
/// broker of its own when the environment names a file.
#[test]
#[ignore = "the producer process of a_commit_by_another_process_wakes_an_idle_worker"]
fn producer_process() {
    let (Ok(path), Ok(payload)) = (std::env::var(PRODUCER_DB), std::env::var(PRODUCER_PAYLOAD))
    else {
        return;
    };
    let payload: u32 = payload.parse().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let broker = SqliteBroker::open(&path).await.unwrap();
        broker
            .enqueue(vec![NewJob::json("q", &payload).unwrap()])
            .await
            .unwrap();
        println!("committed_us={}", micros_now());
    });
}

fn micros_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}
