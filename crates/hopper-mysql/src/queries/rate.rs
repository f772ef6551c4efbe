//! Rate limits ([`hopper_core::rate`]): at most `max` jobs of a queue start in any window of
//! `per`, across every process claiming from the database.
//!
//! A limited queue has a row of `hopper_rate_limits`: its limit, and its window (the start
//! times of its latest claims, as [`Window::to_bytes`] writes them). The row is the queue's
//! turnstile: a claim of a limited queue locks it first thing in the claim's transaction
//! ([`lock`], several queues in queue order), reads the window and the time the claim goes
//! by, takes at most the window's room, stamps its jobs' `started_at` with that time,
//! records its count there, and writes the window back ([`write()`]) before it commits. The
//! lock covers the read, the claim and the write, so claimers in any number of processes
//! take turns on a queue's window and never claim more than its room between them; what
//! one took is in the window the next one reads.
//!
//! Queues without a row pay one primary-key probe of the table per queue, inside the claim
//! statement itself (its `limited` column, read like the pause), and no statement more. The
//! broker remembers which queues it found limited (`MySqlBroker::fetch`): their claims lock
//! first. A queue limited by another process since is found by that column: a claim that
//! locked candidates of a limited queue without holding its row takes none of its jobs,
//! commits (it changed nothing but what the reaper did), remembers the queue, and claims
//! again, this time under the lock. A lifted limit has no row to lock any more: the queue
//! is forgotten and claimed as any other.
//!
//! Times of a window never go back: the database clock is read when the lock statement
//! starts, before it may wait for another claimer, which may have recorded a later time
//! meanwhile; a claim's count is then recorded at that later time. Recording a start late
//! keeps it in the window longer, never shorter, so the limit still holds by the jobs'
//! `started_at`.
//!
//! A row another program wrote wrong (a window that does not decode, starts far in the
//! future, a limit out of range) must not stop the claim of its queue, nor of the queues
//! claimed with it: the claim logs it, naming the queue, counts from an empty window (under
//! the limit brought into range), and writes both back, so it is logged once.
//!
//! A queue limited per key ([`RateLimit::per_key`]) also has a row of
//! `hopper_rate_per_key`, which the lock reads and locks with the limit's: its claim takes
//! no room from the queue's window but asks each job's key ([`KeyGate`]).

use hopper_core::Millis;
use hopper_core::job::MAX_DELAY;
use hopper_core::rate::{MAX_RATE, RateLimit, Window};
use sqlx::Row;
use sqlx::mysql::{MySqlConnection, MySqlRow};

use super::millis;
use super::rate_keys::{KeyGate, MAX_LEAD};
use crate::sql::{self, fixed, padded};

/// Bytes of one (time, jobs) pair of a stored window.
const PAIR: usize = 12;

/// The windows of the limited queues of one claim, locked until its transaction ends.
pub(crate) struct Windows {
    /// The time the claim goes by: read with the rows (the broker's clock, or the
    /// database's), or the caller's when no queue had a row.
    pub(crate) now: Option<Millis>,
    held: Vec<Held>,
}

/// One limited queue's window, as the claim holds it.
struct Held {
    queue: String,
    limit: RateLimit,
    window: Window,
    /// The latest start recorded: a start is never recorded before it.
    latest: Option<Millis>,
    /// What the row held (window, max, per_ms), to write back only a change.
    stored: (Vec<u8>, i64, i64),
    /// The room at the claim's time.
    room: usize,
    /// The windows of its keys, for a limit per key.
    keys: Option<KeyGate>,
}

impl Windows {
    /// No limited queue: the claim goes by `now`.
    pub(crate) fn none(now: Option<Millis>) -> Windows {
        Windows {
            now,
            held: Vec::new(),
        }
    }

    fn get(&self, queue: &str) -> Option<&Held> {
        self.held.iter().find(|h| h.queue == queue)
    }

    /// Whether `queue`'s row is locked by this claim.
    pub(crate) fn holds(&self, queue: &str) -> bool {
        self.get(queue).is_some()
    }

