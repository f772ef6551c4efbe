//! [`MySqlBroker`]: the [`Broker`] over MySQL 8 or MariaDB 10.6+.
//!
//! The fetch, and the setting of rate limits its claims keep, are in `fetch`; the deletion of lapsed unique holds and of the rows of ordering
//! keys without jobs, which heartbeats run, in `upkeep`.

mod fetch;
mod upkeep;

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use hopper_core::admin::{JobPage, JobQuery, QueueStatus, Selection};
use hopper_core::clock::Pace;
use hopper_core::job::{to_millis, validate_queue_name};
use hopper_core::{
    AdminCalls, Broker, Bucket, CancelOutcome, Capabilities, CheckedJobs, Clock, Enqueued,
    FetchRequest, Fetched, GroupStatus, JobId, JobRecord, LeaseId, Millis, NewJob, QueueCounts,
    Result, SettleReport, Settlement, WorkerBeat, WorkerInfo,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::conn::{Connections, Repeat, run, transaction};
use crate::migrate::{check_version, version};
use crate::options::MySqlOptions;
use crate::queries::{self, millis};
use crate::sql;
use crate::url::BrokerUrl;

/// How often, at most, one broker returns jobs of expired leases to their queues.
const REAP_EVERY_MS: Millis = 1000;

/// How many deadlocks a transaction that locks unique or ordering keys runs again after: an
/// enqueue of jobs with keys, a re-drive, and settlements, cancels and fetches that end jobs
/// with ordering keys. They lock the keys they share in one order, after the jobs they
/// end, so a deadlock is rare (InnoDB's locks on the gaps it checks for duplicates); the
/// one that loses runs again and then waits its turn behind the winner.
const KEYED_DEADLOCKS: u32 = 8;

/// The MySQL / MariaDB broker. Cheap to clone: clones share connections and wake-ups.
///
/// Several brokers, in one process or many, share one database: claims lock the rows they
/// take and skip rows others hold, so no job goes to two of them. With the default
/// database clock they agree on lease expiry whatever their machines' clocks say.
///
/// A call whose future is dropped halfway closes the connection it was using, so the
/// server rolls back whatever it had started.
#[derive(Clone)]
pub struct MySqlBroker {
    inner: Arc<Inner>,
}

struct Inner {
    conns: Connections,
    clock: Option<Clock>,
    limits: hopper_core::Limits,
    /// Bumped after this broker's own committed enqueues, retries, releases, re-driven dead
    /// letters and resumed queues, and by the wake poller when another process enqueued.
    wake: watch::Sender<u64>,
    poller: Option<JoinHandle<()>>,
    /// Returning expired leases, at most once a [`REAP_EVERY_MS`] (by this broker's own
    /// reading of time).
    reap_pace: Pace,
    /// Deleting expired workers and throughput buckets, and lapsed unique holds, at most
    /// once a minute.
    prune_pace: Pace,
    /// Where the walk over unique holds that deletes the lapsed ones goes on from.
    prune_cursor: Mutex<queries::PruneCursor>,
    /// Where the walk over ordering keys that deletes the rows of idle ones goes on from.
    lines_cursor: Mutex<queries::PruneCursor>,
    /// Whether the server accepts every budget of a fetch in one UNION ALL statement.
    union_claims: AtomicBool,
    /// The queues whose last claim here came back short. Their next claim first looks up
    /// the queue's pending priority levels (one index dive each) and then reads only those
    /// levels, each as a range of due jobs, rather than walking every pending job of the
    /// queue, delayed ones included, as a claim that cannot fill its limit does. The
    /// levels are looked up in the claim's own transaction, so none is ever missed; a full
    /// claim takes the queue out again.
    by_levels: Mutex<HashSet<String>>,
    /// The queues this broker found rate-limited: their claims lock the limit's row
    /// before reading any job (`queries::rate`). A queue limited by another process joins
    /// at its first claim that finds one of its jobs; a lifted one leaves at its next claim.
    limited: Mutex<HashSet<String>>,
    /// One more than the wake count read before the last fetch whose every budget came back
    /// short; 0 once one filled a budget. While the count still reads one less than this,
    /// nothing woke this broker since, and a fetch over queues that all came back short
    /// asks first whether it would find anything (see [`queries::probe`]).
    quiet_since: AtomicU64,
    /// `auto_increment_increment`: the step between the ids of one insert.
    id_step: i64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(poller) = &self.poller {
            poller.abort();
        }
    }
}

