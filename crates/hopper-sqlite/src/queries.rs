//! The broker's operations as they run on the database thread, inside the group's
//! transaction and the command's own savepoint. Each takes `now` from its caller; nothing
//! here reads a clock.

use std::cmp::Reverse;
use std::collections::HashSet;

use hopper_core::admin::{ERROR_HISTORY, bounded_error};
use hopper_core::{
    Budget, CancelOutcome, Job, JobId, JobRecord, LeaseId, Millis, NewJob, Outcome, QueueCounts,
    SettleReport, Settlement,
};
use rusqlite::{Connection, OptionalExtension, params};

use crate::groups::{self, Ended};
use crate::ordering::{self, Line};
use crate::rate::Gate;
use crate::rate_keys::DEFER_PER_CLAIM;
use crate::rows::candidate_from_row;
pub(crate) use crate::rows::record_from_row;
use crate::sql;
pub(crate) use crate::store::{CANCELLED, COMPLETED, DEAD, LEASED, insert_job};

/// The error kept on a job whose lease expired while it was on its last attempt.
const LEASE_EXPIRED_ON_FINAL_ATTEMPT: &str = "lease expired on the final attempt";

/// The entries a job's error history keeps, as the statements that append to it bind it.
pub(crate) const HISTORY: i64 = ERROR_HISTORY as i64;

/// Inserts the jobs in order and returns their ids. Jobs with a unique or an ordering key or
/// a group go through [`crate::unique::enqueue`] instead.
pub(crate) fn enqueue(
    conn: &Connection,
    jobs: &[NewJob],
    now: Millis,
) -> rusqlite::Result<Vec<JobId>> {
    let mut insert = conn.prepare_cached(sql::INSERT_JOB)?;
    jobs.iter()
        .map(|job| insert_job(&mut insert, job, now, &[]))
        .collect()
}

/// What one fetch claimed, in global order, and when the next delayed job falls due if
/// some budget came back short (or, if sooner, when a rate window that held jobs back has
/// room again); whether the jobs it ended (reaped or buried) unblocked others of their
/// ordering keys.
pub(crate) struct Claimed {
    pub(crate) jobs: Vec<Job>,
    pub(crate) next_due: Option<Millis>,
    pub(crate) unblocked: bool,
}

