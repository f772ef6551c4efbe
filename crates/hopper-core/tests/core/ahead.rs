//! Round trips in flight: on a broker with a round trip, a queue with the default window
//! fetches ahead of its slots by what they complete in one round trip, with several
//! fetches out at once, so that its slots do not wait on the network; explicit policies
//! keep one fetch at a time. On tokio's paused clock, so the times asserted are exact.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use hopper_core::worker::MAX_FETCHES_IN_FLIGHT;
use hopper_core::{
    Broker, CancelOutcome, Capabilities, CheckedJobs, Clock, FetchRequest, Fetched, JobContext,
    JobId, JobRecord, LeaseId, MemoryBroker, NewJob, Prefetch, QueueCounts, QueueOptions, Result,
    SettleReport, Settlement, Worker, WorkerStats,
};
use tokio::time::Instant;

use super::support::{Remote, wait_for};

/// The fetch round trip.
const RTT: Duration = Duration::from_millis(5);
/// Each job's work.
const WORK: Duration = Duration::from_millis(1);
const JOBS: u64 = 2_000;

/// Drains 2,000 jobs of 1 ms at concurrency 10 over a 5 ms round trip; returns the
/// worker's figures and how long the drain took.
async fn drain(prefetch: Option<Prefetch>) -> (WorkerStats, Duration) {
    let broker: Arc<dyn Broker> = Arc::new(Remote::new(RTT));
    let jobs = (0..JOBS).map(|i| NewJob::json("q", &i).unwrap()).collect();
    broker.enqueue(jobs).await.unwrap();
    let mut opts = QueueOptions::new().concurrency(10);
    if let Some(p) = prefetch {
        opts = opts.prefetch(p);
    }
    let started = Instant::now();
    let worker = Worker::builder(broker)
        .queue("q", opts, |_job: JobContext<u64>| async {
            tokio::time::sleep(WORK).await;
            Ok(())
        })
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == JOBS).await;
    let took = started.elapsed();
    worker.shutdown().await;
    (stats, took)
}

#[tokio::test(start_paused = true)]
async fn the_default_window_keeps_the_round_trip_covered() {
    let (stats, took) = drain(None).await;
    // The slots complete 10 jobs a millisecond: 2,000 take 200 ms of work, and fetching
    // ahead hides all but the first round trips.
    assert!(took <= Duration::from_millis(230), "drained in {took:?}");
    assert!(
        (2..=MAX_FETCHES_IN_FLIGHT).contains(&stats.peak_fetches_in_flight),
        "{} fetches in flight at most",
        stats.peak_fetches_in_flight
    );
    // Ahead by 2 × 10 slots × 5 ms ÷ 1 ms = 100 jobs: the window is 110, and no fetch
    // asks more than max_batch (50).
    let q = &stats.queues["q"];
    assert!(q.peak_held <= 110, "held {} at most", q.peak_held);
    assert!(
        stats.batch_sizes.iter().all(|&n| n <= 50),
        "{:?}",
        stats.batch_sizes
    );
    assert_eq!(stats.fetched_jobs, JOBS);
}

#[tokio::test(start_paused = true)]
async fn explicit_slots_keep_one_fetch_at_a_time() {
    let (stats, took) = drain(Some(Prefetch::Slots)).await;
    assert_eq!(stats.peak_fetches_in_flight, 1);
    assert!(
        stats.batch_sizes.iter().all(|&n| n <= 10),
        "{:?}",
        stats.batch_sizes
    );
    // Each window of 10 waits a round trip: at least 200 fetches × 5 ms.
    assert!(took >= Duration::from_millis(1_000), "drained in {took:?}");
}

/// A worker woken for one job after its backlog ran out sends one fetch, not one per
/// fetch it may keep in flight: a queue fetches beside another fetch only while the last
/// one came back full.
#[tokio::test(start_paused = true)]
async fn a_wake_for_one_job_sends_one_fetch() {
    let remote = Arc::new(Remote::new(RTT));
    let broker: Arc<dyn Broker> = remote.clone();
    let jobs = (0..500u64)
        .map(|i| NewJob::json("q", &i).unwrap())
        .collect();
    broker.enqueue(jobs).await.unwrap();
    let worker = Worker::builder(broker.clone())
        .queue(
            "q",
            QueueOptions::new().concurrency(10),
            |_job: JobContext<u64>| async {
                tokio::time::sleep(WORK).await;
                Ok(())
            },
        )
        .start()
        .unwrap();
    let before = wait_for(&worker, |s| s.completed == 500).await;
    assert!(before.peak_fetches_in_flight >= 2);
    // Let the fetches still out come back empty.
    tokio::time::sleep(10 * RTT).await;
    let idle = worker.stats();
    broker
        .enqueue(vec![NewJob::json("q", &500u64).unwrap()])
        .await
        .unwrap();
    let after = wait_for(&worker, |s| s.completed == 501).await;
    tokio::time::sleep(10 * RTT).await;
    let settled = worker.stats();
    worker.shutdown().await;
    assert_eq!(
        (
            after.fetches - idle.fetches,
            settled.empty_fetches - idle.empty_fetches
        ),
        (1, 0),
        "non-empty / empty fetches for the one job"
    );
}