impl fmt::Debug for MySqlBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlBroker")
            .field("url", &self.inner.conns.shown_url())
            .field("clock", &self.inner.clock)
            .finish_non_exhaustive()
    }
}

impl MySqlBroker {
    /// Connects with default [`MySqlOptions`]: the database clock, four connections, and
    /// the wake poller.
    ///
    /// # Errors
    /// A configuration error for a malformed URL; a broker error naming the URL (password
    /// hidden) when the server cannot be reached, or when the schema is behind this build
    /// (the message says to run `hopper migrate`) or ahead of it.
    pub async fn connect(url: &str) -> Result<MySqlBroker> {
        Self::connect_with(url, MySqlOptions::default()).await
    }

    /// Connects with `options`. See [`connect`](Self::connect).
    ///
    /// # Errors
    /// As [`connect`](Self::connect), and a configuration error for an invalid option.
    pub async fn connect_with(url: &str, mut options: MySqlOptions) -> Result<MySqlBroker> {
        let parsed = BrokerUrl::parse(url)?;
        if let Some(bytes) = parsed.max_payload {
            options.max_payload = bytes;
        }
        options.validate()?;
        let conns = Connections::new(
            parsed.options.clone(),
            parsed.shown.clone(),
            parsed.connect_timeout,
            options.statement_timeout,
            options.connections,
        );
        let (found, id_step) = run!(&conns, "checking the schema", Repeat::Safe, |conn| async {
            let found = version(conn).await?;
            let step: i64 = sqlx::query_scalar(sql::fixed(&sql::ID_STEP))
                .fetch_one(conn)
                .await?;
            Ok((found, step.max(1)))
        })?;
        check_version(found, &parsed.shown)?;
        let wake = watch::channel(0).0;
        let poller = options.wake_poll.map(|interval| {
            crate::poll::spawn(
                parsed.options.clone(),
                parsed.shown.clone(),
                parsed.connect_timeout,
                interval,
                wake.clone(),
            )
        });
        Ok(MySqlBroker {
            inner: Arc::new(Inner {
                conns,
                clock: options.clock,
                limits: hopper_core::Limits {
                    max_payload: options.max_payload,
                },
                wake,
                poller,
                reap_pace: Pace::new(REAP_EVERY_MS),
                prune_pace: Pace::new(60_000),
                prune_cursor: Mutex::new(queries::PruneCursor::default()),
                lines_cursor: Mutex::new(queries::PruneCursor::default()),
                union_claims: AtomicBool::new(true),
                by_levels: Mutex::new(HashSet::new()),
                limited: Mutex::new(HashSet::new()),
                quiet_since: AtomicU64::new(0),
                id_step,
            }),
        })
    }

