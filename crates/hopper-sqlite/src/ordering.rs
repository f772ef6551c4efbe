//! Ordering keys ([`hopper_core::job::ordering`]) as they run on the database thread: jobs
//! of a queue that share a key run one at a time, in enqueue order.
//!
//! Of a key's pending and leased jobs, one is its head and the others wait blocked:
//! pending, their `run_at` moved [`BLOCKED`] into the future, where no claim looks, so
//! claims run as they always did. A job is stored blocked when its key has a pending or
//! leased job (`INSERT_ORDERED_JOB`). When a head ends (acknowledged, dead-lettered,
//! cancelled, dead of a lease that expired on its last attempt, buried as unreadable),
//! the key's first job gets its own time back ([`head_ended`]); a head that is retried,
//! released or snoozed stays the head. A re-driven dead letter goes back blocked and is
//! unblocked at once if its key has no head ([`redriven`]). The index
//! `hopper_jobs_ordering` (migration 0009) holds the keys' pending and leased jobs only, so
//! each look is one descent however many jobs wait on a key or how many of its jobs died.
//!
//! No lock beyond SQLite's own: every one of these changes is made in the write
//! transaction of the call that causes it, and SQLite runs one write transaction at a time
//! on a file, whatever the number of threads and processes. So an enqueue never looks at a
//! key between the end of its head and the unblocking of the next, and ids within a key
//! follow commit order. It is also why the end of a head is all [`head_ended`] needs to
//! know: every transaction leaves each key with its one head, so the statement need not
//! check that no other job of the key is unblocked, a look that would walk all the key's
//! waiting jobs on every acknowledgement.
//!
//! Jobs without a key pay as little as can be. A batch of them is inserted by the
//! statements it always was. The settlements that end a job match only jobs without a key
//! (and of no group: [`crate::groups`]); when one changed nothing, [`settle_ended`] runs a
//! copy that matches the others and returns the key and the group. Returning them from the
//! one statement (`RETURNING`) was measured first: SQLite fills a temporary table for it
//! on every run, and a raw loop's acknowledgement went from 0.8 to 2.6 µs. Cancelling a
//! pending job, reaping expired leases, burying an unreadable row and re-driving dead
//! letters are rare enough to return it at once. What every job does pay is the index:
//! each insert, claim and settlement tests its condition, as it tests those of the other
//! three partial indexes. In a raw loop of the broker's statements at batch 100, that made
//! a claim about 4% slower and an acknowledgement 7% (0.1 and 0.05 µs); the broker's own
//! benchmark cannot tell them apart.

use std::collections::BTreeSet;

use hopper_core::admin::{ERROR_HISTORY, bounded_error};
use hopper_core::job::{BLOCKED, MAX_RUN_AT};
use hopper_core::{Millis, Outcome, Settlement};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::groups::{self, Ended};
use crate::sql;
use crate::store::Text;

/// A key of one queue as its rows store it. The texts are kept as bytes and bound back
/// unchanged, so that a key another program wrote in something other than UTF-8 still
/// reaches its jobs, rather than fail each settlement or reaping that meets it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Line {
    queue: Vec<u8>,
    key: Vec<u8>,
}

impl Line {
    /// The line of a row that starts `queue, ordering_key`, as the statements that end jobs
    /// return them; `None` for a job without a key.
    pub(crate) fn of_row(row: &Row<'_>) -> rusqlite::Result<Option<Line>> {
        let Some(key) = row.get_ref(1)?.as_bytes_or_null()? else {
            return Ok(None);
        };
        let queue = row.get_ref(0)?.as_bytes()?;
        Ok(Some(Line {
            queue: queue.to_vec(),
            key: key.to_vec(),
        }))
    }
}

/// Whether a stored `run_at` is a blocked job's: past [`MAX_RUN_AT`], the latest time a
/// job can be given, as the statements test it (`run_at > 253402300799999`). Not from
/// [`BLOCKED`] on, as [`hopper_core::job::is_blocked`] tests it: a job blocked with its own
/// time before 1970 is stored below `BLOCKED` (`-1` as `BLOCKED - 1`). The two agree on
/// every other time.
pub(crate) fn is_blocked(stored: Millis) -> bool {
    stored > MAX_RUN_AT
}

/// A stored `run_at` as a record shows it: the job's own time, and whether it is blocked,
/// which only a `pending` job is (one cancelled while blocked keeps the time it had).
pub(crate) fn own_time(stored: Millis, pending: bool) -> (Millis, bool) {
    if is_blocked(stored) {
        (stored - BLOCKED, pending)
    } else {
        (stored, false)
    }
}

/// Unblocks the next job of `line`, whose head just ended or stepped aside, at `now`;
/// returns whether there was one waiting.
pub(crate) fn head_ended(conn: &Connection, line: &Line, now: Millis) -> rusqlite::Result<bool> {
    let unblocked = conn.prepare_cached(sql::UNBLOCK_NEXT)?.execute(params![
        Text(&line.queue),
        Text(&line.key),
        BLOCKED,
        now
    ])?;
    Ok(unblocked > 0)
}

