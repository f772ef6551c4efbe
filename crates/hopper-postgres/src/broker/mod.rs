//! [`PgBroker`]: the [`Broker`] over PostgreSQL.
//!
//! # Layout
//! This file holds the broker's state and the [`Broker`] implementation, which hands each
//! call to the module of its concern:
//! - `connect`: connecting, the settings of each set of connections, closing;
//! - `enqueue`: one statement for any number of jobs, with unique keys or without, also in
//!   the caller's transaction;
//! - `fetch`: the claim under a new lease, carrying the reaper when it is due;
//! - `settle`: settlements of any mix in one statement;
//! - `renew`: renewing the leases of every held job in one statement;
//! - `inspect`: cancel, job records, counts, dead letters and purge;
//! - `listing`: pages of a queue's jobs in one state, by cursor;
//! - `admin`: the other operator calls: re-drives, pauses, queue names and statistics;
//! - `rate`: rate limits, set here and kept by the claim statement;
//! - `groups`: sealing and reading groups, and the sweep for groups left unfired; members
//!   are counted by the statements that end them;
//! - `maintenance`: vacuuming the jobs table, pruning completed jobs and stale unique keys;
//! - `registry`: live workers and throughput buckets;
//! - `rows`: jobs and job records decoded from rows.

mod admin;
mod connect;
mod enqueue;
mod fetch;
mod groups;
mod inspect;
mod listing;
mod maintenance;
mod ordering;
mod rate;
mod registry;
mod renew;
mod rows;
mod settle;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use hopper_core::admin::{JobPage, JobQuery, QueueStatus, Selection};
use hopper_core::clock::Pace;
use hopper_core::{
    AdminCalls, Broker, CancelOutcome, Capabilities, CheckedJobs, Enqueued, Error, FetchRequest,
    Fetched, JobId, JobRecord, LeaseId, Millis, QueueCounts, RateLimit, Result, SettleReport,
    Settlement,
};
use hopper_core::{Bucket, WorkerBeat, WorkerInfo};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::maintenance::{KeyPrune, VacuumPace};
use crate::conn::{Connections, connection_lost};
use crate::options::PgOptions;
use crate::sql::Sql;

/// How often, at most, one broker returns expired leases to their queues.
const REAP_EVERY_MS: Millis = 1000;
/// How often, at most, one broker prunes completed jobs past their retention.
const PRUNE_EVERY_MS: Millis = 60_000;

/// The PostgreSQL broker. Cheap to clone: clones share connections and wake-ups.
#[derive(Debug, Clone)]
pub struct PgBroker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    conns: Connections,
    /// Connections for claims only, whose commits do not wait for the WAL flush
    /// (`synchronous_commit = off`). A claim lost to a server crash leaves its jobs pending,
    /// to be claimed and run again: what at-least-once allows, and what a worker crash
    /// does anyway. Every other statement (enqueue above all) stays durable, and a durable
    /// commit flushes the claims before it. Saves a WAL flush per fetch: the whole cost of
    /// an idle worker's wake-up on a disk where a flush takes a millisecond.
    claims: Connections,
    /// One connection for [`PgOptions::vacuum_after`], opened at the first vacuum.
    vacuum: Connections,
    vacuum_pace: VacuumPace,
    sql: Sql,
    options: PgOptions,
    channel: String,
    wake: watch::Sender<u64>,
    listener: Option<JoinHandle<()>>,
    /// The reaper of expired leases, at most once a [`REAP_EVERY_MS`] per broker.
    reap_pace: Pace,
    /// Pruning of completed jobs, at most once a [`PRUNE_EVERY_MS`] per broker.
    prune_pace: Pace,
    /// Pruning of unique keys whose hold ended, in the background.
    key_prune: KeyPrune,
    shown_url: String,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(l) = &self.listener {
            l.abort();
        }
    }
}

fn db_err(what: &str) -> impl FnOnce(sqlx::Error) -> Error + '_ {
    move |e| Error::broker(what.to_owned(), e)
}

impl PgBroker {
    /// Runs a call that waits on the server, giving up once it has gone unanswered for
    /// the statement timeout and as long again (at most 10 s more): past that the server
    /// would have cancelled it, so no answer means none can arrive (a partition, a host
    /// gone without closing its sockets). The connection it held is dropped, and the next
    /// call opens a new one.
    async fn answered<T>(&self, what: &str, call: impl Future<Output = Result<T>>) -> Result<T> {
        let Some(timeout) = self.inner.options.statement_timeout else {
            return call.await;
        };
        let limit = hopper_core::answer_limit(timeout);
        let mut call = Box::pin(call);
        match hopper_core::answer_within(limit, call.as_mut()).await {
            Some(out) => out,
            None => {
                crate::conn::abandon(call);
                Err(Error::broker_msg(format!(
                    "{what}: no answer from {} within {limit:?}; its connection is dropped",
                    self.inner.shown_url
                )))
            }
        }
    }

    /// The schema this broker works in.
    pub fn schema(&self) -> &str {
        &self.inner.options.schema
    }

    /// The channel each enqueue notifies, and each broker of this schema that listens (the
    /// default) listens on: `hopper.<schema>`. A program of its own can listen on it to
    /// learn of new jobs; the dot makes it an identifier to quote: `LISTEN "hopper.jobs"`.
    pub fn wake_channel(&self) -> &str {
        &self.inner.channel
    }

    /// The URL this broker connected to, password hidden.
    pub fn url(&self) -> &str {
        &self.inner.shown_url
    }

    /// The time to send: `None` lets the database clock decide.
    fn now(&self) -> Option<Millis> {
        self.inner.options.clock.map(|c| c.now_millis())
    }

