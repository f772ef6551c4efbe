//! The [`Broker`] trait every backend implements, and the values that cross it.
//!
//! The required surface is small: enqueue, fetch under a lease, settle, renew, and the
//! inspection calls a worker and an operator need. What a backend cannot do it says in
//! [`Capabilities`], and the call returns [`Error::NotSupported`](crate::Error::NotSupported).

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::admin::{AttemptError, JobPage, JobQuery, QueueStatus, Selection};
use crate::error::{Error, Result};
pub use crate::job::JobState;
use crate::job::{Enqueued, Job, JobId, LeaseId, Limits, Millis, NewJob};
use crate::registry::{Bucket, WorkerBeat, WorkerInfo};

mod capabilities;
pub use capabilities::{AdminCalls, Capabilities};

/// How many jobs one fetch may take from one queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// The queue.
    pub queue: String,
    /// The most jobs to take from it (at least 1).
    pub limit: usize,
}

/// One request for work: per-queue budgets served in one round trip under one lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// The queues to take from and how many from each.
    pub budgets: Vec<Budget>,
    /// How long the lease lasts unless renewed.
    pub lease_ttl: Duration,
}

impl FetchRequest {
    /// A request for up to `limit` jobs from one queue.
    pub fn one(queue: impl Into<String>, limit: usize, lease_ttl: Duration) -> Self {
        FetchRequest {
            budgets: vec![Budget {
                queue: queue.into(),
                limit,
            }],
            lease_ttl,
        }
    }

    /// The most jobs this request can return.
    pub fn total(&self) -> usize {
        self.budgets.iter().map(|b| b.limit).sum()
    }
}

/// What one fetch returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The lease every returned job is held under.
    pub lease: LeaseId,
    /// The jobs, in global order: priority descending, then `run_at`, then id.
    pub jobs: Vec<Job>,
    /// When the fetch came back short: the earliest `run_at` of a delayed job in the asked
    /// queues, if the broker knows it cheaply. Lets an idle worker sleep exactly that long.
    pub next_due: Option<Millis>,
}

/// How a job ends one hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done: removed, or kept as completed where the broker retains finished jobs.
    Ack,
    /// Failed this attempt; back to its queue after `delay`. The attempt stays charged.
    Retry {
        /// Wait before the next attempt.
        delay: Duration,
        /// The error of this attempt, kept as the job's last error.
        error: String,
        /// For a job with an ordering key: whether it steps aside while it waits, letting
        /// the key's next jobs run meanwhile ([`QueueOptions::retries_hold_key`]). It then
        /// runs again, before the jobs still waiting, once its time has come and the job
        /// of its key that runs then has ended. Brokers without ordering keys, and jobs
        /// without one, ignore it.
        ///
        /// [`QueueOptions::retries_hold_key`]: crate::QueueOptions::retries_hold_key
        step_aside: bool,
    },
    /// Kept aside with its error, for inspection and replay.
    DeadLetter {
        /// Why the job was dead-lettered.
        error: String,
    },
    /// Handed back unstarted: pending again, the attempt not charged.
    Release,
    /// Put off by its handler (River's snooze): back to its queue after `delay`, the
    /// attempt not charged and no error recorded.
    Snooze {
        /// Wait before the job may run again.
        delay: Duration,
    },
    /// Cancelled before it started; never runs.
    Cancel,
}

/// A settlement: one job, the lease it was held under, and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// The job.
    pub job: JobId,
    /// The lease the settler holds it under. A broker ignores a settlement whose lease is
    /// no longer the job's (fencing).
    pub lease: LeaseId,
    /// What happened.
    pub outcome: Outcome,
}

impl Settlement {
    /// `job` is done: an [`Outcome::Ack`] under the lease it was fetched with.
    pub fn ack(job: &Job) -> Self {
        Settlement {
            job: job.id,
            lease: job.lease,
            outcome: Outcome::Ack,
        }
    }
}

