//! Groups ([`hopper_core::group`]): members counted as they settle, and the completion job
//! enqueued once a sealed group has none unsettled, each inside the caller's transaction.
//!
//! A member keeps its group in its row (`group_name`, migration 10) until it is counted;
//! the counts, the seal and the completion job live in `hopper_groups`, and the members that
//! died, in order, in `hopper_group_dead`. Counting a member, forgetting its group and, for
//! the last one, enqueueing the completion job all happen in the transaction that ended
//! the member: a settlement, the reaper taking back a lease that expired on the last
//! attempt, a burial of an unreadable row, a cancel or a purge. That transaction has locked
//! the member's row already (every one of them reads `group_name` under the row's lock),
//! then locks its groups' rows, in name order, with the `UPDATE` that counts; an enqueue of
//! members and a seal lock the same rows first. So the transactions that touch one group
//! take turns on its row, each reading the counts the previous one committed (READ
//! COMMITTED reads the newest committed row once the lock is granted), and exactly one
//! leaves a sealed group with nothing unsettled while `completion_id` is NULL: it enqueues
//! the completion job, by the same path as an enqueue of a job with keys, and sets
//! `completion_id` before it commits.
//!
//! Locks are taken in one order: jobs' rows, then groups' rows, then ordering keys' rows
//! (the completion job's key, and the keys of the ended jobs, are taken after the
//! groups). An enqueue of members takes groups, then keys, then inserts.
//!
//! Plain jobs pay next to nothing: a claim that took a member marks its lease as one that
//! took a job with an ordering key ([`super::ordering::lease_for`]) does, so settlements
//! under other leases keep their statements; only a cancel (`cancel.sql`) and a purge test
//! the column.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use hopper_core::group::GroupOutcome;
use hopper_core::job::{RunAt, headers_for_record};
use hopper_core::{Enqueued, GroupStatus, JobId, Millis, NewJob};
use sqlx::Row;
use sqlx::mysql::{MySqlConnection, MySqlRow};

use super::ordering;
use crate::conn::restart;
use crate::sql::{self, MAX_LIST, fixed, padded};

/// How a member settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    Succeeded,
    Dead,
    Cancelled,
}

/// A member that settled: its group, its id and how.
pub(crate) type Member = (Vec<u8>, i64, Ended);

/// The group in column `i` of a row, as bytes; `None` for a job of no group.
pub(crate) fn group_of(row: &MySqlRow, i: usize) -> Result<Option<Vec<u8>>, sqlx::Error> {
    row.try_get(i)
}

/// Takes in a batch holding members, inside its transaction and before they are inserted:
/// locks their groups' rows in name order (making the new ones) and refuses the whole
/// batch, rolling back what it did, when one is sealed. Returns each group's new members.
pub(crate) async fn enter(
    conn: &mut MySqlConnection,
    jobs: &[NewJob],
) -> Result<Result<BTreeMap<String, i64>, hopper_core::Error>, sqlx::Error> {
    let mut members: BTreeMap<String, i64> = BTreeMap::new();
    for group in jobs.iter().filter_map(|j| j.group.as_deref()) {
        *members.entry(group.to_owned()).or_default() += 1;
    }
    for group in members.keys() {
        sqlx::query(fixed(&sql::GROUP_LOCK))
            .bind(group.as_bytes())
            .execute(&mut *conn)
            .await?;
        let sealed: i8 = sqlx::query_scalar(fixed(&sql::GROUP_SEALED))
            .bind(group.as_bytes())
            .fetch_one(&mut *conn)
            .await?;
        if sealed != 0 {
            // Groups made above for this batch are not kept.
            restart(conn).await?;
            return Ok(Err(hopper_core::group::closed_to_members(group)));
        }
    }
    Ok(Ok(members))
}

