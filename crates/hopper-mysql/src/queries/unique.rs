//! Unique keys ([`hopper_core::UniqueScope`]): the enqueue of a batch in which some job has a
//! key, and the pruning of holds that lapsed. Both decide whether a hold stands by
//! [`UniqueScope::holds`], from the holder's row as it is now; nothing else the broker does
//! reads or writes `hopper_unique`.
//!
//! An enqueue with keys is one transaction, run again after a deadlock (see `broker`):
//! 1. the jobs are inserted as any others, each with its key in its row for its record
//!    (`enqueue_keyed.sql`), all but those whose key an earlier job of the batch carries
//!    ([`earlier_with_key`]); jobs of the batch with ordering keys entered their keys'
//!    lines before, and are stored blocked or not as that said (see `ordering`);
//! 2. one `INSERT … ON DUPLICATE KEY UPDATE` takes every key no job holds and locks every
//!    key one does, in (queue, key) order, so that racing producers queue up on a shared
//!    key rather than deadlock; a producer that finds a key taken waits there until the
//!    taker commits or rolls back;
//! 3. a `SELECT` reads each key's hold and its holder's state. It is a statement of its
//!    own, after the locks were granted: in READ COMMITTED its snapshot is taken then, so it
//!    sees the holder that the taker committed, which a snapshot taken while the statement
//!    that locks was still waiting would miss;
//! 4. keys whose hold lapsed go to the new jobs (a second upsert); new jobs whose key is
//!    still held are deleted again, and answer with the holder.
//!
//! All of it happens at one instant: the broker's clock, or the database's read once
//! first, so that a period ends exactly its length after its job's `created_at`.

use std::collections::HashMap;

use hopper_core::job::earlier_with_key;
use hopper_core::{Enqueued, JobId, JobState, Millis, NewJob, UniqueScope};
use sqlx::Row;
use sqlx::mysql::{MySqlConnection, MySqlRow};

use super::enqueue::{chunks, insert_keyed, new_rows};
use super::rows::state_from_code;
use crate::sql::{self, MAX_LIST, fixed, padded, padded_tuples};

/// How many holds one window of the pruning walk reads.
const PRUNE_WINDOW: i64 = 1000;

/// The most windows one prune reads: 10,000 holds a minute per broker.
const PRUNE_WINDOWS: usize = 10;

/// A key as an enqueue takes it: for the job `job`, for `scope` (its code), until `until`.
struct Take<'a> {
    queue: &'a str,
    key: &'a [u8],
    job: i64,
    scope: i16,
    until: Option<Millis>,
}

/// A hold as stored, with what became of its holder.
struct Hold {
    queue: String,
    key: Vec<u8>,
    job: i64,
    scope: i16,
    until: Option<Millis>,
    /// The holder's state and attempts charged; `None` when its row is gone.
    holder: Option<(JobState, u32)>,
}

impl Hold {
    /// Reads `queue, key, job_id, scope, until, state, attempt`.
    fn from_row(row: &MySqlRow) -> Result<Hold, sqlx::Error> {
        let state: Option<i8> = row.try_get(5)?;
        let attempt: Option<i32> = row.try_get(6)?;
        let holder = match (state, attempt) {
            (Some(state), Some(attempt)) => {
                Some((state_from_code(state)?, u32::try_from(attempt).unwrap_or(0)))
            }
            _ => None,
        };
        Ok(Hold {
            // `ascii_bin` reaches the client flagged binary (see `rows`).
            queue: row.try_get_unchecked(0)?,
            key: row.try_get(1)?,
            job: row.try_get(2)?,
            scope: row.try_get(3)?,
            until: row.try_get(4)?,
            holder,
        })
    }

    fn stands(&self, now: Millis) -> bool {
        UniqueScope::holds(self.scope, self.holder, self.until, now)
    }
}