/// What a batch of settlements did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SettleReport {
    /// Settlements applied.
    pub applied: usize,
    /// Jobs whose settlement was ignored because the lease named was no longer theirs.
    pub fenced: Vec<JobId>,
}

/// A job as the broker stores it, for inspection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    /// The job's fields; `lease` is the current lease when leased, else `LeaseId(0)`.
    pub job: Job,
    /// Its state.
    pub state: JobState,
    /// The error of the last failed attempt, if any.
    pub last_error: Option<String>,
    /// The errors of the latest failed attempts, oldest first, at most
    /// [`ERROR_HISTORY`](crate::admin::ERROR_HISTORY) of them.
    pub errors: Vec<AttemptError>,
    /// When its latest attempt started (ms since the epoch), if it ever ran.
    pub started_at: Option<Millis>,
    /// When it died, completed or was cancelled (ms since the epoch).
    pub finished_at: Option<Millis>,
    /// The unique key it was enqueued with ([`NewJob::unique_key`]), held or not.
    pub unique_key: Option<String>,
    /// Its ordering key ([`NewJob::ordering_key`]).
    pub ordering_key: Option<String>,
    /// Its rate key ([`NewJob::rate_key`]).
    pub rate_key: Option<String>,
    /// Pending behind an earlier job of its ordering key; `job.run_at` is still its own
    /// time.
    pub blocked: bool,
}

/// Jobs of one queue by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Waiting and due.
    pub pending: u64,
    /// Waiting, not due yet (delayed or backing off).
    pub scheduled: u64,
    /// Held by some worker's lease.
    pub leased: u64,
    /// Dead-lettered.
    pub dead: u64,
}

/// What [`Broker::cancel`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The job was pending and will never run.
    Cancelled,
    /// A worker holds it under this lease; only that worker can still cancel it.
    Held(LeaseId),
    /// No such job, or it already finished.
    NotFound,
}

pub use crate::job::CheckedJobs;