/// Counts the members [`enter`] took in, once they are inserted.
pub(crate) async fn joined(
    conn: &mut MySqlConnection,
    members: BTreeMap<String, i64>,
) -> Result<(), sqlx::Error> {
    for (group, n) in members {
        sqlx::query(fixed(&sql::GROUP_ADD_MEMBERS))
            .bind(n)
            .bind(group.as_bytes())
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Counts members that settled, whose rows the caller locked and changed (`ended`, in the
/// order they ended), and forgets the groups of those whose rows are kept (dead or
/// cancelled); enqueues each group's completion job when it is due. Returns whether one
/// was enqueued.
pub(crate) async fn ended(
    conn: &mut MySqlConnection,
    ended: Vec<Member>,
    now: Option<Millis>,
    id_step: i64,
) -> Result<bool, sqlx::Error> {
    if ended.is_empty() {
        return Ok(false);
    }
    let kept: Vec<i64> = ended
        .iter()
        .filter(|(_, _, how)| *how != Ended::Succeeded)
        .map(|(_, id, _)| *id)
        .collect();
    for chunk in kept.chunks(MAX_LIST) {
        let size = padded(chunk.len());
        let text = sql::with_ids(&sql::GROUP_FORGET, size);
        let mut query = sqlx::query(&text);
        for i in 0..size {
            query = query.bind(chunk.get(i).copied().unwrap_or(0));
        }
        query.execute(&mut *conn).await?;
    }
    // Sorted by name: the order every transaction locks groups in.
    let mut tally: BTreeMap<Vec<u8>, (i64, Vec<i64>, i64)> = BTreeMap::new();
    for (group, id, how) in ended {
        let t = tally.entry(group).or_default();
        match how {
            Ended::Succeeded => t.0 += 1,
            Ended::Dead => t.1.push(id),
            Ended::Cancelled => t.2 += 1,
        }
    }
    let mut fired = false;
    for (group, (succeeded, dead, cancelled)) in tally {
        fired |= count(conn, &group, succeeded, &dead, cancelled, now, id_step).await?;
    }
    Ok(fired)
}

/// Counts settled members of `group` (locking its row), `dead` by id in the order they
/// died, then enqueues its completion job if that is due; whether it did.
async fn count(
    conn: &mut MySqlConnection,
    group: &[u8],
    succeeded: i64,
    dead: &[i64],
    cancelled: i64,
    now: Option<Millis>,
    id_step: i64,
) -> Result<bool, sqlx::Error> {
    sqlx::query(fixed(&sql::GROUP_COUNT))
        .bind(succeeded)
        .bind(dead.len() as i64)
        .bind(cancelled)
        .bind(group)
        .execute(&mut *conn)
        .await?;
    for id in dead {
        sqlx::query(fixed(&sql::GROUP_ADD_DEAD))
            .bind(group)
            .bind(id)
            .execute(&mut *conn)
            .await?;
    }
    fire_if_due(conn, group, now, id_step).await
}

/// Enqueues `group`'s completion job, whose row the caller locked, if the group is sealed
/// with nothing unsettled and has none yet; whether it did.
async fn fire_if_due(
    conn: &mut MySqlConnection,
    group: &[u8],
    now: Option<Millis>,
    id_step: i64,
) -> Result<bool, sqlx::Error> {
    let due: Option<i64> = sqlx::query_scalar(fixed(&sql::GROUP_DUE))
        .bind(group)
        .fetch_optional(&mut *conn)
        .await?;
    if due != Some(1) {
        // Not due, or a group without a row: none but another program could have named it.
        return Ok(false);
    }
    let row = sqlx::query(fixed(&sql::GROUP_COMPLETION))
        .bind(group)
        .fetch_one(&mut *conn)
        .await?;
    let job = completion_from_row(String::from_utf8_lossy(group).into_owned(), &row)?;
    let done: Vec<Enqueued> =
        ordering::enqueue_keyed(conn, std::slice::from_ref(&job), now, id_step).await?;
    let id = done.first().map_or(0, |e| e.id.0);
    let set = sqlx::query(fixed(&sql::GROUP_FIRED))
        .bind(id)
        .bind(group)
        .execute(&mut *conn)
        .await?;
    Ok(set.rows_affected() == 1)
}

/// The completion job of `group_completion.sql`'s row, stamped with the group's outcome.
fn completion_from_row(group: String, row: &MySqlRow) -> Result<NewJob, sqlx::Error> {
    let outcome = GroupOutcome {
        group,
        members: row.try_get::<i64, _>(0)?.max(0) as u64,
        succeeded: row.try_get::<i64, _>(1)?.max(0) as u64,
        dead: row.try_get::<i64, _>(2)?.max(0) as u64,
        cancelled: row.try_get::<i64, _>(3)?.max(0) as u64,
    };
    let ms: i64 = row.try_get(8)?;
    let run_at = match row.try_get::<i8, _>(7)? {
        0 => RunAt::Now,
        1 => RunAt::After(Duration::from_millis(ms.max(0) as u64)),
        _ => RunAt::At(match u64::try_from(ms) {
            Ok(after) => SystemTime::UNIX_EPOCH + Duration::from_millis(after),
            Err(_) => SystemTime::UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs()),
        }),
    };
    let headers: Option<String> = row.try_get(10)?;
    let key: Option<Vec<u8>> = row.try_get(11)?;
    // `ascii_bin` reaches the client flagged binary (see `rows`).
    let queue: String = row.try_get_unchecked(4)?;
    let mut job = NewJob::new(queue, row.try_get::<Vec<u8>, _>(5)?);
    job.priority = row.try_get(6)?;
    job.run_at = run_at;
    job.max_attempts = row.try_get::<i32, _>(9)?.max(1) as u32;
    job.headers = headers_for_record(headers.as_deref());
    job.ordering_key = key.map(|k| String::from_utf8_lossy(&k).into_owned());
    Ok(outcome.stamp(job))
}

/// Seals `group` with `completion` (already checked), enqueueing it at once when every
/// member has settled. Refuses a sealed group, by name, changing nothing. Returns the
/// group as sealed, and whether a completion job was enqueued.
pub(crate) async fn seal(
    conn: &mut MySqlConnection,
    group: &str,
    completion: &NewJob,
    now: Option<Millis>,
    id_step: i64,
) -> Result<Result<(GroupStatus, bool), hopper_core::Error>, sqlx::Error> {
    let name = group.as_bytes();
    sqlx::query(fixed(&sql::GROUP_LOCK))
        .bind(name)
        .execute(&mut *conn)
        .await?;
    let sealed: i8 = sqlx::query_scalar(fixed(&sql::GROUP_SEALED))
        .bind(name)
        .fetch_one(&mut *conn)
        .await?;
    if sealed != 0 {
        return Ok(Err(hopper_core::group::sealed_already(group)));
    }
    let run: i8 = match completion.run_at {
        RunAt::Now => 0,
        RunAt::After(_) => 1,
        RunAt::At(_) => 2,
    };
    // `Now` is 0, `After` its delay and `At` its time, each from a "now" of 0.
    let run_ms = completion.run_at_millis(0);
    sqlx::query(fixed(&sql::GROUP_SEAL))
        .bind(completion.queue.as_str())
        .bind(completion.payload.as_slice())
        .bind(completion.priority)
        .bind(run)
        .bind(run_ms)
        .bind(i32::try_from(completion.max_attempts).unwrap_or(i32::MAX))
        .bind(completion.headers_json())
        .bind(completion.ordering_key.as_deref().map(str::as_bytes))
        .bind(name)
        .execute(&mut *conn)
        .await?;
    let fired = fire_if_due(conn, name, now, id_step).await?;
    let status = status(conn, group).await?;
    let status = status.ok_or_else(|| sqlx::Error::Protocol("a sealed group has no row".into()))?;
    Ok(Ok((status, fired)))
}

/// A group as counted; `None` for one never heard of.
pub(crate) async fn status(
    conn: &mut MySqlConnection,
    group: &str,
) -> Result<Option<GroupStatus>, sqlx::Error> {
    let name = group.as_bytes();
    let Some(row) = sqlx::query(fixed(&sql::GROUP_STATUS))
        .bind(name)
        .fetch_optional(&mut *conn)
        .await?
    else {
        return Ok(None);
    };
    let n = |v: i64| v.max(0) as u64;
    let dead: Vec<i64> = sqlx::query_scalar(fixed(&sql::GROUP_DEAD_IDS))
        .bind(name)
        .fetch_all(&mut *conn)
        .await?;
    Ok(Some(GroupStatus {
        group: group.to_owned(),
        members: n(row.try_get(0)?),
        succeeded: n(row.try_get(1)?),
        dead: dead.into_iter().map(JobId).collect(),
        cancelled: n(row.try_get(2)?),
        sealed: row.try_get::<i8, _>(3)? != 0,
        completion: row.try_get::<Option<i64>, _>(4)?.map(JobId),
    }))
}

/// Removes every job of `queue`, inside the caller's transaction; its members not counted
/// yet are locked first, removed by id and counted as cancelled. Returns how many jobs went
/// and whether a completion job was enqueued.
pub(crate) async fn purge(
    conn: &mut MySqlConnection,
    queue: &str,
    now: Option<Millis>,
    id_step: i64,
) -> Result<(u64, bool), sqlx::Error> {
    let rows = sqlx::query(fixed(&sql::PURGE_MEMBERS))
        .bind(queue)
        .fetch_all(&mut *conn)
        .await?;
    let mut members = Vec::with_capacity(rows.len());
    for row in &rows {
        if let Some(group) = group_of(row, 1)? {
            members.push((group, row.try_get::<i64, _>(0)?, Ended::Cancelled));
        }
    }
    let mut gone = sqlx::query(fixed(&sql::PURGE))
        .bind(queue)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    let ids: Vec<i64> = members.iter().map(|(_, id, _)| *id).collect();
    for chunk in ids.chunks(MAX_LIST) {
        let size = padded(chunk.len());
        let text = sql::with_ids(&sql::PURGE_IDS, size);
        let mut query = sqlx::query(&text);
        for i in 0..size {
            query = query.bind(chunk.get(i).copied().unwrap_or(0));
        }
        gone += query.execute(&mut *conn).await?.rows_affected();
    }
    // Their rows are gone: nothing to forget, so they are counted as acknowledged rows
    // are, with the cancelled count.
    let mut tally: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
    for (group, _, _) in members {
        *tally.entry(group).or_default() += 1;
    }
    let mut fired = false;
    for (group, n) in tally {
        fired |= count(conn, &group, 0, &[], n, now, id_step).await?;
    }
    Ok((gone, fired))
}
