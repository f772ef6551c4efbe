//! [`PgBroker`]: the [`Broker`] over PostgreSQL.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use hopper_core::clock::Pace;
use hopper_core::job::{headers_from_json, to_millis};
use hopper_core::{
    Broker, CancelOutcome, Capabilities, Error, FetchRequest, Fetched, Job, JobId, JobRecord,
    JobState, LeaseId, Millis, NewJob, Outcome, QueueCounts, Result, SettleReport, Settlement,
};
use sqlx::Row;
use sqlx::postgres::{PgConnection, PgRow};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::conn::{Connections, Held};
use crate::migrate::{check_version, version};
use crate::options::PgOptions;
use crate::sql::Sql;
use crate::url::BrokerUrl;

/// How often, at most, one broker returns expired leases to their queues.
const REAP_EVERY_MS: Millis = 1000;
/// How often, at most, one broker prunes completed jobs past their retention.
const PRUNE_EVERY_MS: Millis = 60_000;

/// Claim connections per broker: a worker has one fetch in flight, and a second lets two
/// workers sharing a broker claim at once.
const CLAIM_CONNECTIONS: usize = 2;

/// How the broker's connections plan: each statement once per connection (a custom plan
/// per execution cost 0.6–2 ms of server time, as much as running a claim of 100), and
/// never by a sequential scan, which leaves only the index paths every statement is
/// written for. A plan made while the table was nearly empty must stay right when it holds
/// millions: a queue table swings between the two faster than statistics follow.
const PLANNING: [(&str, &str); 2] = [
    ("plan_cache_mode", "force_generic_plan"),
    ("enable_seqscan", "off"),
];

