//! Ordering keys ([`hopper_core::job::ordering`]): of the unfinished (pending or leased)
//! jobs of a queue's key, only one can be claimed; the others wait *blocked*, pending with
//! their `run_at` moved [`BLOCKED`] ahead, past every claim. Claims, and everything done
//! to plain jobs, run as before.
//!
//! A key has a row in `hopper_ordering` and, for its unfinished jobs, a range of
//! `hopper_jobs_ordering` in id order; the first job of that range is its *head*. Every
//! transaction that adds a job to a key or lets one run locks the key's row (keys in key
//! order) before it reads the key's jobs, and holds it to its end:
//! - an enqueue ([`enter`]) and a re-drive ([`redrive`]) lock their keys' rows, then read
//!   each key's head; a job is stored blocked when its key has a head, or an earlier job of
//!   the batch has its key;
//! - a transaction in which a job that could run ends (acknowledged, dead-lettered or
//!   cancelled, by a settlement, the reaper, a cancel or a claim that buries it) changes
//!   that job's row, then locks its key's row, reads the job the key lets run next and
//!   unblocks it if it waits ([`unblock`]). A waiting job that ends (a cancel) leaves the
//!   key's runnable job in place: it locks its own row only;
//! - a settlement that puts a job back for its retry and steps it aside
//!   (`Outcome::Retry::step_aside`) changes the job's row as any retry does, then locks
//!   its key's row; when the key has another unfinished job, it moves the job behind the
//!   key, blocked as a job enqueued behind it is, and lets the key's next job run as when
//!   a job ends ([`settled`]). Alone on its key, the job keeps it, as a plain retry does.
//!
//! The job a key lets run next (`ordering_next.sql`) is its first unfinished job by id,
//! passing over the jobs that stepped aside and whose own time has not come; when every
//! job of the key is such, the one whose time comes first. So a job that stepped aside
//! runs again before the jobs still waiting once its time has come and the job running
//! then has ended, and never while another job of its key runs. A stepped-aside job is told
//! by its row alone: it waits and was claimed before (`attempt` above 0), while a job
//! enqueued behind its key, or re-driven, has attempt 0. Without jobs stepped aside, the
//! next job is the head, read in one dive as before.
//!
//! So a key's unfinished jobs all wait but one. Each read of a head or of a next job is a
//! statement of its own made after the key's row was granted: in READ COMMITTED it sees
//! everything the transactions that held the row before committed. An enqueue that finds
//! the runnable job still there while a settlement is ending it (or stepping it aside)
//! stores its job blocked, and the settlement, which takes the key's row after it, then
//! finds that job and unblocks it (or steps aside for it); one that comes after the
//! settlement finds the job gone, or behind its key, and whatever it unblocked. Enqueues of
//! one key take turns on its row and insert after taking it, so ids within a key follow
//! commit order. Locks are taken in one order, a job's row before its key's: an enqueue
//! holds keys and waits for no job, so it and a settlement never deadlock on each other.
//!
//! The one race outside the key's row is a cancel of a waiting job, which locks only that
//! job: an unblock that picked it waits for the cancel, finds it gone, and reads the next
//! job again; a job stepping aside behind it alone finds itself the next job, and runs.
//! Deadlocks remain possible in rare interleavings (a re-drive and a settlement that named
//! a dead letter, the gap locks of new key rows): each transaction runs again (see
//! `broker`).
//!
//! The lowest bit of a lease id says whether the claim that minted it took a job with an
//! ordering key or a member of a group ([`lease_for`], [`super::groups`]). A settlement applies only to a job held under the lease it
//! names, and a job's key never changes, so a settlement whose lease lacks the bit cannot
//! end a job with a key: it keeps the plain statements, with no lookup. One with the bit
//! reads its jobs' keys with the locks it takes anyway.

use std::collections::HashSet;

use hopper_core::job::{BLOCKED, earlier_with_key, is_blocked};
use hopper_core::{Enqueued, LeaseId, Millis, NewJob};
use sqlx::Row;
use sqlx::mysql::{MySqlConnection, MySqlRow};

