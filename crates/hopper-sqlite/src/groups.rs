//! Groups ([`hopper_core::group`]) as they run on the database thread: members counted as
//! they settle, and the completion job enqueued once a sealed group has none unsettled.
//!
//! A member keeps its group in its row (`group_name`, migration 0011) until it is counted;
//! the counts, the seal and the completion job live in `hopper_groups`, and the members
//! that died, in order, in `hopper_group_dead`. Counting a member, forgetting its group
//! and, for the last one, enqueueing the completion job all happen in the write
//! transaction of the call that ended the member: a settlement, the reaper taking back a
//! lease that expired on the last attempt, a burial of an unreadable row, a cancel or a
//! purge. SQLite runs one write transaction at a time on the file, whatever the number of
//! brokers and processes, so no two of them see the same group with one member to go, and
//! the completion job is enqueued once (guarded besides by `completion_id`, set when it
//! is). A member forgotten once counted is a plain job from then on: a dead one re-driven
//! runs again and counts for nothing.
//!
//! Jobs of no group pay next to nothing, as jobs without an ordering key do
//! ([`crate::ordering`]): a batch of them is inserted by the statements it always was,
//! and the statements that end a job match only jobs with neither a key nor a group.
//! When one changed nothing, [`crate::ordering::settle_ended`] runs the copy that matches
//! the others and returns their key and group. What a plain job does pay is one more
//! column tested by those statements.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use hopper_core::group::GroupOutcome;
use hopper_core::job::{RunAt, headers_for_record};
use hopper_core::{Enqueued, GroupStatus, JobId, Millis, NewJob, Result};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::store::Text;
use crate::{sql, unique};

/// How a member settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    Succeeded,
    Dead,
    Cancelled,
}

/// The group read from column `i` of a row, as bytes (see [`crate::ordering::Line`]);
/// `None` for a job of no group, or counted already.
pub(crate) fn group_of(row: &Row<'_>, i: usize) -> rusqlite::Result<Option<Vec<u8>>> {
    Ok(row.get_ref(i)?.as_bytes_or_null()?.map(<[u8]>::to_vec))
}

/// Enqueues a batch holding members of groups, in order, as [`unique::enqueue`] does, and
/// counts them. Refuses the whole batch, storing nothing, when a member's group is sealed.
pub(crate) fn enqueue(
    conn: &Connection,
    jobs: &[NewJob],
    now: Millis,
) -> rusqlite::Result<Result<Vec<Enqueued>>> {
    let mut members: BTreeMap<&str, i64> = BTreeMap::new();
    for group in jobs.iter().filter_map(|j| j.group.as_deref()) {
        *members.entry(group).or_default() += 1;
    }
    let mut sealed = conn.prepare_cached(sql::GROUP_SEALED)?;
    for group in members.keys() {
        let is: Option<bool> = sealed
            .query_row(params![group], |row| row.get(0))
            .optional()?;
        if is == Some(true) {
            return Ok(Err(hopper_core::group::closed_to_members(group)));
        }
    }
    let done = unique::enqueue(conn, jobs, now)?;
    // A member is never a duplicate: the core refuses one with a unique key.
    let mut add = conn.prepare_cached(sql::ADD_MEMBERS)?;
    for (group, n) in members {
        add.execute(params![group, n])?;
    }
    Ok(Ok(done))
}

/// Counts member `id` of `group` as settled `how`, and forgets its group if its row is
/// kept (dead or cancelled); enqueues the completion job when it was the last. Returns
/// whether it did.
pub(crate) fn member_ended(
    conn: &Connection,
    group: &[u8],
    id: i64,
    how: Ended,
    now: Millis,
) -> rusqlite::Result<bool> {
    if how != Ended::Succeeded {
        conn.prepare_cached(sql::FORGET_MEMBER)?
            .execute(params![id])?;
    }
    match how {
        Ended::Succeeded => count(conn, group, 1, &[], 0, now),
        Ended::Dead => count(conn, group, 0, &[id], 0, now),
        Ended::Cancelled => count(conn, group, 0, &[], 1, now),
    }
}

/// Counts the members of a purge, by group, as cancelled (their rows are gone); returns
/// whether that enqueued a completion job.
pub(crate) fn purged(
    conn: &Connection,
    groups: impl IntoIterator<Item = Vec<u8>>,
    now: Millis,
) -> rusqlite::Result<bool> {
    let mut tally: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
    for group in groups {
        *tally.entry(group).or_default() += 1;
    }
    let mut fired = false;
    for (group, n) in tally {
        fired |= count(conn, &group, 0, &[], n, now)?;
    }
    Ok(fired)
}