/// The least time between two vacuums by one broker, and how many times its last
/// vacuum's duration it waits at least, so vacuuming takes at most a tenth of the time.
const VACUUM_MIN_GAP: Duration = Duration::from_secs(1);
const VACUUM_GAP_FACTOR: u32 = 10;
/// How long a vacuum may take before the broker gives up on it (and its connection), so a
/// vacuum that never answers does not stop the next ones.
const VACUUM_TIMEOUT: Duration = Duration::from_secs(600);

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
    /// Connects with default options and the schema named by the URL's `?schema=`
    /// (default `hopper`). Refuses a schema whose migrations are behind this build.
    pub async fn connect(url: &str) -> Result<PgBroker> {
        let parsed = BrokerUrl::parse(url)?;
        let mut options = PgOptions::default();
        if let Some(schema) = parsed.schema.clone() {
            options.schema = schema;
        }
        Self::connect_with(url, options).await
    }

    /// Connects with `options`; a `?schema=` in the URL is ignored in favour of
    /// `options.schema`.
    pub async fn connect_with(url: &str, options: PgOptions) -> Result<PgBroker> {
        options.validate()?;
        let parsed = BrokerUrl::parse(url)?;
        let conns = Connections::new(
            parsed.options.clone().options(PLANNING),
            parsed.shown.clone(),
            options.connections,
        );
        let claims = Connections::new(
            parsed
                .options
                .clone()
                .options(PLANNING)
                .options([("synchronous_commit", "off")]),
            parsed.shown.clone(),
            CLAIM_CONNECTIONS,
        );
        {
            let mut held = conns.get().await?;
            let found = version(held.conn(), &options.schema)
                .await
                .map_err(db_err("reading the schema version"))?;
            check_version(found, &options.schema, &parsed.shown)?;
        }
        // Warnings stay on the server: one is sent whenever another broker's vacuum holds
        // the table and this one skips it, which is the point of SKIP_LOCKED.
        let vacuum = Connections::new(
            parsed
                .options
                .clone()
                .options([("client_min_messages", "error")]),
            parsed.shown.clone(),
            1,
        );
        let channel = format!("hopper.{}", options.schema);
        let wake = watch::channel(0).0;
        let listener = options.listen.then(|| {
            crate::listen::spawn(
                parsed.options.clone(),
                channel.clone(),
                wake.clone(),
                parsed.shown.clone(),
            )
        });
        Ok(PgBroker {
            inner: Arc::new(Inner {
                conns,
                claims,
                vacuum,
                vacuum_pace: VacuumPace::default(),
                sql: Sql::for_schema(&options.schema),
                channel,
                wake,
                listener,
                reap_pace: Pace::new(REAP_EVERY_MS),
                prune_pace: Pace::new(PRUNE_EVERY_MS),
                shown_url: parsed.shown,
                options,
            }),
        })
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

    /// Enqueues inside the caller's own transaction (or connection): the jobs exist if and
    /// only if that transaction commits. Pass `&mut *tx` for an sqlx `Transaction`.
    pub async fn enqueue_in(
        &self,
        conn: &mut PgConnection,
        jobs: Vec<NewJob>,
    ) -> Result<Vec<JobId>> {
        let query = self.enqueue_query(&jobs)?;
        let rows = sqlx::query_scalar::<_, i64>(&self.inner.sql.enqueue)
            .bind(query.queues)
            .bind(query.payloads)
            .bind(query.priorities)
            .bind(query.run_at)
            .bind(query.delay_ms)
            .bind(query.max_attempts)
            .bind(query.headers)
            .bind(self.now())
            .bind(&self.inner.channel)
            .fetch_all(conn)
            .await
            .map_err(db_err("enqueueing jobs"))?;
        Ok(rows.into_iter().map(JobId).collect())
    }

    /// Closes the broker's connections. Other clones stop working.
    pub async fn close(&self) {
        self.inner.conns.close().await;
        self.inner.claims.close().await;
        self.inner.vacuum.close().await;
    }

    /// The time to send: `None` lets the database clock decide.
    fn now(&self) -> Option<Millis> {
        self.inner.options.clock.map(|c| c.now_millis())
    }

    fn bump(&self) {
        self.inner.wake.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn enqueue_query(&self, jobs: &[NewJob]) -> Result<EnqueueArrays> {
        let now = self.now();
        let mut a = EnqueueArrays::with_capacity(jobs.len());
        for job in jobs {
            job.validate()?;
            let (run_at, delay) = job.run_at_parts(now);
            a.queues.push(job.queue.clone());
            a.payloads.push(job.payload.clone());
            a.priorities.push(job.priority);
            a.run_at.push(run_at);
            a.delay_ms.push(delay);
            a.max_attempts
                .push(job.max_attempts.min(i32::MAX as u32) as i32);
            a.headers.push(job.headers_json());
        }
        Ok(a)
    }

    /// Counts `claimed` jobs towards the next vacuum, and starts it in the background when
    /// it is due (see [`PgOptions::vacuum_after`]).
    fn count_claims(&self, claimed: usize) {
        let Some(after) = self.inner.options.vacuum_after else {
            return;
        };
        let pace = &self.inner.vacuum_pace;
        if pace.denied.load(Ordering::Relaxed) {
            return;
        }
        let since = pace.claimed.fetch_add(claimed as u64, Ordering::Relaxed) + claimed as u64;
        if since < after || !pace.not_before_passed() || pace.running.swap(true, Ordering::AcqRel) {
            return;
        }
        pace.claimed.store(0, Ordering::Relaxed);
        let broker = self.clone();
        tokio::spawn(async move { broker.vacuum().await });
    }

    /// Runs one vacuum of the jobs table, then sets when the next may start.
    async fn vacuum(&self) {
        let started = Instant::now();
        let result = match self.inner.vacuum.get().await {
            Ok(mut held) => {
                if !self.vacuum_allowed(&mut held).await {
                    drop(held);
                    let pace = &self.inner.vacuum_pace;
                    pace.denied.store(true, Ordering::Relaxed);
                    pace.running.store(false, Ordering::Release);
                    return;
                }
                // Unprepared: a VACUUM is run once in a while, never cached.
                let run = sqlx::query(&self.inner.sql.vacuum)
                    .persistent(false)
                    .execute(held.conn());
                match tokio::time::timeout(VACUUM_TIMEOUT, run).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => {
                        held.check(&e);
                        Err(Error::broker("vacuuming the jobs table", e))
                    }
                    Err(_) => {
                        // The statement may still be running: the connection is dropped,
                        // and with it the server's session.
                        held.discard();
                        Err(Error::broker_msg(format!(
                            "vacuuming the jobs table: no answer in {VACUUM_TIMEOUT:?}"
                        )))
                    }
                }
            }
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "vacuum of the jobs table failed; claims go on");
        }
        let took = started.elapsed();
        tracing::debug!(took_ms = took.as_millis() as u64, "vacuumed the jobs table");
        let pace = &self.inner.vacuum_pace;
        *pace.not_before.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Instant::now() + (took * VACUUM_GAP_FACTOR).max(VACUUM_MIN_GAP));
        pace.running.store(false, Ordering::Release);
    }

    /// Whether this broker's role may vacuum the jobs table, asked once per broker. When it
    /// may not, says so once and leaves the table to autovacuum; an error asking counts as
    /// allowed (the vacuum itself then reports it).
    async fn vacuum_allowed(&self, held: &mut Held<'_>) -> bool {
        if self.inner.vacuum_pace.checked.swap(true, Ordering::Relaxed) {
            return true;
        }
        match sqlx::query_scalar::<_, bool>(&self.inner.sql.vacuum_allowed)
            .persistent(false)
            .fetch_one(held.conn())
            .await
        {
            Ok(true) => true,
            Ok(false) => {
                tracing::warn!(
                    schema = %self.inner.options.schema,
                    "this role does not own the jobs table, so it cannot vacuum it: \
                     vacuuming is left to autovacuum (PgOptions::vacuum_after)"
                );
                false
            }
            Err(e) => {
                held.check(&e);
                true
            }
        }
    }

    /// Prunes completed jobs past their retention, when that is due.
    async fn prune(&self, conn: &mut PgConnection, now_hint: Millis) -> Result<()> {
        if let Some(keep) = self.inner.options.keep_completed {
            if self.inner.prune_pace.due(now_hint) {
                sqlx::query(&self.inner.sql.prune_completed)
                    .bind(self.now())
                    .bind(keep.as_millis() as i64)
                    .execute(&mut *conn)
                    .await
                    .map_err(db_err("pruning completed jobs"))?;
            }
        }
        Ok(())
    }
}

