//! Fetching, inside the caller's transaction: the reaper, the claim of every budget under
//! one lease, and the next due time; and, outside any transaction, the probe that tells
//! whether a claim would find anything.

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};

use hopper_core::job::unreadable_row;
use hopper_core::{Job, JobId, LeaseId, Millis};
use sqlx::Row;
use sqlx::mysql::{MySqlConnection, MySqlRow};

use super::groups::{self, Ended, Member};
use super::ordering::{self, Line};
use super::rate::Windows;
use super::rate_keys::{DEFER_PER_CLAIM, KeyGate};
use super::rows::job_from_row;
use crate::conn::server_error_number;
use crate::sql::{self, MAX_LIST, fixed, padded};

/// What the reaper did: how many jobs it moved, and whether a job it dead-lettered let
/// the next job of its ordering key run or enqueued its group's completion job.
pub(crate) struct Reaped {
    pub(crate) moved: u64,
    pub(crate) unblocked: bool,
}

/// Returns jobs of expired leases to pending, dead-lettering those on their last attempt,
/// whose groups count them ([`groups::ended`]) and whose ordering keys then move on
/// ([`ordering::unblock`]).
///
/// The expired jobs are read and locked first: when none is, that read is the reaper's one
/// statement, as the `UPDATE` was; when some are, it names the jobs that die, which the
/// `UPDATE` cannot (MySQL has no `RETURNING`).
pub(crate) async fn reap(
    conn: &mut MySqlConnection,
    now: Option<Millis>,
    id_step: i64,
) -> Result<Reaped, sqlx::Error> {
    let rows = sqlx::query(fixed(&sql::REAP_EXPIRED))
        .bind(now)
        .fetch_all(&mut *conn)
        .await?;
    let mut ids = Vec::with_capacity(rows.len());
    let mut lines: Vec<Line> = Vec::new();
    let mut dead: Vec<Member> = Vec::new();
    for row in &rows {
        let id = row.try_get::<i64, _>(0)?;
        ids.push(id);
        let dies = row.try_get::<i64, _>(1)? != 0;
        if let (true, Some(group)) = (dies, groups::group_of(row, 4)?) {
            dead.push((group, id, Ended::Dead));
        }
        if let (true, Some(key)) = (dies, row.try_get::<Option<Vec<u8>>, _>(3)?) {
            lines.push((row.try_get_unchecked(2)?, key));
        }
    }
    let mut moved = 0;
    for chunk in ids.chunks(MAX_LIST) {
        let size = padded(chunk.len());
        let text = sql::with_ids(&sql::REAP, size);
        let mut query = sqlx::query(&text).bind(now).bind(now);
        for i in 0..size {
            query = query.bind(chunk.get(i).copied().unwrap_or(0));
        }
        moved += query.execute(&mut *conn).await?.rows_affected();
    }
    let fired = groups::ended(conn, dead, now, id_step).await?;
    let unblocked = ordering::unblock(conn, lines, now).await?;
    Ok(Reaped {
        moved,
        unblocked: unblocked || fired,
    })
}

/// What a claim did.
pub(crate) enum Claim {
    /// It took these jobs, in global order, under this lease.
    Taken(Vec<Job>, LeaseId),
    /// It found jobs of these queues, limited ([`rate`](super::rate)) though the claim
    /// does not hold their limits' rows, and took nothing: the caller claims again,
    /// locking them.
    Limited(Vec<String>),
}

