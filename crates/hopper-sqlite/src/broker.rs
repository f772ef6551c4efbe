//! [`SqliteBroker`]: the [`Broker`] over one SQLite file.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use hopper_core::admin::{JobPage, JobQuery, QueueStatus, Selection};
use hopper_core::clock::Pace;
use hopper_core::group::{validate_completion, validate_group};
use hopper_core::job::validate_queue_name;
use hopper_core::{
    AdminCalls, Broker, Bucket, CancelOutcome, Capabilities, CheckedJobs, Clock, Enqueued,
    FetchRequest, Fetched, GroupStatus, JobId, JobRecord, LeaseId, Millis, NewJob, QueueCounts,
    RateLimit, Result, SettleReport, Settlement, WorkerBeat, WorkerInfo,
};
use tokio::sync::watch;

use crate::admin::{self, Redrive};
use crate::options::SqliteOptions;
use crate::unique::SweepCursor;
use crate::watch::{FileWatch, watch_file};
use crate::writer::Writer;
use crate::{groups, queries, rate, registry, unique};

/// The embedded broker: every job in one SQLite file, no server.
///
/// One thread owns the connection and runs the calls of all handles in groups, one
/// transaction per group (see the crate docs). Cheap to clone: clones share that thread.
/// When the last clone drops, the thread finishes the calls already sent, closes the file
/// and exits; the drop waits for that, which takes at most one group's time (and one check
/// of the file watch, if one is in flight).
///
/// Several brokers, in one process or many, may open the same file: claims are made
/// inside write transactions and only while a job is still pending, so no job is handed
/// to two of them. They must all read the system clock ([`Clock::System`]) to agree on
/// lease expiry.
///
/// Each call reads "now" from the broker's [`Clock`] on the caller's side and sends it
/// with the command; the database thread never reads a clock, so brokers built with
/// [`Clock::tokio`] follow tokio's paused time exactly.
///
/// A call whose future is dropped once sent still runs: a fetch abandoned that way still
/// claims its jobs, which return to their queue when the lease expires.
#[derive(Clone)]
pub struct SqliteBroker {
    inner: Arc<Inner>,
}

struct Inner {
    /// Watches the file for commits by other processes (see [`crate::watch`]). Declared
    /// before the writer so that it is dropped first: its thread holds a sender of the
    /// writer's, whose thread exits (and whose drop returns) only once every sender is gone.
    _watch: Option<FileWatch>,
    writer: Writer,
    clock: Clock,
    limits: hopper_core::Limits,
    path: PathBuf,
    /// Bumped after committed work that a worker could take (an enqueue, a retry or a
    /// release, a re-driven dead letter, a resumed queue, a job unblocked when the one
    /// before it of its ordering key ended), so an idle worker in this
    /// process wakes at once rather than at its next poll. Shared by every broker of this
    /// process open on the same file (see [`wake_for`]), so a job enqueued through one
    /// wakes a worker on another; commits by other processes bump it through the file
    /// watch.
    wake: Arc<watch::Sender<u64>>,
    /// Taking expired leases back, at most once a [`REAP_EVERY_MS`].
    reap_pace: Pace,
    /// Where the next worker report's step of the sweep of stale unique keys starts
    /// ([`unique::sweep`]). Each process walks the keys on its own; two reports racing
    /// for it only examine some keys twice.
    unique_sweep: Mutex<SweepCursor>,
}

/// How often, at most, a fetch takes expired leases back. Their two statements ran on
/// every fetch before, each walking the leased jobs' expiry index and building a temporary
/// table of the rows it would change, even when none had expired. A job whose lease ran
/// out waits up to this long more, as on PostgreSQL.
const REAP_EVERY_MS: Millis = 1000;

/// The wake signal of each open file in this process, by canonical path.
static WAKES: LazyLock<Mutex<HashMap<PathBuf, Weak<watch::Sender<u64>>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The wake signal shared by this process's brokers on the file at `path` (which exists
/// once the writer opened it); a new one when none is open.
fn wake_for(path: &Path) -> Arc<watch::Sender<u64>> {
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut wakes = WAKES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    wakes.retain(|_, w| w.strong_count() > 0);
    if let Some(wake) = wakes.get(&key).and_then(Weak::upgrade) {
        return wake;
    }
    let wake = Arc::new(watch::channel(0).0);
    wakes.insert(key, Arc::downgrade(&wake));
    wake
}