/// Stores `jobs`, of which at least one has a unique key, inside the caller's transaction
/// (see the module docs), at `now` or, for `None`, at the database clock read once; each
/// stored blocked behind its ordering key as `blocked` says, in order. Says what became of
/// each job, in order.
pub(crate) async fn enqueue_unique(
    conn: &mut MySqlConnection,
    jobs: &[NewJob],
    blocked: &[bool],
    now: Option<Millis>,
    id_step: i64,
) -> Result<Vec<Enqueued>, sqlx::Error> {
    let now = clock(conn, now).await?;
    let earlier = earlier_with_key(jobs);
    let firsts: Vec<(&NewJob, bool)> = jobs
        .iter()
        .zip(&earlier)
        .zip(blocked)
        .filter_map(|((job, e), &blocked)| e.is_none().then_some((job, blocked)))
        .collect();
    let mut rows = new_rows(firsts.iter().map(|(job, _)| *job), Some(now));
    for (row, (_, blocked)) in rows.iter_mut().zip(&firsts) {
        row.blocked = *blocked;
    }
    let mut ids = Vec::with_capacity(rows.len());
    for chunk in chunks(&rows) {
        ids.extend(insert_keyed(conn, chunk, Some(now), id_step).await?);
    }

    let mut takes: Vec<Take<'_>> = firsts
        .iter()
        .zip(&ids)
        .filter_map(|((job, _), id)| {
            let unique = job.unique.as_ref()?;
            Some(Take {
                queue: &job.queue,
                key: unique.key.as_bytes(),
                job: id.0,
                scope: unique.scope.code(),
                until: unique.scope.until(now),
            })
        })
        .collect();
    takes.sort_unstable_by(|a, b| (a.queue, a.key).cmp(&(b.queue, b.key)));
    for chunk in takes.chunks(MAX_LIST) {
        upsert(conn, &sql::UNIQUE_TAKE, chunk).await?;
    }
    let found = holds(conn, &takes).await?;

    // The new jobs that lost to a standing hold, with its holder; the keys that lapsed.
    let mut lost: HashMap<i64, i64> = HashMap::new();
    let mut moved = Vec::new();
    for take in takes {
        let Some(hold) = found.get(&(take.queue.to_owned(), take.key.to_vec())) else {
            return Err(sqlx::Error::Protocol(format!(
                "the unique key {:?} of queue {} was taken but is not there",
                String::from_utf8_lossy(take.key),
                take.queue
            )));
        };
        if hold.job == take.job {
            continue;
        }
        if hold.stands(now) {
            lost.insert(take.job, hold.job);
        } else {
            moved.push(take);
        }
    }
    for chunk in moved.chunks(MAX_LIST) {
        upsert(conn, &sql::UNIQUE_MOVE, chunk).await?;
    }
    let unstored: Vec<i64> = lost.keys().copied().collect();
    for chunk in unstored.chunks(MAX_LIST) {
        let size = padded(chunk.len());
        let text = sql::with_ids(&sql::UNIQUE_UNSTORE, size);
        let mut query = sqlx::query(&text);
        for i in 0..size {
            query = query.bind(chunk.get(i).copied().unwrap_or(0));
        }
        query.execute(&mut *conn).await?;
    }

    let mut stored = ids.into_iter();
    let mut answers: Vec<Enqueued> = Vec::with_capacity(jobs.len());
    for e in earlier {
        let answer = match e {
            Some(first) => Enqueued::existing(answers[first].id),
            None => {
                let id = stored.next().expect("one id per job inserted");
                match lost.get(&id.0) {
                    Some(holder) => Enqueued::existing(JobId(*holder)),
                    None => Enqueued::stored(id),
                }
            }
        };
        answers.push(answer);
    }
    Ok(answers)
}

