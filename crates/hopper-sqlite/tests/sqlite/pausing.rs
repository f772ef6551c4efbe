//! A queue paused through another broker of the file (its own connection and thread, as
//! another process would have) stops a draining worker, and resuming it there restarts
//! the worker. In real time: the worker waits on the brokers' threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hopper_core::{Broker, JobContext, Prefetch, QueueOptions, Worker};
use hopper_sqlite::SqliteBroker;
use hopper_testkit::helpers::enqueue_n;

use super::support::TempDb;

const JOBS: usize = 400;
/// The worker's concurrency and window: the most jobs it holds claimed and not started.
const WINDOW: usize = 2;

/// Waits (up to 30 s) until `started` reaches `n`.
async fn until_started(started: &AtomicUsize, n: usize) {
    let waited = tokio::time::timeout(Duration::from_secs(30), async {
        while started.load(Ordering::SeqCst) < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "{} of {n} jobs started",
        started.load(Ordering::SeqCst)
    );
}

/// The worker takes nothing it had not already claimed once the pause commits: counting
/// from when `set_paused` returned, at most its window starts in the next second and none
/// in the second after. Resumed, it runs every other job, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_by_another_broker_stops_a_draining_worker_and_a_resume_restarts_it() {
    let db = TempDb::new("pause-worker");
    let broker: Arc<dyn Broker> = Arc::new(SqliteBroker::open(db.path()).await.unwrap());
    let operator = SqliteBroker::open(db.path()).await.unwrap();
    enqueue_n(&broker, "q", JOBS).await;
    let started = Arc::new(AtomicUsize::new(0));
    let counter = started.clone();
    let options = QueueOptions::new()
        .concurrency(WINDOW)
        .prefetch(Prefetch::Slots);
    let worker = Worker::builder(broker)
        .queue("q", options, move |_job: JobContext<u64>| {
            counter.fetch_add(1, Ordering::SeqCst);
            async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(())
            }
        })
        .start()
        .unwrap();

    until_started(&started, 20).await;
    assert!(operator.set_paused("q", true).await.unwrap(), "paused");
    let at_pause = started.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let within_a_second = started.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = started.load(Ordering::SeqCst);
    eprintln!(
        "paused with {at_pause} of {JOBS} started; {} more in the next second, {} in the one \
         after",
        within_a_second - at_pause,
        after - within_a_second
    );
    assert!(
        within_a_second - at_pause <= WINDOW,
        "{} jobs started after the pause, more than the window of {WINDOW}",
        within_a_second - at_pause
    );
    assert_eq!(
        after, within_a_second,
        "jobs started over a second after the pause"
    );
    assert!(
        after < JOBS,
        "the queue drained before the pause: make the jobs slower"
    );
    let counts = operator.counts("q").await.unwrap();
    assert_eq!(
        (counts.pending, counts.leased),
        ((JOBS - after) as u64, 0),
        "the rest wait, none held"
    );

    assert!(operator.set_paused("q", false).await.unwrap(), "resumed");
    until_started(&started, JOBS).await;
    let stats = worker.shutdown().await;
    assert_eq!(stats.completed, JOBS as u64, "each job completed once");
    assert_eq!(
        started.load(Ordering::SeqCst),
        JOBS,
        "each job started once"
    );
    assert_eq!(
        operator.counts("q").await.unwrap(),
        hopper_core::QueueCounts::default()
    );
}
