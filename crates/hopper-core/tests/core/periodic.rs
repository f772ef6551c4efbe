//! Periodic jobs under tokio's paused clock: each slot is enqueued once however many
//! workers hold the schedule, a missed slot is run once at start or skipped by policy,
//! and schedules are refused where the broker cannot keep one job per slot.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use hopper_core::broker::{CheckedJobs, FetchRequest, Fetched, SettleReport, Settlement};
use hopper_core::schedule::{SCHEDULE_HEADER, SLOT_HEADER};
use hopper_core::{
    Broker, CancelOutcome, Capabilities, Clock, Enqueued, JobId, JobRecord, LeaseId, MemoryBroker,
    Missed, NewJob, QueueCounts, Result, Schedule, Worker,
};

/// A memory broker and the clock it reads, for the workers to read too.
fn broker_and_clock() -> (Arc<dyn Broker>, Clock) {
    let clock = Clock::tokio();
    (Arc::new(MemoryBroker::with_clock(clock)), clock)
}

fn every_minute(missed: Missed) -> Schedule {
    let job = NewJob::new("reports", b"{}".to_vec());
    Schedule::every("tick", Duration::from_secs(60), job)
        .unwrap()
        .missed(missed)
}

/// Moves time on by `total` in steps of `step`, letting the workers' tasks run.
async fn pass(total: Duration, step: Duration) {
    let mut left = total;
    while !left.is_zero() {
        let d = step.min(left);
        tokio::time::advance(d).await;
        tokio::task::yield_now().await;
        left -= d;
    }
}

/// The slots of the jobs waiting in `queue`, from their headers, in order.
async fn slots(broker: &Arc<dyn Broker>, queue: &str) -> Vec<i64> {
    let fetched = broker
        .fetch(FetchRequest::one(queue, 1000, Duration::from_secs(60)))
        .await
        .unwrap();
    let mut slots: Vec<i64> = fetched
        .jobs
        .iter()
        .map(|j| {
            assert_eq!(j.headers[SCHEDULE_HEADER], "tick");
            j.headers[SLOT_HEADER].parse().unwrap()
        })
        .collect();
    slots.sort_unstable();
    slots
}

#[tokio::test(start_paused = true)]
async fn three_workers_enqueue_each_slot_once() {
    let (broker, clock) = broker_and_clock();
    let start = clock.now_millis();
    let workers: Vec<Worker> = (0..3)
        .map(|_| {
            Worker::builder(broker.clone())
                .clock(clock)
                .schedule(every_minute(Missed::Skip))
                .start()
                .unwrap()
        })
        .collect();
    pass(Duration::from_secs(600), Duration::from_millis(250)).await;
    let mut made = (0, 0, 0);
    for w in workers {
        let s = w.shutdown().await;
        made = (
            made.0 + s.slots_enqueued,
            made.1 + s.slots_taken_elsewhere,
            made.2 + s.slots_missed,
        );
    }
    let slots = slots(&broker, "reports").await;
    let first = (start / 60_000 + 1) * 60_000;
    let expected: Vec<i64> = (0..10).map(|i| first + i * 60_000).collect();
    assert_eq!(
        slots, expected,
        "one job per slot, every slot of the ten minutes"
    );
    assert_eq!(made, (10, 20, 0), "enqueued / taken elsewhere / missed");
}

#[tokio::test(start_paused = true)]
async fn a_missed_slot_runs_once_at_start_or_is_skipped() {
    let (broker, clock) = broker_and_clock();
    // Nobody was up for the latest slot. With RunOnce, the first worker to start enqueues
    // it and a second one started later in the same minute finds it taken.
    let once = Worker::builder(broker.clone())
        .clock(clock)
        .schedule(every_minute(Missed::RunOnce))
        .start()
        .unwrap();
    pass(Duration::from_millis(10), Duration::from_millis(10)).await;
    let latest = clock.now_millis() / 60_000 * 60_000;
    let late = Worker::builder(broker.clone())
        .clock(clock)
        .schedule(every_minute(Missed::RunOnce))
        .start()
        .unwrap();
    pass(Duration::from_millis(10), Duration::from_millis(10)).await;
    let (a, b) = (once.shutdown().await, late.shutdown().await);
    assert_eq!(
        (a.slots_enqueued, b.slots_enqueued, b.slots_taken_elsewhere),
        (1, 0, 1)
    );
    assert_eq!(slots(&broker, "reports").await, vec![latest]);

    // With Skip, a worker started mid-minute enqueues nothing until the next slot.
    let (broker, clock) = broker_and_clock();
    let skip = Worker::builder(broker.clone())
        .clock(clock)
        .schedule(every_minute(Missed::Skip))
        .start()
        .unwrap();
    pass(Duration::from_millis(10), Duration::from_millis(10)).await;
    assert_eq!(broker.counts("reports").await.unwrap().pending, 0);
    assert_eq!(skip.shutdown().await.slots_enqueued, 0);
}

/// A broker that enforces no unique keys; only its capabilities are ever read.
#[derive(Debug)]
struct NoKeys;

#[async_trait]
impl Broker for NoKeys {
    fn capabilities(&self) -> Capabilities {
        Capabilities::pushed("nokeys")
    }
    async fn enqueue_checked(&self, _: CheckedJobs) -> Result<Vec<Enqueued>> {
        unreachable!("never started")
    }
    async fn fetch(&self, _: FetchRequest) -> Result<Fetched> {
        unreachable!("never started")
    }
    async fn settle(&self, _: Vec<Settlement>) -> Result<SettleReport> {
        unreachable!("never started")
    }
    async fn renew(&self, _: &[LeaseId], _: Duration) -> Result<Vec<LeaseId>> {
        unreachable!("never started")
    }
    async fn cancel(&self, _: JobId) -> Result<CancelOutcome> {
        unreachable!("never started")
    }
    async fn job(&self, _: JobId) -> Result<Option<JobRecord>> {
        unreachable!("never started")
    }
    async fn counts(&self, _: &str) -> Result<QueueCounts> {
        unreachable!("never started")
    }
    async fn dead_letters(&self, _: &str, _: usize) -> Result<Vec<JobRecord>> {
        unreachable!("never started")
    }
    async fn purge(&self, _: &str) -> Result<u64> {
        unreachable!("never started")
    }
}

#[tokio::test]
async fn schedules_are_refused_where_slots_cannot_be_unique() {
    let refused = Worker::builder(Arc::new(NoKeys))
        .schedule(every_minute(Missed::Skip))
        .check()
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .starts_with("invalid schedule tick `on the nokeys broker`"),
        "{refused}"
    );
    let (broker, _) = broker_and_clock();
    let twice = Worker::builder(broker)
        .schedule(every_minute(Missed::Skip))
        .schedule(every_minute(Missed::RunOnce))
        .check()
        .unwrap_err();
    assert_eq!(
        twice.to_string(),
        "invalid schedule `tick`: allowed: each schedule name at most once per worker"
    );
}