/// When the broker may vacuum next: claims counted since the last vacuum, whether one is
/// running, and the earliest time the next may start.
#[derive(Debug, Default)]
struct VacuumPace {
    claimed: AtomicU64,
    running: AtomicBool,
    /// Whether the role's right to vacuum was asked, and the answer was no.
    checked: AtomicBool,
    denied: AtomicBool,
    not_before: std::sync::Mutex<Option<Instant>>,
}

impl VacuumPace {
    fn not_before_passed(&self) -> bool {
        self.not_before
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none_or(|t| Instant::now() >= t)
    }
}

#[derive(Default)]
struct EnqueueArrays {
    queues: Vec<String>,
    payloads: Vec<Vec<u8>>,
    priorities: Vec<i32>,
    run_at: Vec<Option<i64>>,
    delay_ms: Vec<i64>,
    max_attempts: Vec<i32>,
    headers: Vec<Option<String>>,
}

impl EnqueueArrays {
    fn with_capacity(n: usize) -> Self {
        EnqueueArrays {
            queues: Vec::with_capacity(n),
            payloads: Vec::with_capacity(n),
            priorities: Vec::with_capacity(n),
            run_at: Vec::with_capacity(n),
            delay_ms: Vec::with_capacity(n),
            max_attempts: Vec::with_capacity(n),
            headers: Vec::with_capacity(n),
        }
    }
}