/// After job `id` was retried at `now` with [`Outcome::Retry`]'s `step_aside`: blocks it
/// when other jobs of its ordering key wait, and unblocks the key's next one, which may be
/// itself. Nothing for a job without a key. Returns whether a job was unblocked.
pub(crate) fn step_aside(conn: &Connection, id: i64, now: Millis) -> rusqlite::Result<bool> {
    let line = conn
        .prepare_cached(sql::STEP_ASIDE)?
        .query_row(params![id, BLOCKED], Line::of_row)
        .optional()?
        .flatten();
    match line {
        Some(line) => head_ended(conn, &line, now),
        None => Ok(false),
    }
}

/// A row's line and group, as the `_ORDERED` settlements return them.
fn line_and_group(row: &Row<'_>) -> rusqlite::Result<(Option<Line>, Option<Vec<u8>>)> {
    Ok((Line::of_row(row)?, groups::group_of(row, 2)?))
}

/// Settles `s` on a job with an ordering key or a group, when its outcome ends the job
/// (the statements `queries::settle` runs for those match jobs with neither only),
/// unblocks the next job of the key and counts the member ([`groups::member_ended`]).
/// `None` when no such job is held under the lease (or the outcome does not end one): the
/// settlement is fenced. Otherwise whether a job was unblocked or a completion job
/// enqueued.
pub(crate) fn settle_ended(
    conn: &Connection,
    s: &Settlement,
    now: Millis,
) -> rusqlite::Result<Option<bool>> {
    let (id, lease) = (s.job.0, s.lease.0);
    let (ended, how) = match &s.outcome {
        Outcome::Ack => (
            conn.prepare_cached(sql::SETTLE_ACK_ORDERED)?
                .query_row(params![id, lease], line_and_group),
            Ended::Succeeded,
        ),
        Outcome::DeadLetter { error } => (
            conn.prepare_cached(sql::SETTLE_DEAD_LETTER_ORDERED)?
                .query_row(
                    params![
                        id,
                        lease,
                        error,
                        now,
                        bounded_error(error),
                        ERROR_HISTORY as i64
                    ],
                    line_and_group,
                ),
            Ended::Dead,
        ),
        Outcome::Cancel => (
            conn.prepare_cached(sql::SETTLE_CANCEL_ORDERED)?
                .query_row(params![id, lease, now], line_and_group),
            Ended::Cancelled,
        ),
        Outcome::Retry { .. } | Outcome::Release | Outcome::Snooze { .. } => return Ok(None),
    };
    let Some((line, group)) = ended.optional()? else {
        return Ok(None);
    };
    let mut woke = match &line {
        Some(line) => head_ended(conn, line, now)?,
        None => false,
    };
    if let Some(group) = group {
        woke |= groups::member_ended(conn, &group, id, how, now)?;
    }
    Ok(Some(woke))
}

/// After a re-drive put dead letters of `lines` back blocked (`RETRY_DEAD`), unblocks the
/// next job of each of those keys that has no head, as when a head ends ([`head_ended`]).
pub(crate) fn redriven(
    conn: &Connection,
    lines: &BTreeSet<Line>,
    now: Millis,
) -> rusqlite::Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut has_head = conn.prepare_cached(sql::KEY_HAS_HEAD)?;
    for line in lines {
        let headed: bool = has_head
            .query_row(params![Text(&line.queue), Text(&line.key)], |row| {
                row.get(0)
            })?;
        if !headed {
            head_ended(conn, line, now)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use hopper_core::job::{BLOCKED, MAX_RUN_AT, MIN_RUN_AT, ordering};

    use super::own_time;
    use crate::sql;

    /// The statements and the migration spell the bounds of real and blocked times as
    /// numbers, which must be those of `hopper_core`.
    #[test]
    fn the_sql_numbers_are_the_cores() {
        let latest = MAX_RUN_AT.to_string();
        for text in [
            sql::NEXT_DUE,
            sql::UNBLOCK_NEXT,
            sql::KEY_HAS_HEAD,
            sql::MIGRATIONS[8],
        ] {
            assert!(text.contains(&latest), "{text}");
        }
        let migration = sql::MIGRATIONS[8];
        for bound in [MIN_RUN_AT, MAX_RUN_AT] {
            assert!(migration.contains(&(BLOCKED + bound).to_string()));
            assert!(migration.contains(&bound.to_string()));
        }
    }

    #[test]
    fn records_show_the_own_time() {
        for t in [MIN_RUN_AT, -1, 0, 1_765_000_000_000, MAX_RUN_AT] {
            assert_eq!(own_time(t, true), (t, false));
            let stored = t + BLOCKED;
            assert_eq!(own_time(stored, true), (t, true));
            assert_eq!(
                own_time(stored, false),
                (t, false),
                "cancelled while blocked"
            );
            if t >= 0 {
                assert_eq!(ordering::own_run_at(stored), t, "as the core reads it");
            }
        }
    }
}
