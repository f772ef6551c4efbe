//! The operator calls as they run on the database thread: listings a page at a time,
//! dead letters re-driven or discarded, pauses, and queue statistics. Each takes `now`
//! from its caller, as the broker's other operations do.
//!
//! A listing is keyset paging: every statement starts at the cursor in an index and
//! reads a page's worth of entries, so a page deep in a million jobs costs what the first
//! does. Waiting jobs are read a priority level at a time, as a claim reads them: a level's
//! due jobs come before its delayed ones in the ready index, so one range over every level
//! would walk the delayed jobs of each level to list the due ones of the next.

use std::collections::BTreeSet;

use hopper_core::admin::{Cursor, JobPage, JobQuery, ListState, QueueStatus, Selection, lag_since};
use hopper_core::job::BLOCKED;
use hopper_core::registry::windows;
use hopper_core::{JobRecord, Millis, QueueCounts};
use rusqlite::{CachedStatement, Connection, OptionalExtension, Row, params};

use crate::ordering::{self, Line};
use crate::queries::{self, CANCELLED, COMPLETED, DEAD, level_below, record_from_row};
use crate::{registry, sql};

/// One page of `query`'s jobs, in the order asked. The caller checked the query.
pub(crate) fn list(conn: &Connection, query: &JobQuery, now: Millis) -> rusqlite::Result<JobPage> {
    let limit = query.limit;
    let mut page = Vec::with_capacity(limit);
    match query.state {
        ListState::Pending | ListState::Scheduled => waiting(conn, query, now, &mut page)?,
        ListState::Leased => {
            let (text, from) = if query.newest_first {
                (
                    sql::LIST_LEASED_NEWEST,
                    query.after.map_or(LAST, key_and_id),
                )
            } else {
                (sql::LIST_LEASED, query.after.map_or(FIRST, key_and_id))
            };
            let mut stmt = conn.prepare_cached(text)?;
            let rows = stmt.query(params![query.queue, from.0, from.1, limit as i64])?;
            read_page(rows, query.state, &mut page)?;
        }
        ListState::Dead | ListState::Completed | ListState::Cancelled => {
            let state = match query.state {
                ListState::Completed => COMPLETED,
                ListState::Dead => DEAD,
                _ => CANCELLED,
            };
            let (text, from) = if query.newest_first {
                (
                    sql::LIST_FINISHED_NEWEST,
                    query.after.map_or(LAST, key_and_id),
                )
            } else {
                (sql::LIST_FINISHED, query.after.map_or(FIRST, key_and_id))
            };
            let mut stmt = conn.prepare_cached(text)?;
            let rows = stmt.query(params![query.queue, state, from.0, from.1, limit as i64])?;
            read_page(rows, query.state, &mut page)?;
        }
    }
    // Each statement's two ranges run in turn (a compound of co-routines, which the plan
    // test pins), so its LIMIT keeps the first rows in order; the join back to the table is
    // not bound to keep that order, so the page is sorted here.
    let state = query.state;
    page.sort_unstable_by_key(|(cursor, _)| ascending(state, cursor));
    if query.newest_first {
        page.reverse();
    }
    let next = (page.len() == limit)
        .then(|| page.last().map(|(cursor, _)| *cursor))
        .flatten();
    Ok(JobPage {
        jobs: page.into_iter().map(|(_, record)| record).collect(),
        next,
    })
}

/// Before every `(key, id)` of a listing ordered by them, and after every one.
const FIRST: (i64, i64) = (i64::MIN, i64::MIN);
const LAST: (i64, i64) = (i64::MAX, i64::MAX);

fn key_and_id(cursor: Cursor) -> (i64, i64) {
    (cursor.key, cursor.id.0)
}

/// Where a job falls in the oldest-first order of its state's listing.
fn ascending(state: ListState, c: &Cursor) -> (i64, i64, i64) {
    match state {
        // Priorities are 32-bit, so their negation cannot overflow.
        ListState::Pending | ListState::Scheduled => (-c.key, c.sub, c.id.0),
        _ => (c.key, c.sub, c.id.0),
    }
}

/// Reads rows of a listing statement: a record's columns and the cursor's key last.
fn read_page(
    mut rows: rusqlite::Rows<'_>,
    state: ListState,
    page: &mut Vec<(Cursor, JobRecord)>,
) -> rusqlite::Result<()> {
    while let Some(row) = rows.next()? {
        page.push(listed(row, state)?);
    }
    Ok(())
}