/// Decodes the job columns every job-returning statement selects first, in this order:
/// id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at.
/// Runs claim.sql once: the jobs claimed under `lease`, the next due time when fewer than
/// asked were claimed, and whether the reaper (run when `reap`) returned jobs to pending.
#[allow(clippy::too_many_arguments)]
async fn claim(
    sql: &str,
    held: &mut Held<'_>,
    queues: &[String],
    limits: &[i32],
    now: Option<Millis>,
    lease: LeaseId,
    ttl_ms: i64,
    reap: bool,
) -> Result<(Vec<Job>, Option<Millis>, bool)> {
    let asked: i64 = limits.iter().map(|&n| i64::from(n)).sum();
    let rows = sqlx::query(sql)
        .bind(queues)
        .bind(limits)
        .bind(now)
        .bind(lease.0)
        .bind(ttl_ms)
        .bind(reap)
        .bind(asked.min(i64::from(i32::MAX)) as i32)
        .fetch_all(held.conn())
        .await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            held.check(&e);
            return Err(Error::broker("claiming jobs", e));
        }
    };
    // Kind 0 is a claimed job, 1 the next due time, 2 how many jobs the reaper returned.
    let mut jobs = Vec::with_capacity(rows.len());
    let (mut next_due, mut reaped) = (None, false);
    for row in &rows {
        let kind: i16 = row.try_get(9).map_err(db_err("decoding claimed jobs"))?;
        let extra: Option<i64> = row.try_get(10).map_err(db_err("decoding claimed jobs"))?;
        match kind {
            0 => jobs.push(job_from_row(row, lease).map_err(db_err("decoding claimed jobs"))?),
            1 => next_due = extra,
            _ => reaped = true,
        }
    }
    Ok((jobs, next_due, reaped))
}

fn job_from_row(row: &PgRow, lease: LeaseId) -> Result<Job, sqlx::Error> {
    let headers: Option<String> = row.try_get(7)?;
    let headers =
        headers_from_json(headers.as_deref()).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    Ok(Job {
        id: JobId(row.try_get(0)?),
        queue: row.try_get(1)?,
        payload: row.try_get(2)?,
        priority: row.try_get(3)?,
        run_at: row.try_get(4)?,
        attempt: row.try_get::<i32, _>(5)?.max(0) as u32,
        max_attempts: row.try_get::<i32, _>(6)?.max(1) as u32,
        headers,
        created_at: row.try_get(8)?,
        lease,
    })
}

fn record_from_row(row: &PgRow) -> Result<JobRecord, sqlx::Error> {
    let state: i16 = row.try_get(9)?;
    let lease: Option<i64> = row.try_get(10)?;
    let state = match state {
        0 => JobState::Pending,
        1 => JobState::Leased,
        2 => JobState::Completed,
        3 => JobState::Dead,
        _ => JobState::Cancelled,
    };
    let lease = match state {
        JobState::Leased => LeaseId(lease.unwrap_or(0)),
        _ => LeaseId(0),
    };
    Ok(JobRecord {
        job: job_from_row(row, lease)?,
        state,
        last_error: row.try_get(11)?,
    })
}

fn outcome_kind(o: &Outcome) -> (i16, i64, Option<&str>) {
    match o {
        Outcome::Ack => (0, 0, None),
        Outcome::Retry { delay, error } => (1, delay.as_millis() as i64, Some(error)),
        Outcome::DeadLetter { error } => (2, 0, Some(error)),
        Outcome::Release => (3, 0, None),
        Outcome::Cancel => (4, 0, None),
    }
}

