//! The broker's operations as they run on one connection. Each takes `now` from its
//! caller: `Some` is the broker's own clock, `None` lets the database clock decide (every
//! statement reads `COALESCE(?, now)`). Whether a transaction surrounds them is the
//! caller's business (`broker`), except where noted.

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};

use hopper_core::job::headers_from_json;
use hopper_core::{
    CancelOutcome, Job, JobId, JobRecord, JobState, LeaseId, Millis, NewJob, Outcome, QueueCounts,
    SettleReport, Settlement,
};
use sqlx::Row;
use sqlx::mysql::{MySqlConnection, MySqlRow};

use crate::conn::{restart, server_error_number};
use crate::sql::{self, MAX_LIST, MAX_SETTLE_ROWS, fixed, padded};

/// The most jobs one `INSERT` carries.
pub(crate) const ENQUEUE_ROWS: usize = 1000;

/// The most payload and header bytes one `INSERT` carries, well under the server's
/// `max_allowed_packet` (16 MiB by default on MariaDB, 64 MiB on MySQL 8).
const ENQUEUE_BYTES: usize = 4 << 20;

const PENDING: i8 = 0;
const LEASED: i8 = 1;
const COMPLETED: i8 = 2;
const DEAD: i8 = 3;
const CANCELLED: i8 = 4;

/// `settle_update.sql`'s outcome codes.
const RETRY: i8 = 1;
const DEAD_LETTER: i8 = 2;
const RELEASE: i8 = 3;
const CANCEL: i8 = 4;

/// A new job's values, encoded once so that a repeated call binds the same ones.
pub(crate) struct NewRow<'a> {
    job: &'a NewJob,
    run_at: Option<Millis>,
    delay_ms: Millis,
    headers: Option<String>,
}

/// Encodes jobs for [`insert`]: with no clock of our own, a job due now or after a delay
/// leaves the time to the database.
pub(crate) fn new_rows(
    jobs: &[NewJob],
    now: Option<Millis>,
) -> Result<Vec<NewRow<'_>>, serde_json::Error> {
    jobs.iter()
        .map(|job| {
            let (run_at, delay_ms) = job.run_at_parts(now);
            let headers = job.headers_json();
            Ok(NewRow {
                job,
                run_at,
                delay_ms,
                headers,
            })
        })
        .collect()
}