    fn by_levels(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.inner
            .by_levels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn limited(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.inner
            .limited
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The URL this broker connected to, password hidden.
    pub fn url(&self) -> &str {
        self.inner.conns.shown_url()
    }

    /// Closes the broker's connections politely, waiting for calls in flight to finish with
    /// theirs. Calls made afterwards open new ones.
    pub async fn close(&self) {
        self.inner.conns.close().await;
    }

    /// The time to send: `None` lets the database clock decide.
    fn now(&self) -> Option<Millis> {
        self.inner.clock.map(|c| c.now_millis())
    }

    fn wake(&self) {
        self.inner.wake.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Whether this fetch should return expired leases: at most once a second per broker.
    fn reap_due(&self, now: Option<Millis>) -> bool {
        let now = now.unwrap_or_else(|| to_millis(SystemTime::now()));
        self.inner.reap_pace.due(now)
    }

    /// Stores a batch in which some job has a unique, ordering or rate key or a group, in one
    /// transaction: the groups' rows locked first, the batch refused whole when one is
    /// sealed (`queries::enter_groups`), then `queries::enqueue_keyed`, then the members
    /// counted.
    async fn enqueue_keyed(&self, jobs: &[NewJob], now: Option<Millis>) -> Result<Vec<Enqueued>> {
        let step = self.inner.id_step;
        let grouped = jobs.iter().any(|job| job.group.is_some());
        let done = transaction!(
            &self.inner.conns,
            "enqueueing jobs",
            deadlocks = KEYED_DEADLOCKS,
            |conn| async {
                let members = if grouped {
                    match queries::enter_groups(conn, jobs).await? {
                        Ok(members) => Some(members),
                        Err(refused) => return Ok(Err(refused)),
                    }
                } else {
                    None
                };
                let done = queries::enqueue_keyed(conn, jobs, now, step).await?;
                if let Some(members) = members {
                    queries::join_groups(conn, members).await?;
                }
                Ok(Ok(done))
            }
        )??;
        if done.iter().any(|e| !e.existing) {
            self.wake();
        }
        Ok(done)
    }

    /// A queue's statistics, its counts exact (`None`) or bounded.
    async fn queue_status(&self, queue: &str, bound: Option<u64>) -> Result<QueueStatus> {
        let now = self.now();
        run!(
            &self.inner.conns,
            "reading queue statistics",
            Repeat::Safe,
            |conn| { queries::queue_status(conn, queue, now, bound) }
        )
    }
}

#[async_trait]
impl Broker for MySqlBroker {
    fn capabilities(&self) -> Capabilities {
        Capabilities::leased_sql("mysql")
            .with_admin(AdminCalls::RECORDS)
            .with_unique()
            .with_ordered()
            .with_rate_limits()
            .with_rate_limits_per_key()
            .with_groups()
    }

    fn limits(&self) -> hopper_core::Limits {
        self.inner.limits
    }

    async fn enqueue_checked(&self, jobs: CheckedJobs) -> Result<Vec<Enqueued>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now();
        if jobs.iter().any(|job| {
            job.unique.is_some()
                || job.ordering_key.is_some()
                || job.group.is_some()
                || job.rate_key.is_some()
        }) {
            return self.enqueue_keyed(&jobs, now).await;
        }
        // No keys, no groups: nothing of `hopper_unique`, `hopper_ordering` or
        // `hopper_groups` is read or written, and no key column bound.
        let rows = queries::new_rows(jobs.iter(), now);
        let chunks = queries::chunks(&rows);
        let step = self.inner.id_step;
        let conns = &self.inner.conns;
        let ids = if let [only] = chunks[..] {
            // One statement, committed on its own: if the connection breaks, it may have
            // been applied, so it is not repeated.
            run!(conns, "enqueueing jobs", Repeat::Unsafe, |conn| {
                queries::insert(conn, only, now, step)
            })?
        } else {
            transaction!(conns, "enqueueing jobs", |conn| async {
                let mut ids = Vec::with_capacity(rows.len());
                for chunk in &chunks {
                    ids.extend(queries::insert(conn, chunk, now, step).await?);
                }
                Ok(ids)
            })?
        };
        self.wake();
        Ok(ids.into_iter().map(Enqueued::stored).collect())
    }

    async fn fetch(&self, request: FetchRequest) -> Result<Fetched> {
        self.fetch_jobs(request).await
    }

    async fn settle(&self, settlements: Vec<Settlement>) -> Result<SettleReport> {
        if settlements.is_empty() {
            return Ok(SettleReport::default());
        }
        let (now, step) = (self.now(), self.inner.id_step);
        // Settlements of jobs with ordering keys or groups lock their keys' and groups' rows.
        let deadlocks = match settlements.iter().any(|s| queries::is_ordered(s.lease)) {
            true => KEYED_DEADLOCKS,
            false => 1,
        };
        let settled = transaction!(
            &self.inner.conns,
            "settling jobs",
            deadlocks = deadlocks,
            |conn| { queries::settle(conn, &settlements, now, step) }
        )?;
        if settled.requeued {
            self.wake();
        }
        Ok(settled.report)
    }

    async fn renew(&self, leases: &[LeaseId], ttl: Duration) -> Result<Vec<LeaseId>> {
        let mut seen = HashSet::with_capacity(leases.len());
        let asked: Vec<i64> = leases
            .iter()
            .filter(|l| seen.insert(**l))
            .map(|l| l.0)
            .collect();
        if asked.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now();
        let ttl = millis(ttl);
        let live = run!(&self.inner.conns, "renewing leases", Repeat::Safe, |conn| {
            queries::renew(conn, &asked, ttl, now)
        })?;
        Ok(asked
            .into_iter()
            .filter(|l| !live.contains(l))
            .map(LeaseId)
            .collect())
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        let now = self.now();
        let found = run!(
            &self.inner.conns,
            "cancelling a job",
            Repeat::Unsafe,
            |conn| { queries::cancel(conn, id, now) }
        )?;
        if let queries::Cancel::Done(outcome) = found {
            return Ok(outcome);
        }
        // A pending job with an ordering key or a group: cancelled under its row's lock, its
        // group counting it and the next job of its key unblocked in the same transaction.
        let step = self.inner.id_step;
        let (outcome, unblocked) = transaction!(
            &self.inner.conns,
            "cancelling a job",
            deadlocks = KEYED_DEADLOCKS,
            |conn| { queries::cancel_ordered(conn, id, now, step) }
        )?;
        if unblocked {
            self.wake();
        }
        Ok(outcome)
    }

    async fn job(&self, id: JobId) -> Result<Option<JobRecord>> {
        run!(&self.inner.conns, "reading a job", Repeat::Safe, |conn| {
            queries::job(conn, id)
        })
    }

    async fn counts(&self, queue: &str) -> Result<QueueCounts> {
        let now = self.now();
        run!(&self.inner.conns, "counting jobs", Repeat::Safe, |conn| {
            queries::counts(conn, queue, now, None)
        })
    }

    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<JobRecord>> {
        run!(
            &self.inner.conns,
            "listing dead letters",
            Repeat::Safe,
            |conn| { queries::dead_letters(conn, queue, limit) }
        )
    }

    async fn purge(&self, queue: &str) -> Result<u64> {
        let (now, step) = (self.now(), self.inner.id_step);
        // Purged members count as cancelled, under their groups' locks.
        let (gone, fired) = transaction!(
            &self.inner.conns,
            "purging a queue",
            deadlocks = KEYED_DEADLOCKS,
            |conn| { queries::purge(conn, queue, now, step) }
        )?;
        if fired {
            self.wake();
        }
        Ok(gone)
    }

    async fn seal_group(&self, group: &str, completion: NewJob) -> Result<GroupStatus> {
        hopper_core::group::validate_completion(group, &completion)?;
        let (now, step) = (self.now(), self.inner.id_step);
        let (status, fired) = transaction!(
            &self.inner.conns,
            "sealing a group",
            deadlocks = KEYED_DEADLOCKS,
            |conn| { queries::seal_group(conn, group, &completion, now, step) }
        )??;
        if fired {
            self.wake();
        }
        Ok(status)
    }

    async fn group(&self, group: &str) -> Result<Option<GroupStatus>> {
        hopper_core::group::validate_group(group)?;
        run!(&self.inner.conns, "reading a group", Repeat::Safe, |conn| {
            queries::group_status(conn, group)
        })
    }

    async fn list_jobs(&self, query: &JobQuery) -> Result<JobPage> {
        query.validate()?;
        let now = self.now();
        run!(&self.inner.conns, "listing jobs", Repeat::Safe, |conn| {
            queries::list(conn, query, now)
        })
    }

    async fn retry_dead(&self, which: &Selection) -> Result<u64> {
        let now = self.now();
        let done = transaction!(
            &self.inner.conns,
            "retrying dead letters",
            deadlocks = KEYED_DEADLOCKS,
            |conn| { queries::redrive(conn, which, true, now) }
        )?;
        if done > 0 {
            self.wake();
        }
        Ok(done)
    }

    async fn discard_dead(&self, which: &Selection) -> Result<u64> {
        transaction!(&self.inner.conns, "discarding dead letters", |conn| {
            queries::redrive(conn, which, false, None)
        })
    }

    async fn set_paused(&self, queue: &str, paused: bool) -> Result<bool> {
        validate_queue_name(queue)?;
        let now = self.now();
        let what = if paused {
            "pausing a queue"
        } else {
            "resuming a queue"
        };
        let changed = run!(&self.inner.conns, what, Repeat::Unsafe, |conn| {
            queries::set_paused(conn, queue, paused, now)
        })?;
        // Workers of other processes find a resumed queue at their next idle poll.
        if changed && !paused {
            self.wake();
        }
        Ok(changed)
    }

    async fn set_rate_limit(
        &self,
        queue: &str,
        limit: Option<hopper_core::RateLimit>,
    ) -> Result<()> {
        self.set_limit(queue, limit).await
    }

    async fn queues(&self) -> Result<Vec<String>> {
        run!(&self.inner.conns, "listing queues", Repeat::Safe, |conn| {
            queries::queue_names(conn)
        })
    }

    async fn queue_stats(&self, queue: &str) -> Result<QueueStatus> {
        self.queue_status(queue, None).await
    }

    async fn queue_glance(&self, queue: &str, bound: u64) -> Result<QueueStatus> {
        self.queue_status(queue, Some(bound)).await
    }

    async fn heartbeat(&self, beat: &WorkerBeat) -> Result<()> {
        let (beat, now) = (queries::Beat::new(beat)?, self.now());
        let prune = {
            let at = now.unwrap_or_else(|| to_millis(SystemTime::now()));
            self.inner.prune_pace.due(at)
        };
        if !prune && !beat.settled_any() {
            return run!(
                &self.inner.conns,
                "recording a worker heartbeat",
                Repeat::Safe,
                |conn| { queries::heartbeat(conn, &beat, now, false) }
            );
        }
        transaction!(&self.inner.conns, "recording a worker heartbeat", |conn| {
            queries::heartbeat(conn, &beat, now, prune)
        })?;
        if prune {
            self.prune_holds(now).await;
            self.prune_lines().await;
        }
        Ok(())
    }

    async fn deregister(&self, worker: &str) -> Result<bool> {
        run!(
            &self.inner.conns,
            "removing a worker",
            Repeat::Unsafe,
            |conn| { queries::deregister(conn, worker) }
        )
    }

    async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        let now = self.now();
        run!(&self.inner.conns, "listing workers", Repeat::Safe, |conn| {
            queries::workers(conn, now)
        })
    }

    async fn throughput(&self, queue: &str) -> Result<Vec<Bucket>> {
        validate_queue_name(queue)?;
        let now = self.now();
        run!(
            &self.inner.conns,
            "reading throughput",
            Repeat::Safe,
            |conn| { queries::buckets(conn, queue, now) }
        )
    }

    fn wake_signal(&self) -> Option<watch::Receiver<u64>> {
        Some(self.inner.wake.subscribe())
    }
}
