//! [`WithCleanup`]: a broker that runs a cleanup when the last handle to it drops, so a
//! suite case on a server broker leaves no schema, database or vhost behind; it also counts
//! the calls that reach the broker.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use hopper_core::{
    Broker, Bucket, CancelOutcome, Capabilities, CheckedJobs, FetchRequest, Fetched, JobId,
    JobPage, JobQuery, JobRecord, LeaseId, QueueCounts, QueueStatus, Result, Selection,
    SettleReport, Settlement, WorkerBeat, WorkerInfo,
};
use tokio::sync::watch;

type Cleanup = Box<dyn FnOnce() + Send + Sync>;

/// A broker plus a cleanup that runs after the broker itself is dropped.
///
/// The cleanup is a plain closure: run it on a thread of its own (with its own runtime if it
/// needs async I/O), since it may be dropped inside a runtime that is shutting down.
pub struct WithCleanup {
    broker: Option<Arc<dyn Broker>>,
    cleanup: Option<Cleanup>,
    /// Calls that reach the broker (every async call; not `capabilities` and the like).
    calls: AtomicU64,
}

impl WithCleanup {
    /// Wraps `broker`; `cleanup` runs when this wrapper drops, after the broker.
    pub fn new(broker: Arc<dyn Broker>, cleanup: impl FnOnce() + Send + Sync + 'static) -> Self {
        WithCleanup {
            broker: Some(broker),
            cleanup: Some(Box::new(cleanup)),
            calls: AtomicU64::new(0),
        }
    }

    fn inner(&self) -> &Arc<dyn Broker> {
        self.broker.as_ref().expect("present until drop")
    }

    /// The broker, for a call that reaches it: counted.
    fn called(&self) -> &Arc<dyn Broker> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner()
    }

    /// How many calls reached the broker so far: what a caller cost it.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for WithCleanup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("WithCleanup").field(self.inner()).finish()
    }
}

impl Drop for WithCleanup {
    fn drop(&mut self) {
        drop(self.broker.take());
        if let Some(cleanup) = self.cleanup.take() {
            // A thread of its own: the cleanup may block, and we may be inside a runtime.
            let _ = std::thread::spawn(cleanup).join();
        }
    }
}

#[async_trait]
impl Broker for WithCleanup {
    fn capabilities(&self) -> Capabilities {
        self.inner().capabilities()
    }
    fn limits(&self) -> hopper_core::Limits {
        self.inner().limits()
    }
    async fn enqueue_checked(&self, jobs: CheckedJobs) -> Result<Vec<hopper_core::Enqueued>> {
        self.called().enqueue_checked(jobs).await
    }
    async fn fetch(&self, request: FetchRequest) -> Result<Fetched> {
        self.called().fetch(request).await
    }
    async fn settle(&self, settlements: Vec<Settlement>) -> Result<SettleReport> {
        self.called().settle(settlements).await
    }
    async fn renew(&self, leases: &[LeaseId], ttl: Duration) -> Result<Vec<LeaseId>> {
        self.called().renew(leases, ttl).await
    }
    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        self.called().cancel(id).await
    }
    async fn job(&self, id: JobId) -> Result<Option<JobRecord>> {
        self.called().job(id).await
    }
    async fn counts(&self, queue: &str) -> Result<QueueCounts> {
        self.called().counts(queue).await
    }
    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<JobRecord>> {
        self.called().dead_letters(queue, limit).await
    }
    async fn purge(&self, queue: &str) -> Result<u64> {
        self.called().purge(queue).await
    }
    async fn list_jobs(&self, query: &JobQuery) -> Result<JobPage> {
        self.called().list_jobs(query).await
    }
    async fn retry_dead(&self, which: &Selection) -> Result<u64> {
        self.called().retry_dead(which).await
    }
    async fn discard_dead(&self, which: &Selection) -> Result<u64> {
        self.called().discard_dead(which).await
    }
    async fn set_paused(&self, queue: &str, paused: bool) -> Result<bool> {
        self.called().set_paused(queue, paused).await
    }
    async fn set_rate_limit(
        &self,
        queue: &str,
        limit: Option<hopper_core::RateLimit>,
    ) -> Result<()> {
        self.called().set_rate_limit(queue, limit).await
    }
    async fn seal_group(
        &self,
        group: &str,
        completion: hopper_core::NewJob,
    ) -> Result<hopper_core::GroupStatus> {
        self.called().seal_group(group, completion).await
    }
    async fn group(&self, group: &str) -> Result<Option<hopper_core::GroupStatus>> {
        self.called().group(group).await
    }
    async fn queues(&self) -> Result<Vec<String>> {
        self.called().queues().await
    }
    async fn queue_stats(&self, queue: &str) -> Result<QueueStatus> {
        self.called().queue_stats(queue).await
    }
    async fn queue_glance(&self, queue: &str, bound: u64) -> Result<QueueStatus> {
        self.called().queue_glance(queue, bound).await
    }
    async fn heartbeat(&self, beat: &WorkerBeat) -> Result<()> {
        self.called().heartbeat(beat).await
    }
    async fn deregister(&self, worker: &str) -> Result<bool> {
        self.called().deregister(worker).await
    }
    async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        self.called().workers().await
    }
    async fn throughput(&self, queue: &str) -> Result<Vec<Bucket>> {
        self.called().throughput(queue).await
    }
    async fn subscribe(&self, queue: &str, window: Option<u32>) -> Result<()> {
        self.called().subscribe(queue, window).await
    }
    async fn unsubscribe(&self, queue: &str) -> Result<()> {
        self.called().unsubscribe(queue).await
    }
    fn wake_signal(&self) -> Option<watch::Receiver<u64>> {
        self.inner().wake_signal()
    }
}

/// A name no other test of any process uses at the same time: `prefix_<pid>_<n>`, made of
/// characters every server accepts in a schema, database or queue name.
pub fn unique_name(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
