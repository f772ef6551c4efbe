//! Unique keys ([`hopper_core::UniqueScope`]) as they run on the database thread: a batch
//! with keys enqueued (ordering keys too, through [`crate::ordering`]), and the sweep that
//! deletes keys whose hold no longer stands.
//!
//! `hopper_unique` (migration 0006) keeps each key's holder. Whether a hold still stands is
//! decided only when the next job with the key arrives, from the holder's row, so claims,
//! settlements and the reaper never read or write the table, and a batch without keys
//! never reaches this module ([`crate::queries::enqueue`] stores it).
//!
//! No lock beyond SQLite's own is needed: every enqueue runs in a write transaction
//! (`BEGIN IMMEDIATE`), one at a time on this file whatever the number of threads and
//! processes, so the look-up of a key's holder and the taking of the key cannot be
//! interleaved with another producer's.

use hopper_core::job::{BLOCKED, earlier_with_key};
use hopper_core::{Enqueued, JobId, Millis, NewJob};
use rusqlite::{Connection, OptionalExtension, params};

use crate::{sql, store};

/// Keys the sweep examines per worker report: a bounded step, however many keys are
/// held, of about a millisecond on the database thread (one job looked up per key).
const SWEEP_STEP: i64 = 1000;

/// Where the sweep of stale keys stands: the last (queue, key) it examined, or `None` to
/// start from the first.
pub(crate) type SweepCursor = Option<(String, String)>;

/// Enqueues a batch in which some jobs have a unique, an ordering or a rate key or a group
/// (see [`crate::groups::enqueue`], which counts members), in order. A job whose unique key
/// an earlier job of the batch has is not stored and answers as that one did; one whose key
/// is held by a job whose hold still stands is not stored and answers with the holder;
/// every other job is inserted as [`queries::enqueue`] does and, with a key, takes it, over
/// a stale holder if there was one. A stored job with a key keeps it in its row too
/// (`INSERT_KEYED_JOB`), for its record, after the hold ends. A job with an ordering key is
/// inserted by `INSERT_ORDERED_JOB`, with its unique key if it has one,
/// blocked behind the pending and leased jobs of its key, those stored earlier in the batch
/// included: a duplicate, never stored, holds no place on its key; a member of a group
/// (never with a key of either kind) by `INSERT_MEMBER_JOB`, with its group. A job with a
/// rate key is given it by `SET_RATE_KEY` after its insert, whichever statement inserted
/// it.
///
/// The holder is looked up before the job is inserted, rather than the job inserted and
/// then deleted again on finding the key held: the writer is alone in the file, so the
/// answer cannot change in between, and a duplicate costs one read and no id.
pub(crate) fn enqueue(
    conn: &Connection,
    jobs: &[NewJob],
    now: Millis,
) -> rusqlite::Result<Vec<Enqueued>> {
    let mut insert = conn.prepare_cached(sql::INSERT_JOB)?;
    let mut insert_keyed = conn.prepare_cached(sql::INSERT_KEYED_JOB)?;
    let mut holder = conn.prepare_cached(sql::UNIQUE_HOLDER)?;
    let mut take = conn.prepare_cached(sql::TAKE_UNIQUE_KEY)?;
    let mut insert_ordered = conn.prepare_cached(sql::INSERT_ORDERED_JOB)?;
    let mut insert_member = None;
    let mut set_rate_key = None;
    let mut tag = |job: &NewJob, id: JobId| -> rusqlite::Result<()> {
        if let Some(key) = &job.rate_key {
            let stmt = match &mut set_rate_key {
                Some(stmt) => stmt,
                None => set_rate_key.insert(conn.prepare_cached(sql::SET_RATE_KEY)?),
            };
            stmt.execute(params![id.0, key])?;
        }
        Ok(())
    };
    let mut done: Vec<Enqueued> = Vec::with_capacity(jobs.len());
    for (job, earlier) in jobs.iter().zip(earlier_with_key(jobs)) {
        if let Some(first) = earlier {
            done.push(Enqueued::existing(done[first].id));
            continue;
        }
        let Some(unique) = &job.unique else {
            let id = match (&job.ordering_key, &job.group) {
                (Some(key), _) => {
                    let no_unique: Option<&str> = None;
                    store::insert_job(&mut insert_ordered, job, now, &[key, &BLOCKED, &no_unique])?
                }
                (None, Some(group)) => {
                    let insert = match &mut insert_member {
                        Some(stmt) => stmt,
                        None => insert_member.insert(conn.prepare_cached(sql::INSERT_MEMBER_JOB)?),
                    };
                    store::insert_job(insert, job, now, &[group])?
                }
                (None, None) => store::insert_job(&mut insert, job, now, &[])?,
            };
            tag(job, id)?;
            done.push(Enqueued::stored(id));
            continue;
        };
        let held: Option<i64> = holder
            .query_row(params![job.queue, unique.key, now], |row| row.get(0))
            .optional()?;
        if let Some(holder) = held {
            done.push(Enqueued::existing(JobId(holder)));
            continue;
        }
        let id = match &job.ordering_key {
            Some(key) => {
                store::insert_job(&mut insert_ordered, job, now, &[key, &BLOCKED, &unique.key])?
            }
            None => store::insert_job(&mut insert_keyed, job, now, &[&unique.key])?,
        };
        take.execute(params![
            job.queue,
            unique.key,
            id.0,
            unique.scope.code(),
            unique.scope.until(now)
        ])?;
        tag(job, id)?;
        done.push(Enqueued::stored(id));
    }
    Ok(done)
}