use super::enqueue::{chunks, insert_keyed, new_rows};
use super::rows::PENDING;
use super::unique::{self, PruneCursor};

use crate::sql::{self, MAX_LIST, fixed, padded, padded_tuples};

/// An ordering key of one queue: the queue's name and the key's bytes.
pub(crate) type Line = (String, Vec<u8>);

/// How many keys one window of the pruning walk reads.
const PRUNE_WINDOW: i64 = 1000;

/// The most windows one prune reads: 10,000 keys a minute per broker.
const PRUNE_WINDOWS: usize = 10;

/// The lease a claim of jobs under `base` hands out: its lowest bit set when a job it took
/// has an ordering key or a group, clear otherwise, and never 0 (no job's lease).
pub(crate) fn lease_for(base: LeaseId, ordered: bool) -> LeaseId {
    LeaseId((base.0 & !1).max(2) | i64::from(ordered))
}

/// Whether a claim that took a job with an ordering key or a group minted `lease`.
pub(crate) fn is_ordered(lease: LeaseId) -> bool {
    lease.0 & 1 == 1
}

/// The key of a new job, if it has one.
fn line_of(job: &NewJob) -> Option<Line> {
    let key = job.ordering_key.as_ref()?;
    Some((job.queue.clone(), key.as_bytes().to_vec()))
}

/// Sorts lines and drops repeats: the order every transaction locks them in.
fn sorted(mut lines: Vec<Line>) -> Vec<Line> {
    lines.sort_unstable();
    lines.dedup();
    lines
}

/// A key's head as `ordering_heads.sql` reads it, or the job it lets run next as
/// `ordering_next.sql` does (the same columns).
struct Head {
    id: i64,
    line: Line,
    state: i8,
    run_at: Millis,
}

impl Head {
    fn from_row(row: &MySqlRow) -> Result<Head, sqlx::Error> {
        Ok(Head {
            id: row.try_get(0)?,
            // `ascii_bin` reaches the client flagged binary (see `rows`).
            line: (row.try_get_unchecked(1)?, row.try_get(2)?),
            state: row.try_get(3)?,
            run_at: row.try_get(4)?,
        })
    }

    fn waits(&self) -> bool {
        self.state == PENDING && is_blocked(self.run_at)
    }
}

/// A statement with its values, as sqlx builds it.
type Query<'q> = sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>;

/// `query` with `size` (queue, key) pairs bound from `chunk`, padded with copies of its
/// last line: a lock's second insert of it finds the first and changes nothing, and a list
/// names it once all the same.
fn bound<'q>(mut query: Query<'q>, chunk: &'q [Line], size: usize) -> Query<'q> {
    for i in 0..size {
        let (queue, key) = chunk.get(i).unwrap_or(&chunk[chunk.len() - 1]);
        query = query.bind(queue.as_str()).bind(key.as_slice());
    }
    query
}