impl fmt::Debug for SqliteBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteBroker")
            .field("path", &self.inner.path)
            .field("clock", &self.inner.clock)
            .finish_non_exhaustive()
    }
}

impl SqliteBroker {
    /// Opens (creating if needed) the database at `path` with default [`SqliteOptions`].
    ///
    /// Opening happens on the broker's own thread, so awaiting this does not block the
    /// runtime; it does not need a runtime's clock or I/O driver either.
    ///
    /// # Errors
    /// A broker error naming the path when the file cannot be opened, configured or
    /// migrated, or when its schema is newer than this build knows.
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteBroker> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// Opens (creating if needed) the database at `path` with `options`. See
    /// [`open`](Self::open).
    ///
    /// # Errors
    /// As [`open`](Self::open), and a configuration error for an invalid option.
    pub async fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteBroker> {
        options.validate()?;
        let path = path.as_ref().to_path_buf();
        let writer = Writer::start(path.clone(), &options).await?;
        let wake = wake_for(&path);
        // Read before the broker is handed out, so that every commit by another process
        // from here on changes it.
        let data_version = writer
            .call("reading the data version", false, |conn| {
                conn.query_row("PRAGMA data_version", [], |row| row.get::<_, i64>(0))
            })
            .await?;
        let watch = writer
            .sender()
            .and_then(|commands| watch_file(&path, data_version, commands, wake.clone()));
        Ok(SqliteBroker {
            inner: Arc::new(Inner {
                _watch: watch,
                writer,
                clock: options.clock,
                limits: hopper_core::Limits {
                    max_payload: options.max_payload,
                },
                path,
                wake,
                reap_pace: Pace::new(REAP_EVERY_MS),
                unique_sweep: Mutex::new(None),
            }),
        })
    }

    /// The file this broker opened.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    fn now(&self) -> Millis {
        self.inner.clock.now_millis()
    }

    fn wake(&self) {
        self.inner.wake.send_modify(|n| *n = n.wrapping_add(1));
    }
}

fn millis(d: Duration) -> Millis {
    Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)
}

#[async_trait]
impl Broker for SqliteBroker {
    fn capabilities(&self) -> Capabilities {
        Capabilities::leased_sql("sqlite")
            .with_admin(AdminCalls::RECORDS)
            .with_unique()
            .with_ordered()
            .with_rate_limits_per_key()
            .with_groups()
    }

    fn limits(&self) -> hopper_core::Limits {
        self.inner.limits
    }