fn listed(row: &Row<'_>, state: ListState) -> rusqlite::Result<(Cursor, JobRecord)> {
    let record = record_from_row(row)?;
    let key: Option<i64> = row.get(17)?;
    // The run_at as stored, where the index has the job: a blocked job's record shows its
    // own time.
    let sub = match state {
        ListState::Pending | ListState::Scheduled => row.get(4)?,
        _ => 0,
    };
    let cursor = Cursor {
        key: key.unwrap_or(0),
        sub,
        id: record.job.id,
    };
    Ok((cursor, record))
}

/// Pending or scheduled jobs, level by level from the cursor's. Bounds are `(run_at, id)`
/// pairs, both exclusive: pending jobs lie between the first and `now` (inclusive),
/// scheduled ones after `now`.
fn waiting(
    conn: &Connection,
    query: &JobQuery,
    now: Millis,
    page: &mut Vec<(Cursor, JobRecord)>,
) -> rusqlite::Result<()> {
    let after_now = now.saturating_add(1);
    let (floor, ceiling) = if query.state == ListState::Pending {
        ((i64::MIN, i64::MAX), (after_now, i64::MIN))
    } else {
        ((now, i64::MAX), (i64::MAX, i64::MIN))
    };
    let cursor = query.after.map(|c| (c.key, (c.sub, c.id.0)));
    let mut next_level = conn.prepare_cached(sql::NEXT_LEVEL)?;
    let mut level_above = conn.prepare_cached(sql::LEVEL_ABOVE)?;
    let (mut stmt, mut level, mut from, far) = if query.newest_first {
        let start = match cursor {
            Some((level, at)) => Some((level, at.min(ceiling))),
            None => higher_level(&mut level_above, &query.queue, i64::MIN)?.map(|l| (l, ceiling)),
        };
        let stmt = conn.prepare_cached(sql::LIST_WAITING_NEWEST)?;
        (
            stmt,
            start.map(|s| s.0),
            start.map_or(ceiling, |s| s.1),
            floor.0,
        )
    } else {
        let start = match cursor {
            Some((level, at)) => Some((level, at.max(floor))),
            None => level_below(&mut next_level, &query.queue, i64::MAX)?.map(|l| (l, floor)),
        };
        let stmt = conn.prepare_cached(sql::LIST_WAITING)?;
        (
            stmt,
            start.map(|s| s.0),
            start.map_or(floor, |s| s.1),
            ceiling.0,
        )
    };
    while let Some(priority) = level {
        let want = (query.limit - page.len()) as i64;
        let rows = stmt.query(params![query.queue, priority, from.0, from.1, far, want])?;
        read_page(rows, query.state, page)?;
        if page.len() == query.limit {
            break;
        }
        if query.newest_first {
            level = higher_level(&mut level_above, &query.queue, priority)?;
            from = ceiling;
        } else {
            level = level_below(&mut next_level, &query.queue, priority)?;
            from = floor;
        }
    }
    Ok(())
}

/// The lowest priority above `below` among `queue`'s pending jobs (`LEVEL_ABOVE`).
fn higher_level(
    level_above: &mut CachedStatement<'_>,
    queue: &str,
    below: i64,
) -> rusqlite::Result<Option<i64>> {
    level_above
        .query_row(params![queue, below], |row| row.get(0))
        .optional()
}

/// Whether a re-drive puts dead letters back or deletes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Redrive {
    Retry,
    Discard,
}

/// Re-drives the dead letters `which` selects; returns how many there were. A retried one
/// with an ordering key goes back blocked, and the first of its key is unblocked when the
/// key has no head ([`ordering::redriven`]).
pub(crate) fn redrive(
    conn: &Connection,
    which: &Selection,
    how: Redrive,
    now: Millis,
) -> rusqlite::Result<u64> {
    let ids: Vec<i64> = match which {
        Selection::Jobs(ids) => ids.iter().map(|id| id.0).collect(),
        Selection::Queue { queue, at_most } => {
            let at_most = i64::try_from(*at_most).unwrap_or(i64::MAX);
            conn.prepare_cached(sql::DEAD_CHUNK)?
                .query_map(params![queue, at_most], |row| row.get(0))?
                .collect::<rusqlite::Result<_>>()?
        }
    };
    if ids.is_empty() {
        return Ok(0);
    }
    let ids = serde_json::to_string(&ids).expect("a list of integers is valid JSON");
    let changed = match how {
        Redrive::Retry => {
            let mut lines = BTreeSet::new();
            let mut changed = 0;
            let mut retry = conn.prepare_cached(sql::RETRY_DEAD)?;
            let mut rows = retry.query(params![ids, now, BLOCKED])?;
            while let Some(row) = rows.next()? {
                changed += 1;
                lines.extend(Line::of_row(row)?);
            }
            drop(rows);
            ordering::redriven(conn, &lines, now)?;
            changed
        }
        Redrive::Discard => conn
            .prepare_cached(sql::DISCARD_DEAD)?
            .execute(params![ids])?,
    };
    Ok(changed as u64)
}