/// A broker that claims at once and answers each fetch after a delay of its own, so that
/// answers can come back in another order than their claims ran. It counts the fetches
/// in flight at once, the most seen by a fetch from number [`LATE`] on.
#[derive(Debug)]
struct LateAnswers {
    inner: MemoryBroker,
    calls: AtomicUsize,
    /// The answer delay of each fetch by its number; [`RTT`] past the end.
    delays: Vec<Duration>,
    inside: AtomicUsize,
    peak_late: AtomicUsize,
}

/// The fetch from which [`LateAnswers`] records how many are in flight at once.
const LATE: usize = 40;

impl LateAnswers {
    fn new(delays: Vec<Duration>) -> Self {
        LateAnswers {
            inner: MemoryBroker::with_clock(Clock::tokio()),
            calls: AtomicUsize::new(0),
            delays,
            inside: AtomicUsize::new(0),
            peak_late: AtomicUsize::new(0),
        }
    }
}

#[async_trait]
impl Broker for LateAnswers {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().without_in_process().named("late")
    }
    async fn enqueue_checked(&self, jobs: CheckedJobs) -> Result<Vec<hopper_core::Enqueued>> {
        self.inner.enqueue_checked(jobs).await
    }
    async fn fetch(&self, request: FetchRequest) -> Result<Fetched> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        let inside = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        if call >= LATE {
            self.peak_late.fetch_max(inside, Ordering::SeqCst);
        }
        let fetched = self.inner.fetch(request).await;
        tokio::time::sleep(self.delays.get(call).copied().unwrap_or(RTT)).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
        fetched
    }
    async fn settle(&self, settlements: Vec<Settlement>) -> Result<SettleReport> {
        self.inner.settle(settlements).await
    }
    async fn renew(&self, leases: &[LeaseId], ttl: Duration) -> Result<Vec<LeaseId>> {
        self.inner.renew(leases, ttl).await
    }
    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        self.inner.cancel(id).await
    }
    async fn job(&self, id: JobId) -> Result<Option<JobRecord>> {
        self.inner.job(id).await
    }
    async fn counts(&self, queue: &str) -> Result<QueueCounts> {
        self.inner.counts(queue).await
    }
    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<JobRecord>> {
        self.inner.dead_letters(queue, limit).await
    }
    async fn purge(&self, queue: &str) -> Result<u64> {
        self.inner.purge(queue).await
    }
    fn wake_signal(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.inner.wake_signal()
    }
}

/// Only a queue's latest fetch can show it drained. Here the second fetch claims the last
/// 10 jobs of the first backlog and answers only after 30 ms; meanwhile 1,000 jobs arrive,
/// and later fetches (whose sends took the wake-up) claim them 50 at a time. The second
/// fetch's short answer, arriving in the middle of that, must not stop the queue until
/// the 1 s poll: the 1,010 jobs end within a few hundred milliseconds.
#[tokio::test(start_paused = true)]
async fn a_late_short_answer_does_not_stall_the_queue() {
    let mut delays = vec![RTT; 2];
    delays[1] = Duration::from_millis(30);
    let broker: Arc<dyn Broker> = Arc::new(LateAnswers::new(delays));
    let jobs = (0..20u64).map(|i| NewJob::json("q", &i).unwrap()).collect();
    broker.enqueue(jobs).await.unwrap();
    let started = Instant::now();
    let worker = Worker::builder(broker.clone())
        .queue(
            "q",
            QueueOptions::new().concurrency(10),
            |_job: JobContext<u64>| async {
                tokio::time::sleep(WORK).await;
                Ok(())
            },
        )
        .start()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(8)).await;
    let more = (20..1_020u64)
        .map(|i| NewJob::json("q", &i).unwrap())
        .collect();
    broker.enqueue(more).await.unwrap();
    let stats = wait_for(&worker, |s| s.completed == 1_020).await;
    let took = started.elapsed();
    worker.shutdown().await;
    assert!(stats.peak_fetches_in_flight >= 2);
    assert!(took < Duration::from_millis(400), "drained in {took:?}");
}

/// `Prefetch::Auto` at a distance: its fetches keep the sizes of its rule (at most 16 a
/// fetch, starting from 1), but once the round trip outlasts a fetch's worth of work it
/// keeps several in flight. One at a time, each fetch of 16 would cost a 5 ms round trip
/// for 1.6 ms of work on the 10 slots: 2,000 jobs in about 800 ms instead of 200.
#[tokio::test(start_paused = true)]
async fn auto_keeps_fetches_in_flight_when_the_round_trip_outlasts_a_fetch() {
    let (stats, took) = drain(Some(Prefetch::Auto)).await;
    assert!(took <= Duration::from_millis(300), "drained in {took:?}");
    assert!(
        (2..=MAX_FETCHES_IN_FLIGHT).contains(&stats.peak_fetches_in_flight),
        "{} fetches in flight at most",
        stats.peak_fetches_in_flight
    );
    assert_eq!(stats.batch_sizes[0], 1);
    assert!(
        stats.batch_sizes.iter().all(|&n| n <= 16),
        "{:?}",
        stats.batch_sizes
    );
    assert_eq!(stats.fetched_jobs, JOBS);
}