    /// A batch without unique or ordering keys or groups is inserted as it always was; one
    /// with keys looks up each unique key's holder, and each ordering key's unfinished jobs,
    /// in the same write transaction (`unique::enqueue`); one with members of groups also
    /// checks that none of their groups is sealed, and counts them (`groups::enqueue`).
    async fn enqueue_checked(&self, jobs: CheckedJobs) -> Result<Vec<Enqueued>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now();
        let plain = jobs.iter().all(|job| {
            job.unique.is_none()
                && job.ordering_key.is_none()
                && job.group.is_none()
                && job.rate_key.is_none()
        });
        let members = jobs.iter().any(|job| job.group.is_some());
        let done = if plain {
            let ids = self
                .inner
                .writer
                .call("enqueueing jobs", true, move |conn| {
                    queries::enqueue(conn, &jobs, now)
                })
                .await?;
            ids.into_iter().map(Enqueued::stored).collect()
        } else if members {
            self.inner
                .writer
                .call("enqueueing members of groups", true, move |conn| {
                    groups::enqueue(conn, &jobs, now)
                })
                .await??
        } else {
            self.inner
                .writer
                .call("enqueueing jobs with keys", true, move |conn| {
                    unique::enqueue(conn, &jobs, now)
                })
                .await?
        };
        if done.iter().any(|e| !e.existing) {
            self.wake();
        }
        Ok(done)
    }

    async fn fetch(&self, request: FetchRequest) -> Result<Fetched> {
        let now = self.now();
        let lease = LeaseId::random();
        let expires = now.saturating_add(millis(request.lease_ttl));
        let reap = self.inner.reap_pace.due(now);
        let claimed = self
            .inner
            .writer
            .call("fetching jobs", true, move |conn| {
                queries::fetch(conn, &request.budgets, lease, expires, now, reap)
            })
            .await?;
        if claimed.unblocked {
            self.wake();
        }
        Ok(Fetched {
            lease,
            jobs: claimed.jobs,
            next_due: claimed.next_due,
        })
    }

    async fn settle(&self, settlements: Vec<Settlement>) -> Result<SettleReport> {
        if settlements.is_empty() {
            return Ok(SettleReport::default());
        }
        let now = self.now();
        let (report, requeued) = self
            .inner
            .writer
            .call("settling jobs", true, move |conn| {
                queries::settle(conn, &settlements, now)
            })
            .await?;
        if requeued {
            self.wake();
        }
        Ok(report)
    }

    async fn renew(&self, leases: &[LeaseId], ttl: Duration) -> Result<Vec<LeaseId>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now();
        let expires = now.saturating_add(millis(ttl));
        let leases = leases.to_vec();
        self.inner
            .writer
            .call("renewing leases", true, move |conn| {
                queries::renew(conn, &leases, expires, now)
            })
            .await
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        let now = self.now();
        let (outcome, unblocked) = self
            .inner
            .writer
            .call("cancelling a job", true, move |conn| {
                queries::cancel(conn, id, now)
            })
            .await?;
        if unblocked {
            self.wake();
        }
        Ok(outcome)
    }

    async fn job(&self, id: JobId) -> Result<Option<JobRecord>> {
        self.inner
            .writer
            .call("reading a job", false, move |conn| queries::job(conn, id))
            .await
    }

    async fn counts(&self, queue: &str) -> Result<QueueCounts> {
        let now = self.now();
        let queue = queue.to_owned();
        self.inner
            .writer
            .call("counting jobs", false, move |conn| {
                queries::counts(conn, &queue, now)
            })
            .await
    }

    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<JobRecord>> {
        let queue = queue.to_owned();
        self.inner
            .writer
            .call("listing dead letters", false, move |conn| {
                queries::dead_letters(conn, &queue, limit)
            })
            .await
    }

    /// Members purged count as cancelled: their groups may complete.
    async fn purge(&self, queue: &str) -> Result<u64> {
        let now = self.now();
        let queue = queue.to_owned();
        let (gone, fired) = self
            .inner
            .writer
            .call("purging a queue", true, move |conn| {
                queries::purge(conn, &queue, now)
            })
            .await?;
        if fired {
            self.wake();
        }
        Ok(gone)
    }

    async fn list_jobs(&self, query: &JobQuery) -> Result<JobPage> {
        query.validate()?;
        let now = self.now();
        let query = query.clone();
        self.inner
            .writer
            .call("listing jobs", false, move |conn| {
                admin::list(conn, &query, now)
            })
            .await
    }

    async fn retry_dead(&self, which: &Selection) -> Result<u64> {
        self.redrive(which, Redrive::Retry).await
    }

    async fn discard_dead(&self, which: &Selection) -> Result<u64> {
        self.redrive(which, Redrive::Discard).await
    }

    /// Every claim of the file's brokers skips a paused queue, in this process or another.
    /// A resume wakes this process's idle workers at once; another's find the queue at
    /// their next poll, or sooner through their watch on the file.
    async fn set_paused(&self, queue: &str, paused: bool) -> Result<bool> {
        validate_queue_name(queue)?;
        let now = self.now();
        let queue = queue.to_owned();
        let changed = self
            .inner
            .writer
            .call("pausing a queue", true, move |conn| {
                admin::pause(conn, &queue, paused, now)
            })
            .await?;
        if changed && !paused {
            self.wake();
        }
        Ok(changed)
    }

    /// Kept in the file ([`crate::rate`]), so the limit holds across every broker of the
    /// file, in this process or another. Setting a limit again, or changing it, keeps the
    /// starts already counted. A change wakes this process's idle workers at once, so that
    /// a lifted or raised limit is seen without waiting for a window's next room; another
    /// process's find it at their next poll, or sooner through their watch on the file.
    async fn set_rate_limit(&self, queue: &str, limit: Option<RateLimit>) -> Result<()> {
        validate_queue_name(queue)?;
        let queue = queue.to_owned();
        self.inner
            .writer
            .call("setting a rate limit", true, move |conn| {
                rate::set(conn, &queue, limit)
            })
            .await?;
        self.wake();
        Ok(())
    }

    /// Counted in the file ([`crate::groups`]), so members settled by any broker of the
    /// file, in this process or another, count once, and the completion job is enqueued once.
    async fn seal_group(&self, group: &str, completion: NewJob) -> Result<GroupStatus> {
        validate_completion(group, &completion)?;
        let now = self.now();
        let group = group.to_owned();
        let (status, fired) = self
            .inner
            .writer
            .call("sealing a group", true, move |conn| {
                groups::seal(conn, &group, &completion, now)
            })
            .await??;
        if fired {
            self.wake();
        }
        Ok(status)
    }

    async fn group(&self, group: &str) -> Result<Option<GroupStatus>> {
        validate_group(group)?;
        let group = group.to_owned();
        self.inner
            .writer
            .call("reading a group", false, move |conn| {
                groups::status(conn, &group)
            })
            .await
    }

    async fn queues(&self) -> Result<Vec<String>> {
        self.inner
            .writer
            .call("listing queues", false, admin::queue_names)
            .await
    }

    async fn queue_stats(&self, queue: &str) -> Result<QueueStatus> {
        self.stats(queue, None).await
    }

    /// Each state's count stops at `bound + 1` jobs of its index range, so a glance at a
    /// queue of a million jobs costs what one of ten thousand does.
    async fn queue_glance(&self, queue: &str, bound: u64) -> Result<QueueStatus> {
        self.stats(queue, Some(bound)).await
    }

    /// The report's times are this broker's: brokers sharing a file must agree on the
    /// clock, as they must for leases. Each report also takes one step of the sweep of
    /// stale unique keys, as it prunes the registry.
    async fn heartbeat(&self, beat: &WorkerBeat) -> Result<()> {
        beat.validate()?;
        for (queue, _) in &beat.settled {
            validate_queue_name(queue)?;
        }
        let now = self.now();
        let beat = beat.clone();
        let after = self.sweep_cursor().clone();
        let next = self
            .inner
            .writer
            .call("recording a worker's report", true, move |conn| {
                registry::heartbeat(conn, &beat, now)?;
                unique::sweep(conn, after, now)
            })
            .await?;
        *self.sweep_cursor() = next;
        Ok(())
    }

    async fn deregister(&self, worker: &str) -> Result<bool> {
        let worker = worker.to_owned();
        self.inner
            .writer
            .call("removing a worker", true, move |conn| {
                registry::deregister(conn, &worker)
            })
            .await
    }

    async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        let now = self.now();
        self.inner
            .writer
            .call("listing workers", false, move |conn| {
                registry::workers(conn, now)
            })
            .await
    }

    async fn throughput(&self, queue: &str) -> Result<Vec<Bucket>> {
        validate_queue_name(queue)?;
        let now = self.now();
        let queue = queue.to_owned();
        self.inner
            .writer
            .call("reading throughput", false, move |conn| {
                registry::buckets(conn, &queue, now)
            })
            .await
    }

    fn wake_signal(&self) -> Option<watch::Receiver<u64>> {
        Some(self.inner.wake.subscribe())
    }
}

impl SqliteBroker {
    fn sweep_cursor(&self) -> std::sync::MutexGuard<'_, SweepCursor> {
        self.inner
            .unique_sweep
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A queue's statistics, every count exact or, with a bound, each cut at `bound + 1`.
    async fn stats(&self, queue: &str, bound: Option<u64>) -> Result<QueueStatus> {
        let now = self.now();
        let queue = queue.to_owned();
        self.inner
            .writer
            .call("reading queue statistics", false, move |conn| {
                admin::stats(conn, &queue, now, bound)
            })
            .await
    }

    /// Retries or discards dead letters; a retry that put any back wakes idle workers, as
    /// an enqueue does.
    async fn redrive(&self, which: &Selection, how: Redrive) -> Result<u64> {
        let now = self.now();
        let which = which.clone();
        let what = match how {
            Redrive::Retry => "retrying dead letters",
            Redrive::Discard => "discarding dead letters",
        };
        let changed = self
            .inner
            .writer
            .call(what, true, move |conn| {
                admin::redrive(conn, &which, how, now)
            })
            .await?;
        if how == Redrive::Retry && changed > 0 {
            self.wake();
        }
        Ok(changed)
    }
}