/// Claims up to each budget's limit, inside the caller's transaction, and returns the jobs
/// in global order with the lease they are held under: `base`, its lowest bit saying
/// whether a job has an ordering key or a group ([`ordering::lease_for`]). `budgets` name distinct
/// queues; a budget of 0 is skipped.
///
/// `held` holds the limit rows the claim locked. Candidates of a limited queue
/// whose row it does not hold make it take nothing ([`Claim::Limited`]), or, with
/// `give_up`, take everything but them. Those of a queue it holds limited per key go
/// through the queue's key windows ([`claim_keyed`]).
///
/// All budgets go in one statement, a UNION ALL of one locking select per budget, unless
/// the server refused that form once (`union` turns false), after which each budget is a
/// statement of its own.
///
/// `levels[i]`, when given, is where budget `i` looks: only those priority levels, each as
/// a range of due jobs (see [`levels`], looked up in the same transaction just before); an
/// empty list (nothing pending) skips the budget.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn claim(
    conn: &mut MySqlConnection,
    budgets: &[(&str, usize)],
    levels: &[Option<Vec<i32>>],
    base: LeaseId,
    ttl_ms: Millis,
    now: Option<Millis>,
    union: &AtomicBool,
    held: &mut Windows,
    give_up: bool,
    id_step: i64,
) -> Result<Claim, sqlx::Error> {
    let budgets: Vec<(&str, usize, Option<&[i32]>)> = budgets
        .iter()
        .zip(levels)
        .map(|(&(queue, limit), levels)| (queue, limit, levels.as_deref()))
        .filter(|(_, limit, levels)| *limit > 0 && levels.is_none_or(|l| !l.is_empty()))
        .collect();
    let budgets = budgets.as_slice();
    let mut jobs = None;
    if budgets.is_empty() {
        jobs = Some(Claimed::default());
    } else if budgets.len() > 1 && union.load(Ordering::Relaxed) {
        match candidates(conn, budgets, now, id_step).await {
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
    let Claimed {
        mut jobs,
        mut ordered,
        mut limited,
        mut rate_keys,
    } = match jobs {
        Some(jobs) => jobs,
        None => {
            let mut all = Claimed::default();
            for budget in budgets {
                let one = candidates(conn, std::slice::from_ref(budget), now, id_step).await?;
                all.jobs.extend(one.jobs);
                all.ordered |= one.ordered;
                all.limited.extend(one.limited);
                all.rate_keys.extend(one.rate_keys);
            }
            all
        }
    };
    // Candidates of a queue limited since the fetch began are locked but never taken:
    // the transaction's end frees them.
    limited.retain(|queue| !held.holds(queue));
    if !limited.is_empty() {
        if !give_up {
            return Ok(Claim::Limited(limited));
        }
        jobs.retain(|j| !limited.contains(&j.queue));
    }
    for &(queue, limit, levels) in budgets {
        let Some(gate) = held.keys(queue) else {
            continue;
        };
        let (read, rest): (Vec<Job>, _) = jobs.into_iter().partition(|j| j.queue == queue);
        jobs = rest;
        let keys = read
            .iter()
            .filter_map(|j| Some((j.id, rate_keys.remove(&j.id)?)));
        let keys = keys.collect();
        let now = now.expect("a claim that holds a limit goes by the time read with it");
        let budget = (queue, limit, levels);
        let (taken, keyed) = claim_keyed(conn, gate, read, keys, budget, now, id_step).await?;
        ordered |= keyed;
        jobs.extend(taken);
    }
    let lease = ordering::lease_for(base, ordered);
    for job in &mut jobs {
        job.lease = lease;
    }
    for ids in jobs.chunks(MAX_LIST) {
        let size = padded(ids.len());
        let text = sql::with_ids(&sql::LEASE_CLAIMED, size);

        let mut query = sqlx::query(&text)
            .bind(lease.0)
            .bind(now)
            .bind(ttl_ms)
            .bind(now);
        for i in 0..size {
            query = query.bind(ids.get(i).map_or(0, |j| j.id.0));
        }
        query.execute(&mut *conn).await?;
    }
    jobs.sort_by_key(|j| (Reverse(j.priority), j.run_at, j.id));
    Ok(Claim::Taken(jobs, lease))
}

/// Takes what `gate` lets through of the candidates `read` of one budget (queue, limit,
/// levels), locked by the claim, in its order, their rate keys in `keys`; and of further
/// reads of the queue, each twice as far as the last, until the budget is filled, the
/// queue has no more due jobs, or [`DEFER_PER_CLAIM`] jobs were moved (see
/// [`super::rate_keys`]). Further reads lock and read ids and keys only; the jobs taken
/// from them are read whole at the end, so a deep backlog of large payloads is not carried
/// over the wire while the queue's lock is held. Returns the jobs taken, and whether one
/// read whole at the end has an ordering key or a group.
async fn claim_keyed(
    conn: &mut MySqlConnection,
    gate: &mut KeyGate,
    read: Vec<Job>,
    mut keys: HashMap<JobId, Vec<u8>>,
    (queue, want, levels): (&str, usize, Option<&[i32]>),
    now: Millis,
    id_step: i64,
) -> Result<(Vec<Job>, bool), sqlx::Error> {
    let mut rows: Vec<(JobId, Vec<u8>)> = read
        .iter()
        .map(|j| (j.id, keys.remove(&j.id).unwrap_or_default()))
        .collect();
    let mut whole: HashMap<JobId, Job> = read.into_iter().map(|j| (j.id, j)).collect();
    let (mut taken, mut to_read) = (Vec::new(), Vec::new());
    let mut seen: HashSet<JobId> = HashSet::new();
    let (mut asked, mut span) = (want, want);
    loop {
        let full = rows.len() >= asked;
        gate.load(conn, rows.iter().map(|(_, key)| key.as_slice()), now)
            .await?;
        let moved_before = gate.deferred;
        for (id, key) in &rows {
            if seen.len() >= want || gate.capped() {
                break;
            }
            if !seen.contains(id) && gate.admit(*id, key, now) {
                seen.insert(*id);
                match whole.remove(id) {
                    Some(job) => taken.push(job),
                    None => to_read.push(*id),
                }
            }
        }
        gate.flush(conn).await?;
        let moved = gate.deferred > moved_before;
        if seen.len() >= want || !full || !moved || gate.capped() {
            break;
        }
        // The jobs moved are no longer due: read on past them, further each time, as a
        // backlog of one key may fill many reads.
        span = span.saturating_mul(2).min(DEFER_PER_CLAIM);
        asked = seen.len() + span;
        rows = key_rows(conn, (queue, asked, levels), now).await?;
    }
    let mut ordered = false;
    for ids in to_read.chunks(MAX_LIST) {
        let size = padded(ids.len());
        let text = sql::with_ids(&sql::CLAIM_BY_IDS, size);
        let mut query = sqlx::query(&text);
        for i in 0..size {
            query = query.bind(ids[i.min(ids.len() - 1)].0);
        }
        let rows = query.fetch_all(&mut *conn).await?;
        let read = from_rows(conn, &rows, Some(now), id_step).await?;
        ordered |= read.ordered;
        taken.extend(read.jobs);
    }
    Ok((taken, ordered))
}

/// The ids and rate keys (empty for none) of the next due jobs of one budget, locked
/// (`claim_keys.sql`).
async fn key_rows(
    conn: &mut MySqlConnection,
    (queue, limit, levels): (&str, usize, Option<&[i32]>),
    now: Millis,
) -> Result<Vec<(JobId, Vec<u8>)>, sqlx::Error> {
    let text = sql::claim_keys(levels.map(|l| padded(l.len())));
    let mut query = sqlx::query(&text).bind(queue);
    if let Some(levels) = levels {
        for i in 0..padded(levels.len()) {
            query = query.bind(levels[i.min(levels.len() - 1)]);
        }
    }
    let rows = query
        .bind(now)
        .bind(queue)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *conn)
        .await?;
    rows.iter()
        .map(|row| {
            let key: Option<Vec<u8>> = row.try_get(1)?;
            Ok((JobId(row.try_get(0)?), key.unwrap_or_default()))
        })
        .collect()
}

/// Whether `e` is the server refusing the UNION ALL form of a claim (a syntax error, or
/// "incorrect usage of UNION and FOR UPDATE").
fn refuses_union(e: &sqlx::Error) -> bool {
    matches!(server_error_number(e), Some(1064 | 1221))
}

/// Candidates of a claim, as they will be once claimed (their lease still to set), whether
/// one has an ordering key or is a member of a group (`ordered`: settlements of either
/// take the locking path), the queues among theirs that have a rate limit, and the rate
/// keys of those that have one.
#[derive(Default)]
struct Claimed {
    jobs: Vec<Job>,
    ordered: bool,
    limited: Vec<String>,
    rate_keys: HashMap<JobId, Vec<u8>>,
}

/// Locks and reads the candidates of `budgets` (queue, limit, levels).
async fn candidates(
    conn: &mut MySqlConnection,
    budgets: &[(&str, usize, Option<&[i32]>)],
    now: Option<Millis>,
    id_step: i64,
) -> Result<Claimed, sqlx::Error> {
    // Level lists padded to a power of two (repeating the last), so that few texts are
    // prepared.
    let text = budgets
        .iter()
        .map(|(_, _, levels)| sql::claim_one(levels.map(|l| padded(l.len()))))
        .collect::<Vec<_>>()
        .join(" UNION ALL ");

    let mut query = sqlx::query(&text);
    for (queue, limit, levels) in budgets {
        query = query.bind(*queue).bind(*queue);
        if let Some(levels) = levels {
            for i in 0..padded(levels.len()) {
                query = query.bind(levels[i.min(levels.len() - 1)]);
            }
        }
        query = query
            .bind(now)
            .bind(*queue)
            .bind(i64::try_from(*limit).unwrap_or(i64::MAX));
    }
    let rows = query.fetch_all(&mut *conn).await?;
    from_rows(conn, &rows, now, id_step).await
}

/// Candidates read with `claim.sql`'s columns, as jobs; a row that cannot be read as a job
/// is dead-lettered ([`bury`]).
async fn from_rows(
    conn: &mut MySqlConnection,
    rows: &[MySqlRow],
    now: Option<Millis>,
    id_step: i64,
) -> Result<Claimed, sqlx::Error> {
    let mut claimed = Claimed {
        jobs: Vec::with_capacity(rows.len()),
        ..Claimed::default()
    };
    for row in rows {
        let key: Option<Vec<u8>> = row.try_get(9)?;
        let group = groups::group_of(row, 11)?;
        if row.try_get::<i64, _>(10)? != 0 {
            let queue: String = row.try_get_unchecked(1)?;
            if !claimed.limited.contains(&queue) {
                claimed.limited.push(queue);
            }
        }
        match job_from_row(row, LeaseId(0)) {
            Ok(mut job) => {
                job.attempt += 1;
                if let Some(key) = row.try_get::<Option<Vec<u8>>, _>(12)? {
                    claimed.rate_keys.insert(job.id, key);
                }
                claimed.jobs.push(job);
                claimed.ordered |= key.is_some() || group.is_some();
            }
            // Locked by this claim like the rest: dead-lettered in its transaction, and
            // the next job of its key may run (found by the next fetch: nothing is woken
            // for a row this rare).
            Err(e) => {
                bury(conn, row, &e, now).await?;
                if let Some(group) = group {
                    let id = row.try_get::<i64, _>(0)?;
                    groups::ended(conn, vec![(group, id, Ended::Dead)], now, id_step).await?;
                }
                if let Some(key) = key {
                    let line = (row.try_get_unchecked(1)?, key);
                    ordering::unblock(conn, vec![line], now).await?;
                }
            }
        }
    }
    Ok(claimed)
}

/// Dead-letters a candidate row that cannot be read as a job (a column another program
/// wrote out of range), with the column and the reason, and logs it: it must neither fail
/// every claim of its queue, and of every queue claimed with it, nor come back.
async fn bury(
    conn: &mut MySqlConnection,
    row: &MySqlRow,
    e: &sqlx::Error,
    now: Option<Millis>,
) -> Result<(), sqlx::Error> {
    let id: i64 = row.try_get(0)?;
    let queue: String = row.try_get_unchecked(1)?;
    let reason = match e {
        sqlx::Error::ColumnDecode { index, source } => {
            unreadable_row(format_args!("column {index}: {source}"))
        }
        other => unreadable_row(other),
    };
    sqlx::query(&sql::BURY_PENDING)
        .bind(&reason)
        .bind(now)
        .bind(id)
        .execute(&mut *conn)
        .await?;
    tracing::error!(job = id, %queue, %reason, "dead-lettered a row that cannot be read as a job");
    Ok(())
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
        query = query.bind(*queue).bind(*queue);
    }
    let row = query.bind(reap).bind(now).bind(now).fetch_one(conn).await?;
    Ok(Probe {
        first_run_at: row.try_get(0)?,
        expired: row.try_get::<i64, _>(1)? != 0,
        now: row.try_get(2)?,
    })
}