#[async_trait]
impl Broker for PgBroker {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            name: "postgres",
            durable: true,
            in_process: false,
            delayed: true,
            priorities: true,
            leases: true,
            topics: false,
            pushed: false,
        }
    }

    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut held = self.inner.conns.get().await?;
        let result = self.enqueue_in(held.conn(), jobs).await;
        if let Err(Error::Broker {
            source: Some(src), ..
        }) = &result
        {
            if let Some(e) = src.downcast_ref::<sqlx::Error>() {
                held.check(e);
            }
        }
        if result.is_ok() {
            self.bump();
        }
        result
    }

    async fn fetch(&self, request: FetchRequest) -> Result<Fetched> {
        let lease = LeaseId::random();
        let now = self.now();
        let now_hint = now.unwrap_or_else(|| to_millis(std::time::SystemTime::now()));
        let (queues, limits): (Vec<String>, Vec<i32>) = request
            .budgets
            .iter()
            .filter(|b| b.limit > 0)
            .map(|b| (b.queue.clone(), b.limit.min(i32::MAX as usize) as i32))
            .unzip();
        if queues.is_empty() {
            return Ok(Fetched {
                lease,
                jobs: Vec::new(),
                next_due: None,
            });
        }
        let mut held = self.inner.claims.get().await?;
        self.prune(held.conn(), now_hint).await?;
        let ttl = request.lease_ttl.as_millis() as i64;
        // The claim statement carries the reaper when it is due (see claim.sql).
        let reap = self.inner.reap_pace.due(now_hint);
        let (mut jobs, mut next_due, reaped) = claim(
            &self.inner.sql.claim,
            &mut held,
            &queues,
            &limits,
            now,
            lease,
            ttl,
            reap,
        )
        .await?;
        if reaped {
            self.bump();
            let asked: i64 = limits.iter().map(|&n| i64::from(n)).sum();
            if (jobs.len() as i64) < asked {
                // Jobs the reaper returned are invisible to the claim of the same
                // statement: claim again for what is left of each budget.
                let left: Vec<i32> = queues
                    .iter()
                    .zip(&limits)
                    .map(|(q, &n)| {
                        (n - jobs.iter().filter(|j| &j.queue == q).count() as i32).max(0)
                    })
                    .collect();
                let (more, due, _) = claim(
                    &self.inner.sql.claim,
                    &mut held,
                    &queues,
                    &left,
                    now,
                    lease,
                    ttl,
                    false,
                )
                .await?;
                jobs.extend(more);
                next_due = due;
            }
        }
        self.count_claims(jobs.len());
        jobs.sort_by_key(|j| (std::cmp::Reverse(j.priority), j.run_at, j.id));
        Ok(Fetched {
            lease,
            jobs,
            next_due,
        })
    }

    async fn settle(&self, settlements: Vec<Settlement>) -> Result<SettleReport> {
        if settlements.is_empty() {
            return Ok(SettleReport::default());
        }
        let n = settlements.len();
        let (mut ids, mut leases, mut kinds, mut delays, mut errors) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let mut requeues = false;
        for s in &settlements {
            let (kind, delay, error) = outcome_kind(&s.outcome);
            requeues |= kind == 1 || kind == 3;
            ids.push(s.job.0);
            leases.push(s.lease.0);
            kinds.push(kind);
            delays.push(delay);
            errors.push(error.map(str::to_owned));
        }
        let mut held = self.inner.conns.get().await?;
        let applied: Vec<i64> = match sqlx::query_scalar(&self.inner.sql.settle)
            .bind(&ids)
            .bind(&leases)
            .bind(&kinds)
            .bind(&delays)
            .bind(&errors)
            .bind(self.now())
            .bind(self.inner.options.keep_completed.is_some())
            .fetch_all(held.conn())
            .await
        {
            Ok(v) => v,
            Err(e) => {
                held.check(&e);
                return Err(Error::broker("settling jobs", e));
            }
        };
        drop(held);
        if requeues {
            self.bump();
        }
        let applied_set: HashSet<i64> = applied.iter().copied().collect();
        Ok(SettleReport {
            applied: applied.len(),
            fenced: ids
                .into_iter()
                .filter(|id| !applied_set.contains(id))
                .map(JobId)
                .collect(),
        })
    }

    async fn renew(&self, leases: &[LeaseId], ttl: Duration) -> Result<Vec<LeaseId>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = leases.iter().map(|l| l.0).collect();
        let mut held = self.inner.conns.get().await?;
        let renewed: Vec<i64> = match sqlx::query_scalar(&self.inner.sql.renew)
            .bind(&ids)
            .bind(ttl.as_millis() as i64)
            .bind(self.now())
            .fetch_all(held.conn())
            .await
        {
            Ok(v) => v,
            Err(e) => {
                held.check(&e);
                return Err(Error::broker("renewing leases", e));
            }
        };
        let renewed: HashSet<i64> = renewed.into_iter().collect();
        Ok(leases
            .iter()
            .copied()
            .filter(|l| !renewed.contains(&l.0))
            .collect())
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        let mut held = self.inner.conns.get().await?;
        let cancelled: Option<i64> = sqlx::query_scalar(&self.inner.sql.cancel)
            .bind(id.0)
            .bind(self.now())
            .fetch_optional(held.conn())
            .await
            .map_err(db_err("cancelling a job"))?;
        if cancelled.is_some() {
            return Ok(CancelOutcome::Cancelled);
        }
        let row: Option<(i16, Option<i64>)> = sqlx::query_as(&self.inner.sql.job_lease)
            .bind(id.0)
            .fetch_optional(held.conn())
            .await
            .map_err(db_err("reading a job's lease"))?;
        Ok(match row {
            Some((1, Some(lease))) => CancelOutcome::Held(LeaseId(lease)),
            _ => CancelOutcome::NotFound,
        })
    }

    async fn job(&self, id: JobId) -> Result<Option<JobRecord>> {
        let mut held = self.inner.conns.get().await?;
        let row = sqlx::query(&self.inner.sql.job_record)
            .bind(id.0)
            .fetch_optional(held.conn())
            .await
            .map_err(db_err("reading a job"))?;
        row.as_ref()
            .map(record_from_row)
            .transpose()
            .map_err(db_err("decoding a job"))
    }

    async fn counts(&self, queue: &str) -> Result<QueueCounts> {
        let mut held = self.inner.conns.get().await?;
        let (pending, scheduled, leased, dead): (i64, i64, i64, i64) =
            sqlx::query_as(&self.inner.sql.counts)
                .bind(queue)
                .bind(self.now())
                .fetch_one(held.conn())
                .await
                .map_err(db_err("counting jobs"))?;
        Ok(QueueCounts {
            pending: pending as u64,
            scheduled: scheduled as u64,
            leased: leased as u64,
            dead: dead as u64,
        })
    }

    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<JobRecord>> {
        let mut held = self.inner.conns.get().await?;
        let rows = sqlx::query(&self.inner.sql.dead_letters)
            .bind(queue)
            .bind(limit.min(i64::MAX as usize) as i64)
            .fetch_all(held.conn())
            .await
            .map_err(db_err("listing dead letters"))?;
        rows.iter()
            .map(record_from_row)
            .collect::<Result<_, _>>()
            .map_err(db_err("decoding dead letters"))
    }

    async fn purge(&self, queue: &str) -> Result<u64> {
        let mut held = self.inner.conns.get().await?;
        let done = sqlx::query(&self.inner.sql.purge)
            .bind(queue)
            .execute(held.conn())
            .await
            .map_err(db_err("purging a queue"))?;
        Ok(done.rows_affected())
    }

    fn wake_signal(&self) -> Option<watch::Receiver<u64>> {
        Some(self.inner.wake.subscribe())
    }
}

impl PgBroker {
    /// The URL this broker connected to, password hidden.
    pub fn url(&self) -> &str {
        &self.inner.shown_url
    }
}