    /// How many of `queue`'s jobs may start now; `None` for a queue without a limit, or
    /// limited per key (its keys decide job by job).
    pub(crate) fn room(&self, queue: &str) -> Option<usize> {
        self.get(queue).filter(|h| h.keys.is_none()).map(|h| h.room)
    }

    /// The key windows of `queue`, when the claim holds it limited per key.
    pub(crate) fn keys(&mut self, queue: &str) -> Option<&mut KeyGate> {
        let held = self.held.iter_mut().find(|h| h.queue == queue)?;
        held.keys.as_mut()
    }

    /// Whether the claim of `queue`, limited per key, stopped at its bound on the jobs it
    /// moves, with due jobs likely left.
    pub(crate) fn capped(&self, queue: &str) -> bool {
        self.get(queue)
            .and_then(|h| h.keys.as_ref())
            .is_some_and(KeyGate::capped)
    }

    /// Records `n` starts of `queue` at the claim's time (or at the latest start recorded,
    /// when that is later).
    pub(crate) fn started(&mut self, queue: &str, n: usize) {
        let Some(now) = self.now else { return };
        let Some(held) = self.held.iter_mut().find(|h| h.queue == queue) else {
            return;
        };
        if n == 0 || held.keys.is_some() {
            return;
        }
        let at = held.latest.map_or(now, |latest| latest.max(now));
        held.window.started(n, at);
        held.latest = Some(at);
    }

    /// When `queue`'s window has room for one job again, while it has none.
    pub(crate) fn next_room(&self, queue: &str) -> Option<Millis> {
        self.get(queue)?.window.next_room()
    }
}

/// Locks the limit rows of `queues` (sorted, distinct) in queue order and reads their
/// windows at the claim's time: `now`, or the database clock for `None`.
pub(crate) async fn lock(
    conn: &mut MySqlConnection,
    queues: &[&str],
    now: Option<Millis>,
) -> Result<Windows, sqlx::Error> {
    if queues.is_empty() {
        return Ok(Windows::none(now));
    }
    let size = padded(queues.len());
    let text = sql::with_ids(&sql::RATE_LOCK, size);
    let mut query = sqlx::query(&text).bind(now);
    for i in 0..size {
        query = query.bind(queues[i.min(queues.len() - 1)]);
    }
    let rows = query.fetch_all(&mut *conn).await?;
    let Some(first) = rows.first() else {
        return Ok(Windows::none(now));
    };
    let at: Millis = first.try_get(4)?;
    let held = rows
        .iter()
        .map(|row| held_from_row(row, at))
        .collect::<Result<_, _>>()?;
    Ok(Windows {
        now: Some(at),
        held,
    })
}

/// A locked row as the claim at `now` holds it; what cannot be read is logged and counted
/// from an empty window.
fn held_from_row(row: &MySqlRow, now: Millis) -> Result<Held, sqlx::Error> {
    // `ascii_bin` reaches the client flagged binary (see `rows`).
    let queue: String = row.try_get_unchecked(0)?;
    let (max, per_ms): (i64, i64) = (row.try_get(1)?, row.try_get(2)?);
    let starts: Vec<u8> = row.try_get(3)?;
    let swept_at: Option<Millis> = row.try_get(5)?;
    let limit = stored_limit(&queue, max, per_ms);
    let keys = swept_at.map(|at| KeyGate::new(&queue, limit.per_key(), at, now));
    let read = Window::from_bytes(limit, &starts).and_then(|w| {
        let latest = latest_start(&starts);
        match latest {
            Some(t) if t > now.saturating_add(MAX_LEAD) => Err(format!(
                "a rate window whose latest start, at {t} ms, is more than {MAX_LEAD} ms \
                 after the claim's clock ({now} ms)"
            )),
            _ => Ok((w, latest)),
        }
    });
    let (mut window, latest) = read.unwrap_or_else(|reason| {
        tracing::error!(
            %queue,
            %reason,
            "a queue's rate window cannot be read; its claims count from an empty window"
        );
        (Window::new(limit), None)
    });
    let room = window.room(now);
    Ok(Held {
        queue,
        limit,
        window,
        latest,
        stored: (starts, max, per_ms),
        room,
        keys,
    })
}

