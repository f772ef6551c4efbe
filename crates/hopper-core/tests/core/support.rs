//! Helpers shared by the test modules.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use hopper_core::{
    Broker, CancelOutcome, Capabilities, CheckedJobs, Clock, Error, FetchRequest, Fetched, JobId,
    JobRecord, LeaseId, MemoryBroker, NewJob, QueueCounts, Result, SettleReport, Settlement,
    Worker, WorkerStats,
};
use tokio::sync::Notify;
use tokio::time::Instant;

/// A memory broker on tokio's clock, so leases and delays follow paused time.
pub fn memory() -> (MemoryBroker, Arc<dyn Broker>) {
    let b = MemoryBroker::with_clock(Clock::tokio());
    let dyn_b: Arc<dyn Broker> = Arc::new(b.clone());
    (b, dyn_b)
}

/// Enqueues `n` jobs whose payload is their index, in one call.
pub async fn enqueue_n(broker: &Arc<dyn Broker>, queue: &str, n: usize) -> Vec<hopper_core::JobId> {
    let jobs = (0..n)
        .map(|i| NewJob::json(queue, &(i as u64)).unwrap())
        .collect();
    broker.enqueue(jobs).await.unwrap()
}

/// Waits, in paused time, until `done(stats)` holds; panics after an hour of virtual time.
pub async fn wait_for(worker: &Worker, done: impl Fn(&WorkerStats) -> bool) -> WorkerStats {
    let start = Instant::now();
    loop {
        let s = worker.stats();
        if done(&s) {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(3600),
            "condition not reached; stats: {s:#?}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// How [`Remote`] answers a lease renewal.
#[derive(Debug, Clone)]
pub enum Renewal {
    /// As the memory broker does.
    Real,
    /// Every lease is lost, at once.
    LostNow,
    /// Every lease is lost, answered only after the next settlement went through: what a
    /// SQL broker answers when a lease's last job was settled on another connection while
    /// the renewal was on its way.
    LostAfterSettle(Arc<Notify>),
    /// Never answered: the worker is cut off from the broker (a network partition).
    Hangs,
}

/// How [`Remote`] answers a settlement.
#[derive(Debug, Clone)]
pub enum Settling {
    /// As the memory broker does.
    Real,
    /// With an error while the flag is set (the broker is down), as the memory broker once
    /// it is cleared.
    FailsWhile(Arc<AtomicBool>),
    /// Never: the connection hangs.
    Hangs,
}

/// The memory broker behind a fixed round trip on every fetch, and saying it is not
/// in-process: what a SQL broker looks like to the worker, on tokio's paused clock.
#[derive(Debug)]
pub struct Remote {
    pub inner: MemoryBroker,
    pub rtt: Duration,
    pub renewal: Renewal,
    pub settling: Settling,
}

impl Remote {
    pub fn new(rtt: Duration) -> Remote {
        Remote {
            inner: MemoryBroker::with_clock(Clock::tokio()),
            rtt,
            renewal: Renewal::Real,
            settling: Settling::Real,
        }
    }
}

#[async_trait]
impl Broker for Remote {
    fn capabilities(&self) -> Capabilities {
        self.inner
            .capabilities()
            .without_in_process()
            .named("remote")
    }
    async fn enqueue_checked(&self, jobs: CheckedJobs) -> Result<Vec<hopper_core::Enqueued>> {
        self.inner.enqueue_checked(jobs).await
    }
    async fn fetch(&self, request: FetchRequest) -> Result<Fetched> {
        tokio::time::sleep(self.rtt).await;
        self.inner.fetch(request).await
    }
    async fn settle(&self, settlements: Vec<Settlement>) -> Result<SettleReport> {
        match &self.settling {
            Settling::Real => {}
            Settling::FailsWhile(down) if down.load(Ordering::SeqCst) => {
                return Err(Error::broker_msg("the broker is down"));
            }
            Settling::FailsWhile(_) => {}
            Settling::Hangs => std::future::pending::<()>().await,
        }
        let report = self.inner.settle(settlements).await;
        if let Renewal::LostAfterSettle(settled) = &self.renewal {
            settled.notify_one();
        }
        report
    }
    async fn renew(&self, leases: &[LeaseId], ttl: Duration) -> Result<Vec<LeaseId>> {
        match &self.renewal {
            Renewal::Real => self.inner.renew(leases, ttl).await,
            Renewal::LostNow => Ok(leases.to_vec()),
            Renewal::LostAfterSettle(settled) => {
                settled.notified().await;
                Ok(leases.to_vec())
            }
            Renewal::Hangs => std::future::pending().await,
        }
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

/// A handler that does nothing and succeeds.
pub async fn noop(_job: hopper_core::JobContext<u64>) -> hopper_core::JobResult {
    Ok(())
}