/// Splits rows into the inserts that carry them: at most [`ENQUEUE_ROWS`] each, and no more
/// than [`ENQUEUE_BYTES`] unless a single job is larger.
pub(crate) fn chunks<'r, 'a>(rows: &'r [NewRow<'a>]) -> Vec<&'r [NewRow<'a>]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, row) in rows.iter().enumerate() {
        let size = row.job.payload.len() + row.headers.as_ref().map_or(0, String::len);
        if i > start && (i - start == ENQUEUE_ROWS || bytes + size > ENQUEUE_BYTES) {
            out.push(&rows[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < rows.len() {
        out.push(&rows[start..]);
    }
    out
}

/// Inserts one chunk with one statement and returns the ids, in order.
///
/// One multi-row `INSERT` in which every id is generated is what InnoDB calls a "simple
/// insert": it reserves all its AUTO_INCREMENT values at once, so they are consecutive (in
/// steps of `auto_increment_increment`) in every `innodb_autoinc_lock_mode`, and
/// `LAST_INSERT_ID()` is the first. Only a concurrent bulk load of `hopper_jobs`
/// (`INSERT … SELECT`, `LOAD DATA`) under lock mode 2 could interleave, which Hopper never
/// does.
pub(crate) async fn insert(
    conn: &mut MySqlConnection,
    rows: &[NewRow<'_>],
    now: Option<Millis>,
    id_step: i64,
) -> Result<Vec<JobId>, sqlx::Error> {
    let n = rows.len();
    // Insert texts cannot be padded; keep prepared only the sizes that recur.
    let recurring = n <= 8 || n == ENQUEUE_ROWS;
    let text = sql::enqueue(n);

    let mut query = sqlx::query(&text).persistent(recurring);
    for row in rows {
        query = query
            .bind(row.job.queue.as_str())
            .bind(row.job.priority)
            .bind(row.run_at)
            .bind(row.delay_ms)
            .bind(i32::try_from(row.job.max_attempts).unwrap_or(i32::MAX))
            .bind(row.job.payload.as_slice())
            .bind(row.headers.as_deref())
            .bind(now);
    }
    let done = query.execute(&mut *conn).await?;
    if done.rows_affected() != n as u64 {
        return Err(sqlx::Error::Protocol(format!(
            "an insert of {n} jobs reported {} rows",
            done.rows_affected()
        )));
    }
    let first = done.last_insert_id() as i64;
    Ok((0..n as i64).map(|k| JobId(first + k * id_step)).collect())
}

/// Returns jobs of expired leases to pending, dead-lettering those on their last attempt.
/// Returns how many it moved.
pub(crate) async fn reap(
    conn: &mut MySqlConnection,
    now: Option<Millis>,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(fixed(&sql::REAP))
        .bind(now)
        .bind(now)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Claims up to each budget's limit under `lease`, inside the caller's transaction, and
/// returns the jobs in global order. `budgets` name distinct queues.
///
/// All budgets go in one statement, a UNION ALL of one locking select per budget, unless
/// the server refused that form once (`union` turns false), after which each budget is a
/// statement of its own.
///
/// `levels[i]`, when given, is where budget `i` looks: only those priority levels, each as
/// a range of due jobs (see [`levels`], looked up in the same transaction just before); an
/// empty list (nothing pending) skips the budget.
pub(crate) async fn claim(
    conn: &mut MySqlConnection,
    budgets: &[(&str, usize)],
    levels: &[Option<Vec<i32>>],
    lease: LeaseId,
    ttl_ms: Millis,
    now: Option<Millis>,
    union: &AtomicBool,
) -> Result<Vec<Job>, sqlx::Error> {
    let budgets: Vec<(&str, usize, Option<&[i32]>)> = budgets
        .iter()
        .zip(levels)
        .map(|(&(queue, limit), levels)| (queue, limit, levels.as_deref()))
        .filter(|(_, _, levels)| levels.is_none_or(|l| !l.is_empty()))
        .collect();
    let budgets = budgets.as_slice();
    let mut jobs = None;
    if budgets.is_empty() {
        jobs = Some(Vec::new());
    } else if budgets.len() > 1 && union.load(Ordering::Relaxed) {
        match candidates(conn, budgets, now, lease).await {
            Ok(found) => jobs = Some(found),
            Err(e) if refuses_union(&e) => {
                tracing::info!(
                    error = %e,
                    "the server refuses a UNION of locking selects; \
                     claiming one queue per statement"
                );
                union.store(false, Ordering::Relaxed);
            }
            Err(e) => return Err(e),
        }
    }
    let mut jobs = match jobs {
        Some(jobs) => jobs,
        None => {
            let mut all = Vec::new();
            for budget in budgets {
                all.extend(candidates(conn, std::slice::from_ref(budget), now, lease).await?);
            }
            all
        }
    };
    for ids in jobs.chunks(MAX_LIST) {
        let size = padded(ids.len());
        let text = sql::with_ids(&sql::LEASE_CLAIMED, size);

        let mut query = sqlx::query(&text).bind(lease.0).bind(now).bind(ttl_ms);
        for i in 0..size {
            query = query.bind(ids.get(i).map_or(0, |j| j.id.0));
        }
        query.execute(&mut *conn).await?;
    }
    jobs.sort_by_key(|j| (Reverse(j.priority), j.run_at, j.id));
    Ok(jobs)
}

/// Whether `e` is the server refusing the UNION ALL form of a claim (a syntax error, or
/// "incorrect usage of UNION and FOR UPDATE").
fn refuses_union(e: &sqlx::Error) -> bool {
    matches!(server_error_number(e), Some(1064 | 1221))
}

/// Locks and reads the candidates of `budgets` (queue, limit, levels), as they will be once
/// claimed.
async fn candidates(
    conn: &mut MySqlConnection,
    budgets: &[(&str, usize, Option<&[i32]>)],
    now: Option<Millis>,
    lease: LeaseId,
) -> Result<Vec<Job>, sqlx::Error> {
    // Level lists padded to a power of two (repeating the last), so that few texts are
    // prepared.
    let text = budgets
        .iter()
        .map(|(_, _, levels)| sql::claim_one(levels.map(|l| padded(l.len()))))
        .collect::<Vec<_>>()
        .join(" UNION ALL ");

    let mut query = sqlx::query(&text);
    for (queue, limit, levels) in budgets {
        query = query.bind(*queue);
        if let Some(levels) = levels {
            for i in 0..padded(levels.len()) {
                query = query.bind(levels[i.min(levels.len() - 1)]);
            }
        }
        query = query
            .bind(now)
            .bind(i64::try_from(*limit).unwrap_or(i64::MAX));
    }
    let rows = query.fetch_all(conn).await?;
    rows.iter()
        .map(|row| {
            let mut job = job_from_row(row, lease)?;
            job.attempt += 1;
            Ok(job)
        })
        .collect()
}

/// The most priority levels a claim reads level by level; a queue with more is claimed
/// over the whole queue.
const MAX_LEVELS: usize = 16;

/// The priority levels among `queue`'s pending jobs, highest first, one index dive each;
/// `None` past [`MAX_LEVELS`].
pub(crate) async fn levels(
    conn: &mut MySqlConnection,
    queue: &str,
) -> Result<Option<Vec<i32>>, sqlx::Error> {
    let mut found = Vec::new();
    let mut below = i64::MAX;
    while let Some(level) = sqlx::query_scalar::<_, i32>(&sql::LEVEL_BELOW)
        .bind(queue)
        .bind(below)
        .fetch_optional(&mut *conn)
        .await?
    {
        if found.len() == MAX_LEVELS {
            return Ok(None);
        }
        found.push(level);
        below = i64::from(level);
    }
    Ok(Some(found))
}

/// The earliest `run_at` after now among the pending jobs of `queues`.
pub(crate) async fn next_due(
    conn: &mut MySqlConnection,
    queues: &[&str],
    now: Option<Millis>,
) -> Result<Option<Millis>, sqlx::Error> {
    if queues.is_empty() {
        return Ok(None);
    }
    let text = sql::next_due(queues.len());

    let mut query = sqlx::query_scalar(&text);
    for queue in queues {
        query = query.bind(*queue).bind(now);
    }
    query.fetch_one(conn).await
}

/// What [`probe`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Probe {
    /// The earliest `run_at` among the queues' pending jobs, due or delayed.
    pub(crate) first_run_at: Option<Millis>,
    /// Whether a lease has expired (asked only when the reaper is due).
    pub(crate) expired: bool,
    /// The clock the two were read against.
    pub(crate) now: Millis,
}

impl Probe {
    /// Whether a claim may find a job: one is due, or the reaper has leases to return.
    pub(crate) fn found_work(&self) -> bool {
        self.expired || self.first_run_at.is_some_and(|at| at <= self.now)
    }

    /// When the earliest delayed job is due, if none is due yet.
    pub(crate) fn next_due(&self) -> Option<Millis> {
        self.first_run_at.filter(|&at| at > self.now)
    }
}

/// Whether a claim over `queues` would find anything, without a transaction or a lock:
/// one statement, one index dive per queue (and one for expired leases when `reap`).
pub(crate) async fn probe(
    conn: &mut MySqlConnection,
    queues: &[&str],
    reap: bool,
    now: Option<Millis>,
) -> Result<Probe, sqlx::Error> {
    let text = sql::probe(queues.len());
    let mut query = sqlx::query(&text);
    for queue in queues {
        query = query.bind(*queue);
    }
    let row = query.bind(reap).bind(now).bind(now).fetch_one(conn).await?;
    Ok(Probe {
        first_run_at: row.try_get(0)?,
        expired: row.try_get::<i64, _>(1)? != 0,
        now: row.try_get(2)?,
    })
}

/// What a settle did, and whether any job went back to pending (to wake workers).
pub(crate) struct Settled {
    pub(crate) report: SettleReport,
    pub(crate) requeued: bool,
}

/// Applies settlements inside the caller's transaction: those whose job is still held
/// under the named lease apply, the others are fenced.
///
/// First optimistically, with the lease in every statement's condition: when each
/// statement touched as many rows as it named, all applied. Otherwise (something was
/// fenced, or a job is named twice) the transaction starts over, locks the named rows to
/// learn which are still held under their lease, and applies exactly those.
pub(crate) async fn settle(
    conn: &mut MySqlConnection,
    settlements: &[Settlement],
    now: Option<Millis>,
) -> Result<Settled, sqlx::Error> {
    let distinct: HashSet<JobId> = settlements.iter().map(|s| s.job).collect();
    if distinct.len() == settlements.len() {
        let all: Vec<&Settlement> = settlements.iter().collect();
        if apply(conn, &all, now).await? == settlements.len() as u64 {
            return Ok(Settled {
                report: SettleReport {
                    applied: settlements.len(),
                    fenced: Vec::new(),
                },
                requeued: all.iter().any(|s| requeues(&s.outcome)),
            });
        }
        restart(conn).await?;
    }

    let ids: Vec<i64> = distinct.iter().map(|id| id.0).collect();
    let mut held = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(MAX_LIST) {
        let size = padded(chunk.len());
        let text = sql::with_ids(&sql::SETTLE_LOCK, size);

        let mut query = sqlx::query(&text);
        for i in 0..size {
            query = query.bind(chunk.get(i).copied().unwrap_or(0));
        }
        for row in query.fetch_all(&mut *conn).await? {
            let (id, state, lease): (i64, i8, Option<i64>) =
                (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            if let (LEASED, Some(lease)) = (state, lease) {
                held.insert(id, lease);
            }
        }
    }
    let mut applied = Vec::new();
    let mut fenced = Vec::new();
    for s in settlements {
        // `remove`: a job named twice applies once, the first time.
        if held.get(&s.job.0) == Some(&s.lease.0) {
            held.remove(&s.job.0);
            applied.push(s);
        } else {
            fenced.push(s.job);
        }
    }
    apply(conn, &applied, now).await?;
    Ok(Settled {
        report: SettleReport {
            applied: applied.len(),
            fenced,
        },
        requeued: applied.iter().any(|s| requeues(&s.outcome)),
    })
}

fn requeues(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Retry { .. } | Outcome::Release)
}

/// Runs the settlements' statements (acks in one DELETE, the rest in one UPDATE, per
/// chunk) and returns the rows they touched.
async fn apply(
    conn: &mut MySqlConnection,
    settlements: &[&Settlement],
    now: Option<Millis>,
) -> Result<u64, sqlx::Error> {
    let (acks, others): (Vec<&Settlement>, Vec<&Settlement>) = settlements
        .iter()
        .partition(|s| matches!(s.outcome, Outcome::Ack));
    let mut touched = 0;
    for chunk in acks.chunks(MAX_LIST) {
        let size = padded(chunk.len());
        let text = sql::with_pairs(&sql::SETTLE_ACK, size);

        let mut query = sqlx::query(&text);
        for i in 0..size {
            let (id, lease) = chunk.get(i).map_or((0, 0), |s| (s.job.0, s.lease.0));
            query = query.bind(id).bind(lease);
        }
        touched += query.execute(&mut *conn).await?.rows_affected();
    }
    for chunk in others.chunks(MAX_SETTLE_ROWS) {
        let size = padded(chunk.len());
        let text = sql::settle_update(size);

        let mut query = sqlx::query(&text);
        for i in 0..size {
            let Some(s) = chunk.get(i) else {
                query = query
                    .bind(0i64)
                    .bind(0i64)
                    .bind(0i8)
                    .bind(0i64)
                    .bind(None::<&str>);
                continue;
            };
            let (kind, delay_ms, error) = match &s.outcome {
                Outcome::Retry { delay, error } => (RETRY, millis(*delay), Some(error.as_str())),
                Outcome::DeadLetter { error } => (DEAD_LETTER, 0, Some(error.as_str())),
                Outcome::Release => (RELEASE, 0, None),
                Outcome::Cancel => (CANCEL, 0, None),
                Outcome::Ack => unreachable!("acks were partitioned out"),
            };
            query = query
                .bind(s.job.0)
                .bind(s.lease.0)
                .bind(kind)
                .bind(delay_ms)
                .bind(error);
        }
        touched += query
            .bind(now)
            .bind(now)
            .execute(&mut *conn)
            .await?
            .rows_affected();
    }
    Ok(touched)
}

/// Extends the leases that are still live to `ttl_ms` from now; returns those that are
/// live afterwards. Two statements, each committing on its own: safe to repeat.
pub(crate) async fn renew(
    conn: &mut MySqlConnection,
    leases: &[i64],
    ttl_ms: Millis,
    now: Option<Millis>,
) -> Result<HashSet<i64>, sqlx::Error> {
    let mut live = HashSet::with_capacity(leases.len());
    for chunk in leases.chunks(MAX_LIST) {
        let size = padded(chunk.len());
        let ids: Vec<i64> = (0..size)
            .map(|i| chunk.get(i).copied().unwrap_or(0))
            .collect();
        let text = sql::with_ids(&sql::RENEW, size);

        let mut query = sqlx::query(&text).bind(now).bind(ttl_ms);
        for id in &ids {
            query = query.bind(*id);
        }
        query.bind(now).execute(&mut *conn).await?;

        // Renewed rows expire `ttl` after the update's now, so they are still live at this
        // later now; rows of a lease that had expired are not.
        let text = sql::with_ids(&sql::LIVE_LEASES, size);

        let mut query = sqlx::query_scalar::<_, i64>(&text);
        for id in &ids {
            query = query.bind(*id);
        }
        live.extend(query.bind(now).fetch_all(&mut *conn).await?);
    }
    Ok(live)
}

/// Cancels a pending job, or says who holds it.
pub(crate) async fn cancel(
    conn: &mut MySqlConnection,
    id: JobId,
    now: Option<Millis>,
) -> Result<CancelOutcome, sqlx::Error> {
    let done = sqlx::query(fixed(&sql::CANCEL))
        .bind(now)
        .bind(id.0)
        .execute(&mut *conn)
        .await?;
    if done.rows_affected() == 1 {
        return Ok(CancelOutcome::Cancelled);
    }
    let found: Option<(i8, Option<i64>)> = sqlx::query_as(fixed(&sql::JOB_LEASE))
        .bind(id.0)
        .fetch_optional(conn)
        .await?;
    Ok(match found {
        Some((LEASED, Some(lease))) => CancelOutcome::Held(LeaseId(lease)),
        _ => CancelOutcome::NotFound,
    })
}

/// One job's record.
pub(crate) async fn job(
    conn: &mut MySqlConnection,
    id: JobId,
) -> Result<Option<JobRecord>, sqlx::Error> {
    let row = sqlx::query(fixed(&sql::JOB_RECORD))
        .bind(id.0)
        .fetch_optional(conn)
        .await?;
    row.as_ref().map(record_from_row).transpose()
}

/// A queue's jobs by state; due and scheduled are split at now.
pub(crate) async fn counts(
    conn: &mut MySqlConnection,
    queue: &str,
    now: Option<Millis>,
) -> Result<QueueCounts, sqlx::Error> {
    let (pending, scheduled, leased, dead): (i64, i64, i64, i64) =
        sqlx::query_as(fixed(&sql::COUNTS))
            .bind(queue)
            .bind(now)
            .bind(queue)
            .bind(now)
            .bind(queue)
            .bind(queue)
            .fetch_one(conn)
            .await?;
    let n = |v: i64| v.max(0) as u64;
    Ok(QueueCounts {
        pending: n(pending),
        scheduled: n(scheduled),
        leased: n(leased),
        dead: n(dead),
    })
}

/// A queue's dead letters, oldest first.
pub(crate) async fn dead_letters(
    conn: &mut MySqlConnection,
    queue: &str,
    limit: usize,
) -> Result<Vec<JobRecord>, sqlx::Error> {
    let rows = sqlx::query(fixed(&sql::DEAD_LETTERS))
        .bind(queue)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(conn)
        .await?;
    rows.iter().map(record_from_row).collect()
}

/// Removes every job of a queue; returns how many went.
pub(crate) async fn purge(conn: &mut MySqlConnection, queue: &str) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(fixed(&sql::PURGE))
        .bind(queue)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// The newest job id, if there is a job.
pub(crate) async fn max_id(conn: &mut MySqlConnection) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(fixed(&sql::MAX_ID))
        .fetch_one(conn)
        .await
}

/// A duration in milliseconds, saturating.
pub(crate) fn millis(d: std::time::Duration) -> Millis {
    Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)
}

/// Reads the columns `id, queue, payload, priority, run_at, attempt, max_attempts,
/// headers, created_at`, in that order, as a job held under `lease`.
fn job_from_row(row: &MySqlRow, lease: LeaseId) -> Result<Job, sqlx::Error> {
    let headers: Option<String> = row.try_get(7)?;
    let headers = headers_from_json(headers.as_deref()).map_err(|e| sqlx::Error::ColumnDecode {
        index: "headers".into(),
        source: Box::new(e),
    })?;
    Ok(Job {
        id: JobId(row.try_get(0)?),
        // `ascii_bin` reaches the client flagged binary, which sqlx's type check refuses
        // for a `String`; the bytes are ASCII, and decoding still checks them.
        queue: row.try_get_unchecked(1)?,
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

/// Reads a job's columns (see [`job_from_row`]) followed by `state, lease_id, last_error`.
fn record_from_row(row: &MySqlRow) -> Result<JobRecord, sqlx::Error> {
    let state = match row.try_get::<i8, _>(9)? {
        PENDING => JobState::Pending,
        LEASED => JobState::Leased,
        COMPLETED => JobState::Completed,
        DEAD => JobState::Dead,
        CANCELLED => JobState::Cancelled,
        other => {
            return Err(sqlx::Error::ColumnDecode {
                index: "state".into(),
                source: format!("unknown job state {other}").into(),
            });
        }
    };
    let lease = match (state, row.try_get::<Option<i64>, _>(10)?) {
        (JobState::Leased, Some(lease)) => LeaseId(lease),
        _ => LeaseId(0),
    };
    Ok(JobRecord {
        job: job_from_row(row, lease)?,
        state,
        last_error: row.try_get(11)?,
    })
}