/// Where the round trip is short against the work (0.1 ms against 10 ms jobs at
/// concurrency 1), Auto keeps one fetch at a time and its sizes are exactly its rule's.
#[tokio::test(start_paused = true)]
async fn auto_keeps_its_rule_where_the_round_trip_is_short() {
    let broker: Arc<dyn Broker> = Arc::new(Remote::new(Duration::from_micros(100)));
    let jobs = (0..62u64).map(|i| NewJob::json("q", &i).unwrap()).collect();
    broker.enqueue(jobs).await.unwrap();
    let worker = Worker::builder(broker)
        .queue(
            "q",
            QueueOptions::new().concurrency(1).prefetch(Prefetch::Auto),
            |_job: JobContext<u64>| async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok(())
            },
        )
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == 62).await;
    worker.shutdown().await;
    assert_eq!(stats.peak_fetches_in_flight, 1);
    assert_eq!(stats.batch_sizes, [1, 1, 2, 2, 4, 4, 8, 8, 16, 16]);
}

/// Fetches that queue at the broker are not stacked. The first 20 fetches come back in
/// 1 ms, every later one in 10 ms, as from a server that got busy: the round trip has
/// grown past three times the shortest seen, so another fetch beside those in flight
/// would only wait there (and, with several workers on one table, contend with their
/// claims: four PostgreSQL workers drained at 0.5–0.6 of one). From then on the worker
/// sends one fetch at a time; without the rule it kept four out.
#[tokio::test(start_paused = true)]
async fn fetches_that_queue_at_the_broker_are_not_stacked() {
    let mut delays = vec![Duration::from_millis(1); 20];
    delays.resize(10_000, Duration::from_millis(10));
    let server = Arc::new(LateAnswers::new(delays));
    let broker: Arc<dyn Broker> = server.clone();
    let n = 5_000u64;
    let jobs = (0..n).map(|i| NewJob::json("q", &i).unwrap()).collect();
    broker.enqueue(jobs).await.unwrap();
    let worker = Worker::builder(broker)
        .queue(
            "q",
            QueueOptions::new().concurrency(10),
            |_job: JobContext<u64>| async {
                tokio::time::sleep(Duration::from_micros(100)).await;
                Ok(())
            },
        )
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == n).await;
    worker.shutdown().await;
    assert_eq!(stats.fetched_jobs, n);
    assert!(server.calls.load(Ordering::SeqCst) > LATE + 10);
    assert_eq!(
        server.peak_late.load(Ordering::SeqCst),
        1,
        "fetches in flight at once once the round trip grew"
    );
}

/// A broker far away, not a busy one: after the first fetches, which open their
/// connections (40 ms each), every fetch takes the same 5 ms however many are in flight,
/// as across a network where the server answers them side by side. A fetch sent beside
/// three others then times as a quarter of the round trip, which must not make fetches
/// sent alone look queued. Before, the shortest time kept was such a quarter: the slow
/// first fetches tipped the rule, each fetch from then on went out alone and, timed at the
/// whole round trip, looked queued for good (PostgreSQL 5 ms away at concurrency 100:
/// 13.4k jobs/s, a fetch at a time, against 58k at 0 ms).
#[tokio::test(start_paused = true)]
async fn fetches_answered_side_by_side_stay_in_flight() {
    let server = Arc::new(LateAnswers::new(vec![Duration::from_millis(40); 4]));
    let broker: Arc<dyn Broker> = server.clone();
    let n = 20_000u64;
    let jobs = (0..n).map(|i| NewJob::json("q", &i).unwrap()).collect();
    broker.enqueue(jobs).await.unwrap();
    let started = Instant::now();
    let worker = Worker::builder(broker)
        .queue(
            "q",
            QueueOptions::new().concurrency(100).max_batch(100),
            |_job: JobContext<u64>| async { Ok(()) },
        )
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == n).await;
    let took = started.elapsed();
    worker.shutdown().await;
    assert_eq!(stats.fetched_jobs, n);
    assert_eq!(
        server.peak_late.load(Ordering::SeqCst),
        MAX_FETCHES_IN_FLIGHT,
        "fetches in flight at once after the first {LATE}"
    );
    // Four fetches of 100 a round trip: 20,000 jobs in 50 round trips, 250 ms, after the
    // first 80 ms; one at a time took over 1,000 ms.
    assert!(took <= Duration::from_millis(400), "drained in {took:?}");
}