/// Runs `template` (`UNIQUE_TAKE` or `UNIQUE_MOVE`) for one chunk of keys, padded with
/// copies of the last, which change nothing: its own row already holds that key.
async fn upsert(
    conn: &mut MySqlConnection,
    template: &str,
    chunk: &[Take<'_>],
) -> Result<(), sqlx::Error> {
    let size = padded(chunk.len());
    let text = sql::unique_rows(template, size);
    let mut query = sqlx::query(&text);
    for i in 0..size {
        let t = chunk.get(i).unwrap_or(&chunk[chunk.len() - 1]);
        query = query
            .bind(t.queue)
            .bind(t.key)
            .bind(t.job)
            .bind(t.scope)
            .bind(t.until);
    }
    query.execute(&mut *conn).await?;
    Ok(())
}

/// The holds of the keys of `takes`, by queue and key.
async fn holds(
    conn: &mut MySqlConnection,
    takes: &[Take<'_>],
) -> Result<HashMap<(String, Vec<u8>), Hold>, sqlx::Error> {
    let mut found = HashMap::with_capacity(takes.len());
    for chunk in takes.chunks(MAX_LIST) {
        let size = padded_tuples(chunk.len());
        let text = sql::with_pairs(&sql::UNIQUE_HOLDERS, size);
        let mut query = sqlx::query(&text);
        for i in 0..size {
            let t = chunk.get(i).unwrap_or(&chunk[chunk.len() - 1]);
            query = query.bind(t.queue).bind(t.key);
        }
        for row in query.fetch_all(&mut *conn).await? {
            let hold = Hold::from_row(&row)?;
            found.insert((hold.queue.clone(), hold.key.clone()), hold);
        }
    }
    Ok(found)
}

/// Where the pruning walk stands: the last queue and key it read. It starts from, and
/// wraps around to, the empty cursor, before every key (queue names are never empty).
pub(crate) type PruneCursor = (String, Vec<u8>);

/// Deletes holds that lapsed, a window of [`PRUNE_WINDOW`] keys after `cursor` at a time,
/// at most [`PRUNE_WINDOWS`] windows; each statement commits on its own. Returns where the
/// walk stopped and how many holds it deleted. A hold is deleted only while the job that
/// held it when the window was read still does, so a key an enqueue took over
/// meanwhile is kept.
pub(crate) async fn prune_holds(
    conn: &mut MySqlConnection,
    mut cursor: PruneCursor,
    now: Option<Millis>,
) -> Result<(PruneCursor, u64), sqlx::Error> {
    let now = clock(conn, now).await?;
    let mut deleted = 0;
    for _ in 0..PRUNE_WINDOWS {
        let rows = sqlx::query(fixed(&sql::UNIQUE_WINDOW))
            .bind(cursor.0.as_str())
            .bind(cursor.0.as_str())
            .bind(cursor.1.as_slice())
            .bind(PRUNE_WINDOW)
            .fetch_all(&mut *conn)
            .await?;
        let window = rows
            .iter()
            .map(Hold::from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let lapsed: Vec<&Hold> = window.iter().filter(|h| !h.stands(now)).collect();
        for chunk in lapsed.chunks(MAX_LIST) {
            let size = padded_tuples(chunk.len());
            let text = sql::with_triples(&sql::UNIQUE_EXPIRE, size);
            let mut query = sqlx::query(&text);
            for i in 0..size {
                // Padded with copies of the last: deleted once.
                let h = chunk.get(i).unwrap_or(&chunk[chunk.len() - 1]);
                query = query
                    .bind(h.queue.as_str())
                    .bind(h.key.as_slice())
                    .bind(h.job);
            }
            deleted += query.execute(&mut *conn).await?.rows_affected();
        }
        match window.last() {
            Some(last) if window.len() as i64 == PRUNE_WINDOW => {
                cursor = (last.queue.clone(), last.key.clone());
            }
            // The end of the table: the next prune starts over.
            _ => return Ok((PruneCursor::default(), deleted)),
        }
    }
    Ok((cursor, deleted))
}

/// `now` when the broker keeps a clock of its own, else the database's clock, read once.
pub(super) async fn clock(
    conn: &mut MySqlConnection,
    now: Option<Millis>,
) -> Result<Millis, sqlx::Error> {
    match now {
        Some(now) => Ok(now),
        None => {
            sqlx::query_scalar(fixed(&sql::CLOCK))
                .fetch_one(&mut *conn)
                .await
        }
    }
}