/// One step of the sweep: examines the next [`SWEEP_STEP`] keys after `after` and deletes
/// those whose hold no longer stands at `now`, so that keys used once do not stay forever.
/// Returns where the next step starts: past the last key examined, or back at the first
/// once the end was reached.
///
/// A stale key left in place costs nothing but its row: the next job with the key takes it
/// over. So the sweep runs with the worker reports (every few seconds per worker), where
/// the registry's tables are pruned too, and never on the path of a claim or an enqueue.
pub(crate) fn sweep(
    conn: &Connection,
    after: SweepCursor,
    now: Millis,
) -> rusqlite::Result<SweepCursor> {
    let (queue, key) = after.unwrap_or_default();
    // Held: (queue, key, job_id, whether the hold stands).
    let keys = conn
        .prepare_cached(sql::UNIQUE_CHUNK)?
        .query_map(params![queue, key, SWEEP_STEP, now], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, i64>(2)?,
                row.get::<_, bool>(3)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut drop = conn.prepare_cached(sql::DROP_UNIQUE_KEY)?;
    for (queue, key, job, holds) in &keys {
        if !holds {
            drop.execute(params![queue, key, job])?;
        }
    }
    if (keys.len() as i64) < SWEEP_STEP {
        return Ok(None);
    }
    Ok(keys
        .into_iter()
        .last()
        .map(|(queue, key, _, _)| (queue, key)))
}

#[cfg(test)]
mod tests {
    use rusqlite::{Connection, params};

    use super::{SWEEP_STEP, sweep};
    use crate::sql::MIGRATIONS;

    /// Each step examines [`SWEEP_STEP`] keys, deletes the stale ones among them and starts
    /// the next where it stopped; the step that reaches the end starts the next walk over.
    #[test]
    fn the_sweep_walks_the_keys_a_step_at_a_time() {
        let conn = Connection::open_in_memory().unwrap();
        for migration in MIGRATIONS {
            conn.execute_batch(migration).unwrap();
        }
        // One pending job holds every tenth key; the other keys' holders are gone.
        let keys = SWEEP_STEP * 5 / 2;
        conn.execute(
            "INSERT INTO hopper_jobs (id, queue, run_at, max_attempts, payload, created_at)
             VALUES (1, 'q', 0, 1, x'', 0)",
            [],
        )
        .unwrap();
        let mut hold = conn
            .prepare("INSERT INTO hopper_unique VALUES ('q', ?1, ?2, 1, NULL)")
            .unwrap();
        for n in 0..keys {
            let holder = if n % 10 == 0 { 1 } else { 2 + n };
            hold.execute(params![format!("k{n:05}"), holder]).unwrap();
        }
        let left = || -> i64 {
            conn.query_row("SELECT count(*) FROM hopper_unique", [], |row| row.get(0))
                .unwrap()
        };
        let live = keys / 10;

        let first = sweep(&conn, None, 0).unwrap();
        let expected = format!("k{:05}", SWEEP_STEP - 1);
        assert_eq!(first, Some(("q".to_owned(), expected)));
        assert_eq!(left(), keys - SWEEP_STEP * 9 / 10);
        let second = sweep(&conn, first, 0).unwrap();
        assert_eq!(left(), keys - SWEEP_STEP * 18 / 10);
        let last = sweep(&conn, second, 0).unwrap();
        assert_eq!(last, None, "the end reached: the next walk starts over");
        assert_eq!(left(), live);
        assert_eq!(sweep(&conn, last, 0).unwrap(), None);
        assert_eq!(left(), live, "live holds stay");
    }
}