    fn bump(&self) {
        self.inner.wake.send_modify(|n| *n = n.wrapping_add(1));
    }
}

#[async_trait]
impl Broker for PgBroker {
    fn limits(&self) -> hopper_core::Limits {
        hopper_core::Limits {
            max_payload: self.inner.options.max_payload,
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::leased_sql("postgres")
            .with_admin(AdminCalls::RECORDS)
            .with_unique()
            .with_ordered()
            .with_rate_limits_per_key()
            .with_groups()
    }

    async fn enqueue_checked(&self, jobs: CheckedJobs) -> Result<Vec<Enqueued>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let result = self
            .answered("enqueueing jobs", self.insert_held(jobs))
            .await;
        if result
            .as_ref()
            .is_ok_and(|done| done.iter().any(|e| !e.existing))
        {
            self.bump();
        }
        result
    }

    // A fetch, settlement or renewal that finds its connection ended by the server (an
    // operator's pg_terminate_backend, a failover, an idle timeout) is sent once more on a
    // new connection at once, rather than failing and leaving the worker to back off.
    // Sending again is safe: a settlement or renewal applied twice changes nothing the
    // second time, and jobs a lost claim may have taken come back when its lease expires.
    async fn fetch(&self, request: FetchRequest) -> Result<Fetched> {
        let call = async {
            match self.fetch_jobs(&request).await {
                Err(e) if connection_lost(&e) => self.fetch_jobs(&request).await,
                done => done,
            }
        };
        self.answered("fetching jobs", call).await
    }

    async fn settle(&self, settlements: Vec<Settlement>) -> Result<SettleReport> {
        let call = async {
            match self.settle_jobs(&settlements).await {
                Err(e) if connection_lost(&e) => self.settle_jobs(&settlements).await,
                done => done,
            }
        };
        self.answered("settling jobs", call).await
    }

    async fn renew(&self, leases: &[LeaseId], ttl: Duration) -> Result<Vec<LeaseId>> {
        let call = async {
            match self.renew_leases(leases, ttl).await {
                Err(e) if connection_lost(&e) => self.renew_leases(leases, ttl).await,
                done => done,
            }
        };
        self.answered("renewing leases", call).await
    }

    async fn seal_group(
        &self,
        group: &str,
        completion: hopper_core::NewJob,
    ) -> Result<hopper_core::GroupStatus> {
        self.answered("sealing a group", self.seal(group, completion))
            .await
    }

    async fn group(&self, group: &str) -> Result<Option<hopper_core::GroupStatus>> {
        self.answered("reading a group", self.group_status(group))
            .await
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        self.answered("cancelling a job", self.cancel_job(id)).await
    }

    async fn job(&self, id: JobId) -> Result<Option<JobRecord>> {
        self.answered("reading a job", self.read_job(id)).await
    }

    async fn counts(&self, queue: &str) -> Result<QueueCounts> {
        self.answered("counting jobs", self.count_jobs(queue)).await
    }

    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<JobRecord>> {
        let call = self.list_dead_letters(queue, limit);
        self.answered("listing dead letters", call).await
    }

    async fn purge(&self, queue: &str) -> Result<u64> {
        self.answered("purging a queue", self.purge_queue(queue))
            .await
    }

    async fn list_jobs(&self, query: &JobQuery) -> Result<JobPage> {
        query.validate()?;
        self.answered("listing jobs", self.list_page(query)).await
    }

    async fn retry_dead(&self, which: &Selection) -> Result<u64> {
        let call = self.retry_dead_letters(which);
        self.answered("retrying dead letters", call).await
    }

    async fn discard_dead(&self, which: &Selection) -> Result<u64> {
        let call = self.discard_dead_letters(which);
        self.answered("discarding dead letters", call).await
    }

    async fn set_paused(&self, queue: &str, paused: bool) -> Result<bool> {
        hopper_core::job::validate_queue_name(queue)?;
        let what = if paused {
            "pausing a queue"
        } else {
            "resuming a queue"
        };
        self.answered(what, self.pause_queue(queue, paused)).await
    }

    async fn set_rate_limit(&self, queue: &str, limit: Option<RateLimit>) -> Result<()> {
        hopper_core::job::validate_queue_name(queue)?;
        let what = match limit {
            Some(_) => "setting a rate limit",
            None => "lifting a rate limit",
        };
        self.answered(what, self.limit_rate(queue, limit)).await
    }

    async fn queues(&self) -> Result<Vec<String>> {
        self.answered("listing queues", self.queue_names()).await
    }

    async fn queue_stats(&self, queue: &str) -> Result<QueueStatus> {
        let call = self.queue_status(queue, None);
        self.answered("reading queue statistics", call).await
    }

    async fn queue_glance(&self, queue: &str, bound: u64) -> Result<QueueStatus> {
        let call = self.queue_status(queue, Some(bound));
        self.answered("reading queue statistics", call).await
    }

    // Not sent again on a lost connection, unlike a settlement: a report adds its counts,
    // so one applied before the connection went would count twice. The worker's next
    // report carries them instead.
    async fn heartbeat(&self, beat: &WorkerBeat) -> Result<()> {
        let call = self.report_worker(beat);
        self.answered("recording a worker's report", call).await
    }

    async fn deregister(&self, worker: &str) -> Result<bool> {
        self.answered("removing a worker", self.remove_worker(worker))
            .await
    }

    async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        self.answered("listing workers", self.live_workers()).await
    }

    async fn throughput(&self, queue: &str) -> Result<Vec<Bucket>> {
        let call = self.queue_throughput(queue);
        self.answered("reading a queue's throughput", call).await
    }

    fn wake_signal(&self) -> Option<watch::Receiver<u64>> {
        Some(self.inner.wake.subscribe())
    }
}