/// Takes expired leases back when `reap_expired` (the broker paces it), then claims up to
/// each budget under `lease`, stamping each job's start with `now`.
///
/// A claim reads a budget's candidates in fetch order, then takes each with an update that
/// applies only while the job is still pending, so a job another writer took in between is
/// skipped rather than taken twice. Reading first and updating by id, rather than one
/// `UPDATE … WHERE id IN (SELECT …) RETURNING …`, spares SQLite the two temporary b-trees
/// that statement builds on every run, which cost more than the claim itself.
///
/// A rate-limited queue's budget is cut to its window's room, and the window written back
/// with the claim's start ([`crate::rate`]); when that held jobs back, the next due time is
/// no later than the window's next room.
pub(crate) fn fetch(
    conn: &Connection,
    budgets: &[Budget],
    lease: LeaseId,
    lease_expires: Millis,
    now: Millis,
    reap_expired: bool,
) -> rusqlite::Result<Claimed> {
    let mut unblocked = false;
    if reap_expired {
        unblocked |= reap(conn, now)?;
    }
    let mut top_level = conn.prepare_cached(sql::CLAIM_TOP_LEVEL)?;
    let mut candidates = conn.prepare_cached(sql::CLAIM_CANDIDATES)?;
    let mut claim = conn.prepare_cached(sql::CLAIM_JOB)?;
    // The lease, its expiry and the start are the same for every job of the fetch: bound
    // once here, each job then binds only its id (a run's reset keeps the bindings).
    claim.raw_bind_parameter(2, lease.0)?;
    claim.raw_bind_parameter(3, lease_expires)?;
    claim.raw_bind_parameter(4, now)?;
    let mut jobs = Vec::new();
    let mut short = Vec::new();
    let mut next_due: Option<Millis> = None;
    // Looked up in the statement cache only when a claim goes past a queue's top level or
    // a budget comes back short: each lookup hashes the statement's text.
    let mut next_level = None;
    for budget in budgets.iter().filter(|b| b.limit > 0) {
        let queue = budget.queue.as_str();
        let (top, mut gate) = top_level.query_row(params![queue], |row| {
            Ok((
                row.get::<_, Option<i64>>(0)?,
                Gate::of_row(queue, row, now)?,
            ))
        })?;
        let allowed = gate.as_ref().map_or(budget.limit, |g| g.cut(budget.limit));
        let mut taken = 0;
        // Level by level, highest priority first, each read as a range of due jobs.
        let mut level = top;
        while taken < allowed {
            let Some(at) = level else {
                break;
            };
            let limit = i64::try_from(allowed - taken).unwrap_or(i64::MAX);
            let found = candidates
                .query_map(params![queue, at, now, limit], candidate_from_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            // A full level that came back short lost races to another process: stop
            // there, as a lower level must not go ahead of this one's remaining jobs.
            let exhausted = (found.len() as i64) < limit;
            let mut keys = gate.as_mut().and_then(|g| g.keys.as_mut());
            let deferred_before = keys.as_ref().map_or(0, |k| k.deferred);
            for candidate in found {
                let mut job = match candidate {
                    Ok(job) => job,
                    Err(unreadable) => {
                        unblocked |= unreadable.bury(conn, now)?;
                        continue;
                    }
                };
                let key = match keys.as_mut() {
                    Some(keys) => match keys.admit(conn, queue, job.id, now)? {
                        Some(key) => Some(key),
                        // Moved to when its key's window has room.
                        None => continue,
                    },
                    None => None,
                };
                claim.raw_bind_parameter(1, job.id.0)?;
                if claim.raw_execute()? == 1 {
                    if let (Some(keys), Some(key)) = (keys.as_mut(), key) {
                        keys.started(&key, now);
                    }
                    job.attempt += 1;
                    job.lease = lease;
                    jobs.push(job);
                    taken += 1;
                }
            }
            // Under a limit per key, jobs moved back leave room in the level: read it again
            // (they are no longer due), up to the claim's bound on moves.
            let moved = keys.map(|k| (k.deferred > deferred_before, k.deferred));
            if let Some((true, total)) = moved {
                if !exhausted && taken < allowed && total < DEFER_PER_CLAIM {
                    continue;
                }
            }
            if !exhausted || taken >= allowed {
                break;
            }
            level = level_below(cached(&mut next_level, conn, sql::NEXT_LEVEL)?, queue, at)?;
        }
        if let Some(gate) = gate {
            let room_at = gate.claimed(conn, queue, budget.limit, taken, top.is_some(), now)?;
            next_due = next_due.into_iter().chain(room_at).min();
        }
        if taken < budget.limit {
            short.push(queue);
        }
    }
    jobs.sort_by_key(|j| (Reverse(j.priority), j.run_at, j.id));

    if !short.is_empty() {
        let mut due = conn.prepare_cached(sql::NEXT_DUE)?;
        let next_level = cached(&mut next_level, conn, sql::NEXT_LEVEL)?;
        for queue in short {
            let at = earliest_by_level(next_level, &mut due, queue, now)?;
            next_due = next_due.into_iter().chain(at).min();
        }
    }
    Ok(Claimed {
        jobs,
        next_due,
        unblocked,
    })
}

/// The statement `text` from the cache, looked up the first time it is asked for.
fn cached<'s, 'c>(
    slot: &'s mut Option<rusqlite::CachedStatement<'c>>,
    conn: &'c Connection,
    text: &str,
) -> rusqlite::Result<&'s mut rusqlite::CachedStatement<'c>> {
    match slot {
        Some(stmt) => Ok(stmt),
        None => Ok(slot.insert(conn.prepare_cached(text)?)),
    }
}

/// The smallest `run_at` that `per_level` (a statement taking queue, priority and now)
/// finds among `queue`'s priority levels, walked one level at a time as claims read them.
pub(crate) fn earliest_by_level(
    next_level: &mut rusqlite::CachedStatement<'_>,
    per_level: &mut rusqlite::CachedStatement<'_>,
    queue: &str,
    now: Millis,
) -> rusqlite::Result<Option<Millis>> {
    let mut earliest: Option<Millis> = None;
    let mut above = i64::MAX;
    while let Some(level) = level_below(next_level, queue, above)? {
        above = level;
        let at: Option<Millis> = per_level
            .query_row(params![queue, level, now], |row| row.get(0))
            .optional()?;
        earliest = earliest.into_iter().chain(at).min();
    }
    Ok(earliest)
}

/// The highest priority below `above` among `queue`'s pending jobs (`NEXT_LEVEL`): one
/// step of the walk over a queue's priority levels, highest first.
pub(crate) fn level_below(
    next_level: &mut rusqlite::CachedStatement<'_>,
    queue: &str,
    above: i64,
) -> rusqlite::Result<Option<i64>> {
    next_level
        .query_row(params![queue, above], |row| row.get(0))
        .optional()
}

/// Returns jobs whose lease expired to their queue, dead-lettering those that were on
/// their last attempt; says whether that unblocked jobs of their ordering keys or enqueued
/// a completion job of their groups.
fn reap(conn: &Connection, now: Millis) -> rusqlite::Result<bool> {
    let died = conn
        .prepare_cached(sql::REAP_FINAL_ATTEMPTS)?
        .query_map(
            params![now, LEASE_EXPIRED_ON_FINAL_ATTEMPT, HISTORY],
            |row| Ok((Line::of_row(row)?, row.get(2)?, groups::group_of(row, 3)?)),
        )?
        .collect::<rusqlite::Result<Vec<(Option<Line>, i64, Option<Vec<u8>>)>>>()?;
    conn.prepare_cached(sql::REAP_EXPIRED_LEASES)?
        .execute(params![now])?;
    let mut woke = false;
    for (line, id, group) in died {
        if let Some(line) = line {
            woke |= ordering::head_ended(conn, &line, now)?;
        }
        if let Some(group) = group {
            woke |= groups::member_ended(conn, &group, id, Ended::Dead, now)?;
        }
    }
    Ok(woke)
}

/// Applies each settlement whose lease still holds its job. Also says whether any job went
/// back to pending or was unblocked, so the caller can wake idle workers.
pub(crate) fn settle(
    conn: &Connection,
    settlements: &[Settlement],
    now: Millis,
) -> rusqlite::Result<(SettleReport, bool)> {
    let mut report = SettleReport::default();
    let mut requeued = false;
    // Looked up in the statement cache once per batch, not per job: each lookup hashes the
    // statement's text. (One `DELETE … WHERE id IN (SELECT value FROM json_each(?))` per
    // batch was tried instead: the raw loop at batch 10 fell from 29–31k to 21–23k.)
    let mut ack = conn.prepare_cached(sql::SETTLE_ACK)?;
    for s in settlements {
        let (id, lease) = (s.job.0, s.lease.0);
        let changed = match &s.outcome {
            Outcome::Ack => ack.execute(params![id, lease])?,
            Outcome::Retry {
                delay,
                error,
                step_aside,
            } => {
                let delay = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
                let run_at = now.saturating_add(delay);
                let changed = conn.prepare_cached(sql::SETTLE_RETRY)?.execute(params![
                    id,
                    lease,
                    run_at,
                    error,
                    now,
                    bounded_error(error),
                    HISTORY
                ])?;
                if changed > 0 && *step_aside {
                    ordering::step_aside(conn, id, now)?;
                }
                changed
            }
            Outcome::DeadLetter { error } => conn
                .prepare_cached(sql::SETTLE_DEAD_LETTER)?
                .execute(params![
                    id,
                    lease,
                    error,
                    now,
                    bounded_error(error),
                    HISTORY
                ])?,
            Outcome::Release => conn
                .prepare_cached(sql::SETTLE_RELEASE)?
                .execute(params![id, lease])?,
            Outcome::Snooze { delay } => {
                let delay = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
                conn.prepare_cached(sql::SETTLE_SNOOZE)?.execute(params![
                    id,
                    lease,
                    now.saturating_add(delay)
                ])?
            }
            Outcome::Cancel => conn
                .prepare_cached(sql::SETTLE_CANCEL)?
                .execute(params![id, lease, now])?,
        };
        if changed == 0 {
            // The statements that end a job match only jobs without an ordering key.
            match ordering::settle_ended(conn, s, now)? {
                Some(unblocked) => {
                    report.applied += 1;
                    requeued |= unblocked;
                }
                None => report.fenced.push(s.job),
            }
            continue;
        }
        report.applied += 1;
        requeued |= matches!(
            s.outcome,
            Outcome::Retry { .. } | Outcome::Release | Outcome::Snooze { .. }
        );
    }
    Ok((report, requeued))
}

/// Moves each live lease's expiry to `expires`; returns the leases that hold no job any
/// more or had already expired.
pub(crate) fn renew(
    conn: &Connection,
    leases: &[LeaseId],
    expires: Millis,
    now: Millis,
) -> rusqlite::Result<Vec<LeaseId>> {
    let ids: Vec<i64> = leases.iter().map(|l| l.0).collect();
    let ids = serde_json::to_string(&ids).expect("a list of integers is valid JSON");
    let mut renew = conn.prepare_cached(sql::RENEW_LEASE)?;
    let renewed = renew
        .query_map(params![ids, expires, now], |row| row.get::<_, i64>(0))?
        .collect::<rusqlite::Result<HashSet<i64>>>()?;
    let mut seen = HashSet::with_capacity(leases.len());
    Ok(leases
        .iter()
        .copied()
        .filter(|l| seen.insert(*l) && !renewed.contains(&l.0))
        .collect())
}

/// Cancels a pending job, or says who holds it. Also says whether the cancelled job let
/// the next one of its ordering key go, or its group's completion job, so the caller can
/// wake idle workers.
pub(crate) fn cancel(
    conn: &Connection,
    id: JobId,
    now: Millis,
) -> rusqlite::Result<(CancelOutcome, bool)> {
    let cancelled = conn
        .prepare_cached(sql::CANCEL_PENDING)?
        .query_row(params![id.0, now], |row| {
            Ok((
                Line::of_row(row)?,
                row.get::<_, Millis>(2)?,
                groups::group_of(row, 3)?,
            ))
        })
        .optional()?;
    if let Some((line, run_at, group)) = cancelled {
        // A job that was not blocked was its key's head.
        let mut woke = match line {
            Some(line) if !ordering::is_blocked(run_at) => ordering::head_ended(conn, &line, now)?,
            _ => false,
        };
        if let Some(group) = group {
            woke |= groups::member_ended(conn, &group, id.0, Ended::Cancelled, now)?;
        }
        return Ok((CancelOutcome::Cancelled, woke));
    }
    let found: Option<(i64, Option<i64>)> = conn
        .prepare_cached(sql::JOB_LEASE)?
        .query_row(params![id.0], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    let outcome = match found {
        Some((LEASED, Some(lease))) => CancelOutcome::Held(LeaseId(lease)),
        _ => CancelOutcome::NotFound,
    };
    Ok((outcome, false))
}

/// One job's record.
pub(crate) fn job(conn: &Connection, id: JobId) -> rusqlite::Result<Option<JobRecord>> {
    conn.prepare_cached(sql::JOB_RECORD)?
        .query_row(params![id.0], record_from_row)
        .optional()
}

/// A queue's jobs by state; due and scheduled are split at `now`.
pub(crate) fn counts(conn: &Connection, queue: &str, now: Millis) -> rusqlite::Result<QueueCounts> {
    conn.prepare_cached(sql::COUNTS)?
        .query_row(params![queue, now], |row| {
            Ok(QueueCounts {
                pending: row.get::<_, i64>(0)? as u64,
                scheduled: row.get::<_, i64>(1)? as u64,
                leased: row.get::<_, i64>(2)? as u64,
                dead: row.get::<_, i64>(3)? as u64,
            })
        })
}

/// A queue's dead letters, oldest first.
pub(crate) fn dead_letters(
    conn: &Connection,
    queue: &str,
    limit: usize,
) -> rusqlite::Result<Vec<JobRecord>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    conn.prepare_cached(sql::DEAD_LETTERS)?
        .query_map(params![queue, limit], record_from_row)?
        .collect()
}

/// Removes every job of a queue; returns how many went, and whether that enqueued a
/// completion job: the members not counted yet count as cancelled.
pub(crate) fn purge(conn: &Connection, queue: &str, now: Millis) -> rusqlite::Result<(u64, bool)> {
    let members = conn
        .prepare_cached(sql::PURGE_MEMBERS)?
        .query_map(params![queue], |row| groups::group_of(row, 0))?
        .filter_map(Result::transpose)
        .collect::<rusqlite::Result<Vec<Vec<u8>>>>()?;
    let gone = conn.prepare_cached(sql::PURGE)?.execute(params![queue])?;
    let gone = (gone + members.len()) as u64;
    let fired = groups::purged(conn, members, now)?;
    Ok((gone, fired))
}
