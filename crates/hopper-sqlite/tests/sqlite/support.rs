//! Temporary database files, and a broker that removes its file when dropped.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use hopper_core::{
    Broker, Bucket, CancelOutcome, Capabilities, CheckedJobs, Clock, FetchRequest, Fetched,
    GroupStatus, JobId, JobPage, JobQuery, JobRecord, LeaseId, NewJob, QueueCounts, QueueStatus,
    RateLimit, Result, Selection, SettleReport, Settlement, WorkerBeat, WorkerInfo,
};
use hopper_sqlite::{SqliteBroker, SqliteOptions};
use tokio::sync::watch;

/// A unique path under the system temp directory; the database and its `-wal` and `-shm`
/// files are removed on drop.
#[derive(Debug)]
pub struct TempDb {
    path: PathBuf,
}

impl TempDb {
    pub fn new(name: &str) -> TempDb {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let file = format!("hopper-sqlite-{}-{n}-{name}.db", std::process::id());
        let db = TempDb {
            path: std::env::temp_dir().join(file),
        };
        db.remove();
        db
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn remove(&self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = self.path.clone().into_os_string();
            name.push(suffix);
            let _ = std::fs::remove_file(name);
        }
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Opens a broker on `db` that follows tokio's clock.
pub async fn open_tokio(db: &TempDb) -> SqliteBroker {
    SqliteBroker::open_with(db.path(), SqliteOptions::default().clock(Clock::tokio()))
        .await
        .unwrap_or_else(|e| panic!("opening {}: {e:?}", db.path().display()))
}

/// The suite's factory: a fresh file per case, on tokio's clock.
pub async fn temp_broker() -> Arc<dyn Broker> {
    let db = TempDb::new("suite");
    let broker = open_tokio(&db).await;
    Arc::new(TempBroker { broker, _db: db })
}

/// A [`SqliteBroker`] that owns its temporary file. The broker is declared first so it
/// drops first: its thread closes the file before the file is removed.
#[derive(Debug)]
pub struct TempBroker {
    broker: SqliteBroker,
    _db: TempDb,
}

#[async_trait]
impl Broker for TempBroker {
    fn capabilities(&self) -> Capabilities {
        self.broker.capabilities()
    }
    fn limits(&self) -> hopper_core::Limits {
        self.broker.limits()
    }

    async fn enqueue_checked(&self, jobs: CheckedJobs) -> Result<Vec<hopper_core::Enqueued>> {
        self.broker.enqueue_checked(jobs).await
    }

    async fn fetch(&self, request: FetchRequest) -> Result<Fetched> {
        self.broker.fetch(request).await
    }

    async fn settle(&self, settlements: Vec<Settlement>) -> Result<SettleReport> {
        self.broker.settle(settlements).await
    }

    async fn renew(&self, leases: &[LeaseId], ttl: Duration) -> Result<Vec<LeaseId>> {
        self.broker.renew(leases, ttl).await
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        self.broker.cancel(id).await
    }

    async fn job(&self, id: JobId) -> Result<Option<JobRecord>> {
        self.broker.job(id).await
    }

    async fn counts(&self, queue: &str) -> Result<QueueCounts> {
        self.broker.counts(queue).await
    }

    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<JobRecord>> {
        self.broker.dead_letters(queue, limit).await
    }

    async fn purge(&self, queue: &str) -> Result<u64> {
        self.broker.purge(queue).await
    }

    async fn list_jobs(&self, query: &JobQuery) -> Result<JobPage> {
        self.broker.list_jobs(query).await
    }

    async fn retry_dead(&self, which: &Selection) -> Result<u64> {
        self.broker.retry_dead(which).await
    }

    async fn discard_dead(&self, which: &Selection) -> Result<u64> {
        self.broker.discard_dead(which).await
    }

    async fn set_paused(&self, queue: &str, paused: bool) -> Result<bool> {
        self.broker.set_paused(queue, paused).await
    }

    async fn set_rate_limit(&self, queue: &str, limit: Option<RateLimit>) -> Result<()> {
        self.broker.set_rate_limit(queue, limit).await
    }

    async fn seal_group(&self, group: &str, completion: NewJob) -> Result<GroupStatus> {
        self.broker.seal_group(group, completion).await
    }

    async fn group(&self, group: &str) -> Result<Option<GroupStatus>> {
        self.broker.group(group).await
    }

    async fn queues(&self) -> Result<Vec<String>> {
        self.broker.queues().await
    }

    async fn queue_stats(&self, queue: &str) -> Result<QueueStatus> {
        self.broker.queue_stats(queue).await
    }

    async fn queue_glance(&self, queue: &str, bound: u64) -> Result<QueueStatus> {
        self.broker.queue_glance(queue, bound).await
    }

    async fn heartbeat(&self, beat: &WorkerBeat) -> Result<()> {
        self.broker.heartbeat(beat).await
    }

    async fn deregister(&self, worker: &str) -> Result<bool> {
        self.broker.deregister(worker).await
    }

    async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        self.broker.workers().await
    }

    async fn throughput(&self, queue: &str) -> Result<Vec<Bucket>> {
        self.broker.throughput(queue).await
    }

    fn wake_signal(&self) -> Option<watch::Receiver<u64>> {
        self.broker.wake_signal()
    }
}

/// For the worker suite: a broker on a fresh file (system clock: the cases run in real
/// time), another-connection opener on the same file, and the queue `q`.
pub async fn worker_target() -> hopper_testkit::worker_cases::Target {
    let db = TempDb::new("workers");
    let connect = super::workers::connect(db.path().to_owned());
    let broker = SqliteBroker::open(db.path())
        .await
        .unwrap_or_else(|e| panic!("opening {}: {e:?}", db.path().display()));
    hopper_testkit::worker_cases::Target {
        broker: Arc::new(TempBroker { broker, _db: db }),
        connect,
        queue: "q".into(),
    }
}

/// The crate's migrations, in order, to make a file as an earlier release left it.
const MIGRATIONS: [&str; 12] = [
    include_str!("../../migrations/0001_create_jobs.sql"),
    include_str!("../../migrations/0002_one_lease_index.sql"),
    include_str!("../../migrations/0003_range_checks.sql"),
    include_str!("../../migrations/0004_operator_calls.sql"),
    include_str!("../../migrations/0005_worker_registry.sql"),
    include_str!("../../migrations/0006_unique_keys.sql"),
    include_str!("../../migrations/0007_worker_schedules.sql"),
    include_str!("../../migrations/0008_job_unique_key.sql"),
    include_str!("../../migrations/0009_ordering_keys.sql"),
    include_str!("../../migrations/0010_rate_limits.sql"),
    include_str!("../../migrations/0011_groups.sql"),
    include_str!("../../migrations/0012_rate_keys.sql"),
];

/// A connection to `db`, its schema built by the first `version` migrations and marked
/// as that version, for a test to fill before the broker opens it and migrates the rest.
pub fn file_at_version(db: &TempDb, version: usize) -> rusqlite::Connection {
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    for m in &MIGRATIONS[..version] {
        raw.execute_batch(m).unwrap();
    }
    raw.pragma_update(None, "user_version", version as i64)
        .unwrap();
    raw
}

/// The schema version `db` is marked with.
pub fn file_version(db: &TempDb) -> i64 {
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    raw.pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap()
}