/// Counts settled members of `group` (`dead` by id, in the order they died), then
/// enqueues its completion job if that is due; whether it did.
fn count(
    conn: &Connection,
    group: &[u8],
    succeeded: i64,
    dead: &[i64],
    cancelled: i64,
    now: Millis,
) -> rusqlite::Result<bool> {
    let due: Option<bool> = conn
        .prepare_cached(sql::COUNT_MEMBERS)?
        .query_row(
            params![Text(group), succeeded, dead.len() as i64, cancelled],
            |row| row.get(0),
        )
        .optional()?;
    let Some(due) = due else {
        // A group without a row: none but another program could have named it.
        return Ok(false);
    };
    if !dead.is_empty() {
        let mut add = conn.prepare_cached(sql::ADD_GROUP_DEAD)?;
        for id in dead {
            add.execute(params![Text(group), id])?;
        }
    }
    if !due {
        return Ok(false);
    }
    fire(conn, group, now)
}

/// Enqueues `group`'s completion job with its outcome, as any job is enqueued, and records
/// its id.
fn fire(conn: &Connection, group: &[u8], now: Millis) -> rusqlite::Result<bool> {
    let name = String::from_utf8_lossy(group).into_owned();
    let job = conn
        .prepare_cached(sql::GROUP_COMPLETION)?
        .query_row(params![Text(group)], |row| completion_from_row(name, row))?;
    let done = unique::enqueue(conn, std::slice::from_ref(&job), now)?;
    let id = done.first().map_or(0, |e| e.id.0);
    let set = conn
        .prepare_cached(sql::SET_GROUP_COMPLETION)?
        .execute(params![Text(group), id])?;
    Ok(set == 1)
}

/// The completion job of `GROUP_COMPLETION`'s row, stamped with the group's outcome.
fn completion_from_row(group: String, row: &Row<'_>) -> rusqlite::Result<NewJob> {
    let outcome = GroupOutcome {
        group,
        members: row.get::<_, i64>(0)? as u64,
        succeeded: row.get::<_, i64>(1)? as u64,
        dead: row.get::<_, i64>(2)? as u64,
        cancelled: row.get::<_, i64>(3)? as u64,
    };
    let ms: i64 = row.get(8)?;
    let run_at = match row.get::<_, i64>(7)? {
        0 => RunAt::Now,
        1 => RunAt::After(Duration::from_millis(ms.max(0) as u64)),
        _ => RunAt::At(match u64::try_from(ms) {
            Ok(after) => SystemTime::UNIX_EPOCH + Duration::from_millis(after),
            Err(_) => SystemTime::UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs()),
        }),
    };
    let headers: Option<String> = row.get(10)?;
    let mut job = NewJob::new(row.get::<_, String>(4)?, row.get::<_, Vec<u8>>(5)?);
    job.priority = row.get(6)?;
    job.run_at = run_at;
    job.max_attempts = row.get(9)?;
    job.headers = headers_for_record(headers.as_deref());
    job.ordering_key = row.get(11)?;
    Ok(outcome.stamp(job))
}

/// Seals `group` with `completion` (already checked), enqueueing it at once when every
/// member has settled. Refuses a sealed group, by name, changing nothing. Returns the
/// group as sealed, and whether a completion job was enqueued.
pub(crate) fn seal(
    conn: &Connection,
    group: &str,
    completion: &NewJob,
    now: Millis,
) -> rusqlite::Result<Result<(GroupStatus, bool)>> {
    let sealed: Option<bool> = conn
        .prepare_cached(sql::GROUP_SEALED)?
        .query_row(params![group], |row| row.get(0))
        .optional()?;
    if sealed == Some(true) {
        return Ok(Err(hopper_core::group::sealed_already(group)));
    }
    let run = match completion.run_at {
        RunAt::Now => 0,
        RunAt::After(_) => 1,
        RunAt::At(_) => 2,
    };
    // `Now` is 0, `After` its delay and `At` its time, each from a "now" of 0.
    let run_ms = completion.run_at_millis(0);
    conn.prepare_cached(sql::SEAL_GROUP)?.execute(params![
        group,
        completion.queue,
        completion.payload,
        completion.priority,
        run,
        run_ms,
        completion.max_attempts,
        completion.headers_json(),
        completion.ordering_key,
    ])?;
    let fired = count(conn, group.as_bytes(), 0, &[], 0, now)?;
    let status = status(conn, group)?.expect("sealed above");
    Ok(Ok((status, fired)))
}

/// A group as counted; `None` for one never heard of.
pub(crate) fn status(conn: &Connection, group: &str) -> rusqlite::Result<Option<GroupStatus>> {
    let found = conn
        .prepare_cached(sql::GROUP_STATUS)?
        .query_row(params![group], |row| {
            Ok(GroupStatus {
                group: group.to_owned(),
                members: row.get::<_, i64>(0)? as u64,
                succeeded: row.get::<_, i64>(1)? as u64,
                dead: Vec::new(),
                cancelled: row.get::<_, i64>(2)? as u64,
                sealed: row.get(3)?,
                completion: row.get::<_, Option<i64>>(4)?.map(JobId),
            })
        })
        .optional()?;
    let Some(mut status) = found else {
        return Ok(None);
    };
    status.dead = conn
        .prepare_cached(sql::GROUP_DEAD_IDS)?
        .query_map(params![group], |row| row.get(0).map(JobId))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(Some(status))
}