/// The time of the last pair of a window that decoded.
fn latest_start(starts: &[u8]) -> Option<Millis> {
    let last = starts.len().checked_sub(PAIR)?;
    let time = starts[last..last + 8].try_into().expect("8 bytes");
    Some(Millis::from_le_bytes(time))
}

/// The limit a row holds, brought into the range [`RateLimit::new`] accepts (logged when
/// it was not: another program wrote it, or a server that does not enforce the table's
/// CHECKs took it).
pub(crate) fn stored_limit(queue: &str, max: i64, per_ms: i64) -> RateLimit {
    let max_per = millis(MAX_DELAY);
    let in_range = (1..=i64::from(MAX_RATE)).contains(&max) && (1..=max_per).contains(&per_ms);
    if !in_range {
        tracing::error!(
            %queue,
            max,
            per_ms,
            "a queue's rate limit is out of range; it is brought into range"
        );
    }
    let max = max.clamp(1, i64::from(MAX_RATE)) as u32;
    let per = std::time::Duration::from_millis(per_ms.clamp(1, max_per) as u64);
    RateLimit::new(max, per).expect("a limit brought into range")
}

/// Writes back every window the claim changed (its starts, or what it could not read), and
/// the key windows of queues limited per key.
pub(crate) async fn write(
    conn: &mut MySqlConnection,
    windows: &mut Windows,
) -> Result<(), sqlx::Error> {
    let now = windows.now.unwrap_or_default();
    for held in &mut windows.held {
        if let Some(keys) = held.keys.as_mut() {
            keys.save(conn, now).await?;
        }
        let starts = held.window.to_bytes();
        let (max, per_ms) = (i64::from(held.limit.max), millis(held.limit.per));
        if (&starts, max, per_ms) == (&held.stored.0, held.stored.1, held.stored.2) {
            continue;
        }
        sqlx::query(fixed(&sql::RATE_WRITE))
            .bind(starts)
            .bind(max)
            .bind(per_ms)
            .bind(held.queue.as_str())
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Sets `queue`'s limit, keeping its window, or lifts it (`None`), inside the caller's
/// transaction: the limit's row first, then whether it holds per key, in the order claims
/// lock them. Key windows are forgotten unless the limit is one per key.
pub(crate) async fn set_limit(
    conn: &mut MySqlConnection,
    queue: &str,
    limit: Option<RateLimit>,
) -> Result<(), sqlx::Error> {
    match limit {
        Some(limit) => {
            sqlx::query(fixed(&sql::RATE_SET))
                .bind(queue)
                .bind(i64::from(limit.max))
                .bind(millis(limit.per))
                .execute(&mut *conn)
                .await?
        }
        None => {
            sqlx::query(fixed(&sql::RATE_LIFT))
                .bind(queue)
                .execute(&mut *conn)
                .await?
        }
    };
    if limit.is_some_and(|l| l.per_key) {
        sqlx::query(fixed(&sql::RATE_PER_KEY_SET))
            .bind(queue)
            .execute(&mut *conn)
            .await?;
        return Ok(());
    }
    for statement in [&sql::RATE_PER_KEY_LIFT, &sql::RATE_KEYS_DROP] {
        sqlx::query(fixed(statement))
            .bind(queue)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn stored_limits_come_into_range() {
        let second = Duration::from_secs(1);
        assert_eq!(
            stored_limit("q", 5, 1000),
            RateLimit::new(5, second).unwrap()
        );
        assert_eq!(stored_limit("q", 0, 1000).max, 1);
        assert_eq!(stored_limit("q", 1 << 40, 1000).max, MAX_RATE);
        assert_eq!(stored_limit("q", 5, -3).per, Duration::from_millis(1));
        assert_eq!(stored_limit("q", 5, i64::MAX).per, MAX_DELAY);
    }

    #[test]
    fn the_latest_start_is_the_last_pair() {
        let limit = RateLimit::new(10, Duration::from_secs(1)).unwrap();
        let mut w = Window::new(limit);
        assert_eq!(latest_start(&w.to_bytes()), None);
        w.started(2, 5);
        w.started(1, 70);
        assert_eq!(latest_start(&w.to_bytes()), Some(70));
    }
}