/// Locks the rows of `lines` (sorted), making the missing ones.
async fn lock(conn: &mut MySqlConnection, lines: &[Line]) -> Result<(), sqlx::Error> {
    for chunk in lines.chunks(MAX_LIST) {
        let size = padded(chunk.len());
        let text = sql::with_pairs(&sql::ORDERING_LOCK, size);
        bound(sqlx::query(&text), chunk, size)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// The heads of `lines`, whose rows the caller locked.
async fn heads(conn: &mut MySqlConnection, lines: &[Line]) -> Result<Vec<Head>, sqlx::Error> {
    let mut found = Vec::new();
    for chunk in lines.chunks(MAX_LIST) {
        let size = padded_tuples(chunk.len());
        let text = sql::with_pairs(&sql::ORDERING_HEADS, size);
        for row in bound(sqlx::query(&text), chunk, size)
            .fetch_all(&mut *conn)
            .await?
        {
            found.push(Head::from_row(&row)?);
        }
    }
    Ok(found)
}

/// The job each of `lines`, whose rows the caller locked, lets run next at `now`.
async fn next_jobs(
    conn: &mut MySqlConnection,
    lines: &[Line],
    now: Option<Millis>,
) -> Result<Vec<Head>, sqlx::Error> {
    let mut found = Vec::new();
    for chunk in lines.chunks(MAX_LIST) {
        let size = padded_tuples(chunk.len());
        let text = sql::with_pairs(&sql::ORDERING_NEXT, size);
        for row in bound(sqlx::query(&text).bind(now), chunk, size)
            .fetch_all(&mut *conn)
            .await?
        {
            found.push(Head::from_row(&row)?);
        }
    }
    Ok(found)
}

/// Takes in the jobs of an enqueue, inside its transaction and before they are inserted:
/// locks the rows of their keys and reads each key's head. Says, for each job in order,
/// whether it is stored blocked: its key has an unfinished job, or an earlier job of the
/// batch has its key. A job whose unique key an earlier job of the batch has is never
/// stored, so it takes no place on its key.
pub(crate) async fn enter(
    conn: &mut MySqlConnection,
    jobs: &[NewJob],
) -> Result<Vec<bool>, sqlx::Error> {
    let lines = sorted(jobs.iter().filter_map(line_of).collect());
    if lines.is_empty() {
        return Ok(vec![false; jobs.len()]);
    }
    lock(conn, &lines).await?;
    let mut taken: HashSet<Line> = heads(conn, &lines)
        .await?
        .into_iter()
        .map(|h| h.line)
        .collect();
    let twice = match jobs.iter().any(|job| job.unique.is_some()) {
        true => earlier_with_key(jobs),
        false => Vec::new(),
    };
    Ok(jobs
        .iter()
        .enumerate()
        .map(|(i, job)| match twice.get(i) {
            Some(Some(_)) => false,
            _ => line_of(job).is_some_and(|line| !taken.insert(line)),
        })
        .collect())
}

/// After a job of each of `lines` that could run ended, in the same transaction: locks the
/// keys' rows and lets each key's next job run if it waits, as of `now` (the caller's
/// clock, or the database's for `None`). Says whether one was unblocked (to wake workers).
pub(crate) async fn unblock(
    conn: &mut MySqlConnection,
    lines: Vec<Line>,
    now: Option<Millis>,
) -> Result<bool, sqlx::Error> {
    let lines = sorted(lines);
    if lines.is_empty() {
        return Ok(false);
    }
    lock(conn, &lines).await?;
    let_run(conn, lines, now).await
}

/// After a settlement, in its transaction: the keys of the jobs that ended (`ended`) move
/// on, as [`unblock`] has them, and the jobs of `aside` (id and key), just put back for a
/// retry that steps aside, step aside. All the keys' rows are locked first, in key order,
/// after the jobs' rows the settlement holds. A job of `aside` whose key has another
/// unfinished job is moved behind its key, and its key then lets its next job run, which
/// may be the job itself when nothing else can go first; one alone on its key keeps it.
/// Says whether a job was unblocked.
pub(crate) async fn settled(
    conn: &mut MySqlConnection,
    mut ended: Vec<Line>,
    aside: Vec<(i64, Line)>,
    now: Option<Millis>,
) -> Result<bool, sqlx::Error> {
    if aside.is_empty() {
        return unblock(conn, ended, now).await;
    }
    let all = ended.iter().chain(aside.iter().map(|(_, line)| line));
    lock(conn, &sorted(all.cloned().collect())).await?;
    let moved = step_aside(conn, &aside).await?;
    ended.extend(
        aside
            .into_iter()
            .filter(|(id, _)| moved.contains(id))
            .map(|(_, line)| line),
    );
    let_run(conn, sorted(ended), now).await
}

/// Moves the jobs of `aside` whose keys (locked) have another unfinished job behind their
/// keys, and returns their ids. Read first (`ordering_aside.sql`), then moved by id: MySQL
/// refuses an `UPDATE` that reads its own table in a subquery.
async fn step_aside(
    conn: &mut MySqlConnection,
    aside: &[(i64, Line)],
) -> Result<HashSet<i64>, sqlx::Error> {
    let mut moved = HashSet::new();
    for chunk in aside.chunks(MAX_LIST) {
        let size = padded(chunk.len());
        let text = sql::with_ids(&sql::ORDERING_ASIDE, size);
        let mut query = sqlx::query_scalar::<_, i64>(&text);
        for i in 0..size {
            query = query.bind(chunk.get(i).map_or(0, |(id, _)| *id));
        }
        let found = query.fetch_all(&mut *conn).await?;
        if found.is_empty() {
            continue;
        }
        let size = padded(found.len());
        let text = sql::with_ids(&sql::ORDERING_BLOCK, size);
        let mut query = sqlx::query(&text);
        for i in 0..size {
            query = query.bind(found.get(i).copied().unwrap_or(0));
        }
        query.execute(&mut *conn).await?;
        moved.extend(found);
    }
    Ok(moved)
}

/// Lets each of `lines` (sorted, their rows locked) run its next job if it waits.
async fn let_run(
    conn: &mut MySqlConnection,
    mut lines: Vec<Line>,
    now: Option<Millis>,
) -> Result<bool, sqlx::Error> {
    let mut unblocked = false;
    // Until every next job read was unblocked or runs: one cancelled since it was read (its
    // cancel holds its row, not the key's) is gone when read again.
    while !lines.is_empty() {
        let waiting: Vec<Head> = next_jobs(conn, &lines, now)
            .await?
            .into_iter()
            .filter(Head::waits)
            .collect();
        let mut touched = 0;
        for chunk in waiting.chunks(MAX_LIST) {
            let size = padded(chunk.len());
            let text = sql::with_ids(&sql::ORDERING_UNBLOCK, size);
            let mut query = sqlx::query(&text);
            for i in 0..size {
                query = query.bind(chunk.get(i).map_or(0, |h| h.id));
            }
            touched += query.execute(&mut *conn).await?.rows_affected();
        }
        unblocked |= touched > 0;
        if touched == waiting.len() as u64 {
            break;
        }
        lines = sorted(waiting.into_iter().map(|h| h.line).collect());
    }
    Ok(unblocked)
}

/// Puts the dead letters `dead` (id and key), all with ordering keys, back in their
/// queues, due at `now`, inside the caller's transaction: under their keys' locks, as an
/// enqueue would store them, except that a job keeps its id. So one whose key has an
/// unfinished job waits, and being older than the key's other jobs, runs right after the
/// one running. Of several of one key, the oldest goes first. Returns how many went back.
pub(crate) async fn redrive(
    conn: &mut MySqlConnection,
    mut dead: Vec<(i64, Line)>,
    now: Option<Millis>,
) -> Result<u64, sqlx::Error> {
    let lines = sorted(dead.iter().map(|(_, line)| line.clone()).collect());
    if lines.is_empty() {
        return Ok(0);
    }
    lock(conn, &lines).await?;
    let mut taken: HashSet<Line> = heads(conn, &lines)
        .await?
        .into_iter()
        .map(|h| h.line)
        .collect();
    dead.sort_unstable_by_key(|(id, _)| *id);
    let (mut first, mut waiting) = (Vec::new(), Vec::new());
    for (id, line) in dead {
        match taken.insert(line) {
            true => first.push(id),
            false => waiting.push(id),
        }
    }
    let mut done = 0;
    for (ids, shift) in [(first, 0), (waiting, BLOCKED)] {
        for chunk in ids.chunks(MAX_LIST) {
            let size = padded(chunk.len());
            let text = sql::with_ids(&sql::ORDERING_REDRIVE, size);
            let mut query = sqlx::query(&text).bind(now).bind(shift);
            for i in 0..size {
                query = query.bind(chunk.get(i).copied().unwrap_or(0));
            }
            done += query.execute(&mut *conn).await?.rows_affected();
        }
    }
    Ok(done)
}

/// Deletes the rows of keys without unfinished jobs, a window of [`PRUNE_WINDOW`] keys
/// after `cursor` at a time, at most [`PRUNE_WINDOWS`] windows; each statement commits on
/// its own. Returns where the walk stopped and how many rows it deleted. A row is deleted
/// only while its key still has no unfinished job; deleting one is safe whenever it
/// happens (see `ordering_forget.sql`), so a key that gains a job meanwhile loses nothing.
pub(crate) async fn prune_lines(
    conn: &mut MySqlConnection,
    mut cursor: PruneCursor,
) -> Result<(PruneCursor, u64), sqlx::Error> {
    let mut deleted = 0;
    for _ in 0..PRUNE_WINDOWS {
        let rows = sqlx::query(fixed(&sql::ORDERING_WINDOW))
            .bind(cursor.0.as_str())
            .bind(cursor.0.as_str())
            .bind(cursor.1.as_slice())
            .bind(PRUNE_WINDOW)
            .fetch_all(&mut *conn)
            .await?;
        let mut window = Vec::with_capacity(rows.len());
        for row in &rows {
            let line: Line = (row.try_get_unchecked(0)?, row.try_get(1)?);
            window.push((line, row.try_get::<i64, _>(2)? != 0));
        }
        let idle: Vec<&Line> = window
            .iter()
            .filter(|(_, busy)| !busy)
            .map(|(line, _)| line)
            .collect();
        for chunk in idle.chunks(MAX_LIST) {
            let size = padded_tuples(chunk.len());
            let text = sql::with_pairs(&sql::ORDERING_FORGET, size);
            let mut query = sqlx::query(&text);
            for i in 0..size {
                // Padded with copies of the last: deleted once.
                let (queue, key) = chunk.get(i).unwrap_or(&chunk[chunk.len() - 1]);
                query = query.bind(queue.as_str()).bind(key.as_slice());
            }
            deleted += query.execute(&mut *conn).await?.rows_affected();
        }
        match window.last() {
            Some((last, _)) if window.len() as i64 == PRUNE_WINDOW => cursor = last.clone(),
            // The end of the table: the next prune starts over.
            _ => return Ok((PruneCursor::default(), deleted)),
        }
    }
    Ok((cursor, deleted))
}

/// Stores `jobs`, of which at least one has a unique or an ordering key, inside the
/// caller's transaction, and says what became of each, in order. The keys' lines are
/// entered first ([`enter`]), so that each job with an ordering key is stored
/// blocked or not; then the unique keys are taken, if any job has one
/// ([`unique::enqueue_unique`]), else the jobs are inserted as they are.
///
/// A job stored as its ordering key's first and deleted again, its unique key held by
/// another job, leaves the key with the batch's later jobs of it all blocked: the first
/// of them is unblocked ([`unblock`]), in the same transaction, under the keys' rows
/// [`enter`] locked.
pub(crate) async fn enqueue_keyed(
    conn: &mut MySqlConnection,
    jobs: &[NewJob],
    now: Option<Millis>,
    id_step: i64,
) -> Result<Vec<Enqueued>, sqlx::Error> {
    let blocked = enter(conn, jobs).await?;
    if jobs.iter().any(|job| job.unique.is_some()) {
        let done = unique::enqueue_unique(conn, jobs, &blocked, now, id_step).await?;
        let twice = earlier_with_key(jobs);
        let lost: Vec<Line> = (0..jobs.len())
            .filter(|&i| done[i].existing && twice[i].is_none() && !blocked[i])
            .filter_map(|i| line_of(&jobs[i]))
            .collect();
        if !lost.is_empty() {
            unblock(conn, lost, now).await?;
        }
        return Ok(done);
    }
    let mut rows = new_rows(jobs, now);
    for (row, blocked) in rows.iter_mut().zip(blocked) {
        row.blocked = blocked;
    }
    let mut ids = Vec::with_capacity(rows.len());
    for chunk in chunks(&rows) {
        ids.extend(insert_keyed(conn, chunk, now, id_step).await?);
    }
    Ok(ids.into_iter().map(Enqueued::stored).collect())
}

#[cfg(test)]
mod tests {
    use hopper_core::LeaseId;

    use super::{is_ordered, lease_for};

    #[test]
    fn leases_say_whether_their_claim_took_a_job_with_an_ordering_key() {
        for base in [1, 2, 3, 0x1234_5679, i64::MAX] {
            let (plain, ordered) = (
                lease_for(LeaseId(base), false),
                lease_for(LeaseId(base), true),
            );
            assert!(!is_ordered(plain) && is_ordered(ordered), "{base}");
            assert!(plain.0 > 0 && ordered.0 > 0, "{base}");
        }
    }
}
