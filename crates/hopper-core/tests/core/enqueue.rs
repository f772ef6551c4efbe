//! A new job is checked once, in core, before any broker sees it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use hopper_core::{
    Broker, CancelOutcome, Capabilities, CheckedJobs, Error, FetchRequest, Fetched, JobId,
    JobRecord, LeaseId, MemoryBroker, NewJob, QueueCounts, Result, SettleReport, Settlement,
};

/// A broker that counts the jobs it was asked to store and stores them in memory.
#[derive(Debug, Default)]
struct Counting {
    inner: MemoryBroker,
    stored: AtomicUsize,
    calls: AtomicUsize,
}

#[async_trait]
impl Broker for Counting {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().named("counting")
    }
    async fn enqueue_checked(&self, jobs: CheckedJobs) -> Result<Vec<hopper_core::Enqueued>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.stored.fetch_add(jobs.len(), Ordering::SeqCst);
        self.inner.enqueue_checked(jobs).await
    }
    async fn fetch(&self, request: FetchRequest) -> Result<Fetched> {
        self.inner.fetch(request).await
    }
    async fn settle(&self, settlements: Vec<Settlement>) -> Result<SettleReport> {
        self.inner.settle(settlements).await
    }
    async fn renew(&self, leases: &[LeaseId], ttl: std::time::Duration) -> Result<Vec<LeaseId>> {
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
}

#[tokio::test]
async fn one_bad_job_refuses_the_batch_before_the_broker_sees_it() {
    let broker = Arc::new(Counting::default());
    let jobs = vec![
        NewJob::new("mail", b"a".to_vec()),
        NewJob::new("bad queue!", b"b".to_vec()),
        NewJob::new("mail", b"c".to_vec()),
    ];
    let err = broker.enqueue(jobs).await.unwrap_err();
    let Error::Config(config) = &err else {
        panic!("expected a configuration error, got {err:?}");
    };
    assert!(err.to_string().contains("bad queue!"), "{err}");
    assert_eq!(config.setting, "queue");
    assert_eq!(config.value, "bad queue!");
    assert_eq!(broker.calls.load(Ordering::SeqCst), 0);
    assert_eq!(broker.inner.counts("mail").await.unwrap().pending, 0);

    let ids = broker
        .enqueue(vec![NewJob::new("mail", b"a".to_vec()); 3])
        .await
        .unwrap();
    assert_eq!(ids.len(), 3);
    assert_eq!(broker.calls.load(Ordering::SeqCst), 1);
    assert_eq!(broker.stored.load(Ordering::SeqCst), 3);
    assert_eq!(broker.inner.counts("mail").await.unwrap().pending, 3);
}

#[test]
fn checked_jobs_keep_their_order() {
    let jobs = (0..4u8)
        .map(|i| NewJob::new(format!("q{i}"), vec![i]))
        .collect::<Vec<_>>();
    let checked = CheckedJobs::check(jobs).unwrap();
    let queues = checked.iter().map(|j| j.queue.as_str()).collect::<Vec<_>>();
    assert_eq!(queues, ["q0", "q1", "q2", "q3"]);
    let payloads = checked
        .into_vec()
        .into_iter()
        .map(|j| j.payload[0])
        .collect::<Vec<_>>();
    assert_eq!(payloads, [0, 1, 2, 3]);
}