/// Pauses or resumes `queue`; returns whether that changed anything.
pub(crate) fn pause(
    conn: &Connection,
    queue: &str,
    paused: bool,
    now: Millis,
) -> rusqlite::Result<bool> {
    let changed = if paused {
        conn.prepare_cached(sql::PAUSE_QUEUE)?
            .execute(params![queue, now])?
    } else {
        conn.prepare_cached(sql::RESUME_QUEUE)?
            .execute(params![queue])?
    };
    Ok(changed == 1)
}

/// The queues with jobs, paused or rate-limited, in name order.
pub(crate) fn queue_names(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let names = conn
        .prepare_cached(sql::QUEUE_NAMES)?
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<BTreeSet<String>>>()?;
    Ok(names.into_iter().collect())
}

/// A queue's counts, pause, rate limit, lag, and throughput over the last minute and
/// hour. With a `bound` (`queue_glance`), each count stops at `bound + 1`
/// ([`counts_up_to`]); without, every count is exact.
pub(crate) fn stats(
    conn: &Connection,
    queue: &str,
    now: Millis,
    bound: Option<u64>,
) -> rusqlite::Result<QueueStatus> {
    let counts = match bound {
        None => queries::counts(conn, queue, now)?,
        Some(bound) => counts_up_to(conn, queue, now, bound)?,
    };
    let paused = conn
        .prepare_cached(sql::QUEUE_PAUSED)?
        .query_row(params![queue], |row| row.get(0))?;
    let mut oldest_due: Option<Millis> = None;
    if counts.pending > 0 {
        let mut next_level = conn.prepare_cached(sql::NEXT_LEVEL)?;
        let mut due = conn.prepare_cached(sql::OLDEST_DUE)?;
        oldest_due = queries::earliest_by_level(&mut next_level, &mut due, queue, now)?;
    }
    let (last_minute, last_hour) = windows(&registry::buckets(conn, queue, now)?, now);
    Ok(QueueStatus {
        queue: queue.to_owned(),
        counts,
        paused,
        lag: lag_since(oldest_due, now),
        last_minute: Some(last_minute),
        last_hour: Some(last_hour),
        bound,
        consumers: None,
        rate_limit: crate::rate::limit_of(conn, queue)?,
    })
}

/// A queue's jobs by state, each state read no further than `bound + 1` jobs: a count up
/// to `bound` is exact, `bound + 1` means more. Leased jobs and dead letters are one
/// statement; waiting jobs are counted a priority level at a time, each level's due and
/// scheduled jobs two ranges of the ready index, until both counts reach the limit or the
/// levels run out (the walk `stats` makes again for the lag).
fn counts_up_to(
    conn: &Connection,
    queue: &str,
    now: Millis,
    bound: u64,
) -> rusqlite::Result<QueueCounts> {
    let limit = i64::try_from(bound.saturating_add(1)).unwrap_or(i64::MAX);
    let (leased, dead): (i64, i64) = conn
        .prepare_cached(sql::BOUNDED_COUNTS)?
        .query_row(params![queue, limit], |row| Ok((row.get(0)?, row.get(1)?)))?;
    let mut next_level = conn.prepare_cached(sql::NEXT_LEVEL)?;
    let mut per_level = conn.prepare_cached(sql::LEVEL_COUNTS)?;
    let (mut due, mut scheduled) = (0i64, 0i64);
    let mut above = i64::MAX;
    while due < limit || scheduled < limit {
        let Some(level) = level_below(&mut next_level, queue, above)? else {
            break;
        };
        above = level;
        // What is left of each limit, never below 0 (a negative LIMIT is none at all).
        let (d, s): (i64, i64) = per_level.query_row(
            params![queue, level, now, limit - due, limit - scheduled],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        due += d;
        scheduled += s;
    }
    Ok(QueueCounts {
        pending: due as u64,
        scheduled: scheduled as u64,
        leased: leased as u64,
        dead: dead as u64,
    })
}