/// A store of queued jobs. See the module docs.
#[async_trait]
pub trait Broker: Send + Sync + Debug + 'static {
    /// What this broker supports.
    fn capabilities(&self) -> Capabilities;

    /// What this broker accepts in a job beyond the fixed ranges (its payload limit).
    fn limits(&self) -> Limits {
        Limits::default()
    }

    /// Accepts jobs, all in one round trip, and returns their ids in order. Checks every
    /// job first ([`CheckedJobs::check_within`] the broker's [`limits`](Broker::limits)):
    /// one that fails is the error, and none is stored. Brokers implement
    /// [`enqueue_checked`](Broker::enqueue_checked) instead.
    ///
    /// A job with a [unique key](NewJob::unique_key) held by another job is not stored;
    /// its id in the answer is the holder's. [`enqueue_reported`](Broker::enqueue_reported)
    /// says which.
    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        let done = self.enqueue_reported(jobs).await?;
        Ok(done.into_iter().map(|e| e.id).collect())
    }

    /// [`enqueue`](Broker::enqueue), saying for each job whether it was stored or a job
    /// holding its unique key was already there. A broker without
    /// [`Capabilities::unique`] refuses a batch in which any job has a key, storing none;
    /// so does one without [`Capabilities::ordered`] for ordering keys.
    async fn enqueue_reported(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        let limits = self.limits();
        let checked = CheckedJobs::check_within(jobs, &limits)?;
        let caps = self.capabilities();
        if !caps.unique && checked.iter().any(|j| j.unique.is_some()) {
            return Err(self.not_supported("unique keys"));
        }
        if !caps.ordered && checked.iter().any(|j| j.ordering_key.is_some()) {
            return Err(self.not_supported("ordering keys"));
        }
        if !caps.groups && checked.iter().any(|j| j.group.is_some()) {
            return Err(self.not_supported("groups"));
        }
        if !caps.rate_limits_per_key && checked.iter().any(|j| j.rate_key.is_some()) {
            return Err(self.not_supported("rate keys"));
        }
        let counted = crate::metering::count_enqueued(caps.name, &checked);
        let done = self.enqueue_checked(checked).await?;
        counted.commit(&done);
        Ok(done)
    }

    /// Stores jobs already checked, all in one round trip, and says what became of each,
    /// in order: stored, or (only with [`Capabilities::unique`]) a duplicate of the job
    /// holding its unique key.
    async fn enqueue_checked(&self, jobs: CheckedJobs) -> Result<Vec<Enqueued>>;

    /// Claims up to each budget's limit of due jobs, all under one new lease, charging each
    /// job an attempt. Never returns more than asked, even under concurrent fetches, and
    /// only jobs of the queues asked: a worker that asked one queue takes every job returned
    /// as that queue's without reading its name.
    async fn fetch(&self, request: FetchRequest) -> Result<Fetched>;

    /// Applies settlements, in one round trip.
    async fn settle(&self, settlements: Vec<Settlement>) -> Result<SettleReport>;

    /// Extends the given leases to `ttl` from now, in one round trip. Returns the leases
    /// that were already lost (expired and taken back), whose jobs the caller must drop.
    async fn renew(&self, leases: &[LeaseId], ttl: Duration) -> Result<Vec<LeaseId>>;

    /// Cancels a pending job.
    async fn cancel(&self, id: JobId) -> Result<CancelOutcome>;

    /// One job's record, if the broker still has it.
    async fn job(&self, id: JobId) -> Result<Option<JobRecord>>;

    /// A queue's jobs by state.
    async fn counts(&self, queue: &str) -> Result<QueueCounts>;

    /// Dead-lettered jobs of a queue, oldest first, at most `limit`.
    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<JobRecord>>;

    /// Removes every job of a queue, in every state. Returns how many went.
    async fn purge(&self, queue: &str) -> Result<u64>;

    /// A page of a queue's jobs in one state, each with its error history. Keyset paging:
    /// the next page starts after [`JobPage::next`], and costs no more than the first.
    async fn list_jobs(&self, query: &JobQuery) -> Result<JobPage> {
        let _ = query;
        Err(self.not_supported("listing jobs"))
    }

    /// Puts the selected dead letters back in their queue, due now, with their attempts
    /// reset and their error history kept. Returns how many went back.
    async fn retry_dead(&self, which: &Selection) -> Result<u64> {
        let _ = which;
        Err(self.not_supported("retrying dead letters"))
    }

    /// Deletes the selected dead letters. Returns how many went.
    async fn discard_dead(&self, which: &Selection) -> Result<u64> {
        let _ = which;
        Err(self.not_supported("discarding dead letters"))
    }

    /// Pauses a queue for every worker of this broker, or resumes it: a paused queue takes
    /// enqueues and hands out nothing. Returns whether this changed anything.
    async fn set_paused(&self, queue: &str, paused: bool) -> Result<bool> {
        let _ = (queue, paused);
        Err(self.not_supported("pausing queues"))
    }

    /// Limits how many jobs of a queue start, across every worker of this broker: at most
    /// `limit.max` claimed in any window of `limit.per` ([`crate::rate`]), or of each rate
    /// key's when the limit is [per key](crate::RateLimit::per_key); `None` lifts it.
    /// Brokers without [`Capabilities::rate_limits`] refuse, and those without
    /// [`Capabilities::rate_limits_per_key`] refuse a limit per key.
    async fn set_rate_limit(&self, queue: &str, limit: Option<crate::RateLimit>) -> Result<()> {
        let _ = (queue, limit);
        Err(self.not_supported("rate limits"))
    }

    /// Seals `group`: it takes no more members, and once every member has settled the
    /// broker enqueues `completion` with the group's outcome in its headers
    /// ([`crate::group`]), once; at once if every member already has. A group never given a
    /// member is sealed empty. Sealing a sealed group is refused by name (`group`).
    /// Brokers without [`Capabilities::groups`] refuse.
    async fn seal_group(&self, group: &str, completion: NewJob) -> Result<crate::GroupStatus> {
        let _ = (group, completion);
        Err(self.not_supported("groups"))
    }

    /// Enqueues `members` into `group`, [`GROUP_CHUNK`](crate::group::GROUP_CHUNK) per
    /// round trip, then seals the group with `completion` and returns it as sealed. Each
    /// member is given the group; the completion job is enqueued once every member has
    /// settled (at once if all already have).
    async fn enqueue_group(
        &self,
        group: &str,
        members: Vec<NewJob>,
        completion: NewJob,
    ) -> Result<crate::GroupStatus> {
        crate::group::validate_completion(group, &completion)?;
        let mut members = members.into_iter().map(|m| m.group(group)).peekable();
        while members.peek().is_some() {
            let chunk = crate::group::GROUP_CHUNK;
            self.enqueue(members.by_ref().take(chunk).collect()).await?;
        }
        self.seal_group(group, completion).await
    }

    /// A group as the broker counts it; `None` for one it never heard of.
    async fn group(&self, group: &str) -> Result<Option<crate::GroupStatus>> {
        let _ = group;
        Err(self.not_supported("groups"))
    }

    /// The names of the queues holding jobs, or paused, in name order.
    async fn queues(&self) -> Result<Vec<String>> {
        Err(self.not_supported("listing queues"))
    }

    /// A queue's counts by state, lag, pause and throughput.
    async fn queue_stats(&self, queue: &str) -> Result<QueueStatus> {
        let _ = queue;
        Err(self.not_supported("queue statistics"))
    }

    /// [`queue_stats`](Broker::queue_stats) for a glance: each state counted up to `bound`
    /// jobs and no further, so that the cost does not grow with the queue. A count of
    /// `bound + 1` means more than `bound`; [`QueueStatus::bound`] says so. Brokers whose
    /// counts cost nothing count exactly (the default) and leave `bound` at `None`.
    async fn queue_glance(&self, queue: &str, bound: u64) -> Result<QueueStatus> {
        let _ = bound;
        self.queue_stats(queue).await
    }

    /// Records a worker's report ([`crate::registry`]): lists the worker until the report's
    /// `ttl` passes, and adds what it settled to its queues' throughput buckets.
    async fn heartbeat(&self, beat: &WorkerBeat) -> Result<()> {
        let _ = beat;
        Err(self.not_supported("registering workers"))
    }

    /// Removes a worker that stopped; `false` when it was not listed.
    async fn deregister(&self, worker: &str) -> Result<bool> {
        let _ = worker;
        Err(self.not_supported("registering workers"))
    }

    /// The workers whose latest report has not expired, oldest first.
    async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        Err(self.not_supported("listing workers"))
    }

    /// A queue's throughput over the last hour, one [`Bucket`] per
    /// [`BUCKET`](crate::registry::BUCKET) that settled anything, oldest first.
    async fn throughput(&self, queue: &str) -> Result<Vec<Bucket>> {
        let _ = queue;
        Err(self.not_supported("throughput"))
    }

    /// The error for a call this broker does not serve.
    fn not_supported(&self, what: &'static str) -> Error {
        Error::NotSupported {
            broker: self.capabilities().name,
            what,
        }
    }

    /// Opens this process's subscription to `queue`, or changes its window if it is open:
    /// the server may push at most `window` deliveries not yet settled. `None` is the
    /// broker's default window, and with no default no limit at all. Only brokers that say
    /// [`Capabilities::pushed`] do anything here; a worker calls it for each queue at start
    /// and whenever an adaptive window changes.
    async fn subscribe(&self, queue: &str, window: Option<u32>) -> Result<()> {
        let _ = (queue, window);
        Ok(())
    }

    /// Closes this process's subscription to `queue`: what it held unsettled goes back to
    /// the queue. A worker calls it once it has settled everything at shutdown.
    async fn unsubscribe(&self, queue: &str) -> Result<()> {
        let _ = queue;
        Ok(())
    }

    /// A signal that changes whenever new work may be available (an enqueue, a retry, a
    /// release). Workers wait on it while idle; without one they poll.
    fn wake_signal(&self) -> Option<watch::Receiver<u64>> {
        None
    }
}
