//! Rate limits on the file ([`Broker::set_rate_limit`](hopper_core::Broker::set_rate_limit),
//! [`hopper_core::rate`]): at most `max` claims of a queue in any window of `per`, whichever
//! broker of the file claims, in this process or another.
//!
//! A limited queue has a row in `hopper_rate_limits` (migration 0010): its limit and its
//! window, the (time, jobs) pairs of its latest claims as [`Window::to_bytes`] writes them.
//! A claim reads the row in the same statement that finds the queue's top priority level
//! (`CLAIM_TOP_LEVEL`), takes at most the window's room, and writes the window back with
//! its own start appended ([`Gate::claimed`]). All of it runs inside the claim's write
//! transaction, and SQLite lets one transaction write the file at a time, so that
//! transaction is the lock: no other claim, whatever process or connection it runs on, can
//! read the window between this claim's read and its write. Nothing is locked per queue, so
//! claims of several limited queues need no order to take locks in.
//!
//! A queue without a row pays one descent of the (small, usually empty) table's key within
//! the statement it ran anyway; the window is read, decoded and written only for a queue
//! that has a limit.
//!
//! Each claim stamps its jobs' `started_at` with its `now`, read by the caller before the
//! command reaches the write lock, so claims can reach a window out of their clocks' order
//! (two processes, or two calls of one broker). A start is recorded no earlier than the
//! window's latest ([`Gate::claimed`]): the pairs stay in order, and a start recorded late
//! only stays in the window longer.
//!
//! A row no broker would write (starts that are not whole pairs, out of order, or more than
//! a period ahead of the claim; a limit out of range, which the table's checks refuse
//! unless another program turned them off) never fails the claim, of its queue or of any
//! other: it is logged, naming the queue, and read as near as it can be ([`window`]), and
//! the claim writes it back as it kept it.

use hopper_core::Millis;
use hopper_core::job::MAX_DELAY;
use hopper_core::rate::{MAX_RATE, RateLimit, Window};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::rate_keys::KeyGate;
use crate::sql;

/// The longest window a row may hold, in ms: [`MAX_DELAY`].
const MAX_PER_MS: i64 = MAX_DELAY.as_millis() as i64;

/// Sets `queue`'s limit, keeping the starts of its window if it had one, so that a limit
/// set again or changed never lets a burst through; `None` lifts it.
pub(crate) fn set(
    conn: &Connection,
    queue: &str,
    limit: Option<RateLimit>,
) -> rusqlite::Result<()> {
    match limit {
        Some(limit) => conn.prepare_cached(sql::SET_RATE_LIMIT)?.execute(params![
            queue,
            limit.max,
            per_ms(limit),
            limit.per_key
        ])?,
        None => conn
            .prepare_cached(sql::LIFT_RATE_LIMIT)?
            .execute(params![queue])?,
    };
    if !limit.is_some_and(|l| l.per_key) {
        // Key windows count nothing without a limit per key.
        conn.prepare_cached(sql::DROP_RATE_KEYS)?
            .execute(params![queue])?;
    }
    Ok(())
}

/// `queue`'s limit, for its statistics; a stored limit out of range shows as it is kept.
pub(crate) fn limit_of(conn: &Connection, queue: &str) -> rusqlite::Result<Option<RateLimit>> {
    conn.prepare_cached(sql::RATE_LIMIT)?
        .query_row(params![queue], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get::<_, i64>(2)?))
        })
        .optional()
        .map(|found| {
            found.map(|(max, per, per_key)| {
                let limit = read_limit(queue, max, per).0;
                if per_key != 0 { limit.per_key() } else { limit }
            })
        })
}

fn per_ms(limit: RateLimit) -> i64 {
    i64::try_from(limit.per.as_millis()).unwrap_or(i64::MAX)
}

/// The limit stored as `max` and `per` ms, brought into range if it is not, and whether
/// it was in range.
fn read_limit(queue: &str, max: i64, per: i64) -> (RateLimit, bool) {
    let max_in = max.clamp(1, i64::from(MAX_RATE));
    let per_in = per.clamp(1, MAX_PER_MS);
    let limit = RateLimit::new(
        max_in as u32,
        std::time::Duration::from_millis(per_in as u64),
    )
    .expect("a limit brought into range");
    let sound = (max_in, per_in) == (max, per);
    if !sound {
        tracing::error!(queue, max, per_ms = per, kept = %limit,
            "a stored rate limit is out of range: keeping the nearest limit in range");
    }
    (limit, sound)
}

/// A stored window as a claim at some `now` reads it.
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) window: Window,
    /// The time of its latest start, if it has any.
    pub(crate) latest: Option<Millis>,
    /// The row was out of range or unreadable: it is written back as it was kept even if
    /// the claim takes nothing, so that it is logged once.
    pub(crate) repair: bool,
}

/// The window of `queue` as stored, for a claim at `now`: `max` jobs per `per` ms and its
/// `starts`. A limit out of range is brought into range; starts that
/// [`Window::from_bytes`] refuses, or whose latest is later than `now` by more than the
/// window (no clock of a broker sharing the file is that far ahead), are dropped, as a
/// fresh window. Either is logged naming the queue.
pub(crate) fn window(queue: &str, max: i64, per: i64, starts: &[u8], now: Millis) -> Stored {
    let (limit, sound) = read_limit(queue, max, per);
    let read = Window::from_bytes(limit, starts).and_then(|window| {
        let latest = latest_start(starts);
        match latest {
            Some(t) if t > now.saturating_add(per_ms(limit)) => Err(format!(
                "a rate window whose latest start, at {t}, is more than its period after {now}"
            )),
            _ => Ok((window, latest)),
        }
    });
    match read {
        Ok((window, latest)) => Stored {
            window,
            latest,
            repair: !sound,
        },
        Err(why) => {
            tracing::error!(queue, reason = %why, bytes = starts.len(),
                "a stored rate window cannot be read: starting the queue's window afresh");
            Stored {
                window: Window::new(limit),
                latest: None,
                repair: true,
            }
        }
    }
}

/// The time of the last (time, jobs) pair of `starts` as [`Window::to_bytes`] lays them
/// out (8 bytes of time, then 4 of jobs), which the caller read as a window.
fn latest_start(starts: &[u8]) -> Option<Millis> {
    let last = starts.len().checked_sub(12)?;
    let time = starts.get(last..last + 8)?.try_into().ok()?;
    Some(Millis::from_le_bytes(time))
}

/// A limited queue's window during one claim: how many jobs the claim may take, and what
/// it writes back. For a limit per key, the keys' windows instead ([`KeyGate`]).
pub(crate) struct Gate {
    stored: Stored,
    room: usize,
    pub(crate) keys: Option<KeyGate>,
}

impl Gate {
    /// The gate of `CLAIM_TOP_LEVEL`'s row (columns 1 to 5: `max, per_ms, starts, per_key,
    /// swept_at`), or `None` when the queue has no limit; its room at `now`.
    pub(crate) fn of_row(
        queue: &str,
        row: &Row<'_>,
        now: Millis,
    ) -> rusqlite::Result<Option<Gate>> {
        let Some(max) = row.get::<_, Option<i64>>(1)? else {
            return Ok(None);
        };
        let per: i64 = row.get(2)?;
        let starts = row.get_ref(3)?.as_blob()?;
        let mut stored = window(queue, max, per, starts, now);
        let room = stored.window.room(now);
        let keys = match row.get::<_, i64>(4)? {
            0 => None,
            _ => {
                let limit = stored.window.limit().per_key();
                Some(KeyGate::new(limit, row.get(5)?, now))
            }
        };
        Ok(Some(Gate { stored, room, keys }))
    }

    /// The most a budget of `limit` jobs may take now: the room of the queue's window, or
    /// all of it under a limit per key, whose keys decide job by job.
    pub(crate) fn cut(&self, limit: usize) -> usize {
        match self.keys {
            Some(_) => limit,
            None => limit.min(self.room),
        }
    }

    /// Records that the claim took `taken` jobs at `now` of a budget of `asked`, and writes
    /// the window back (when it changed: a claim of none only drops old starts, which the
    /// next claim that takes any drops as well). Returns when the window has room again if
    /// the room cut the budget and the claim took all of it, while `waiting` (the queue had
    /// pending jobs): the fetch's next due time is then no later than that.
    ///
    /// The start is recorded no earlier than the window's latest one. A claim's `now` is
    /// read before its command reaches the write lock, so claims of two processes, or two
    /// calls of one, can reach the window out of their clocks' order; the pairs must stay
    /// in order ([`Window::from_bytes`] refuses them otherwise). A start recorded a little
    /// late stays in the window a little longer, never shorter, so no window of `per`
    /// holds more than `max` claims by the times they stamp on their jobs.
    pub(crate) fn claimed(
        self,
        conn: &Connection,
        queue: &str,
        asked: usize,
        taken: usize,
        waiting: bool,
        now: Millis,
    ) -> rusqlite::Result<Option<Millis>> {
        let Gate {
            mut stored,
            room,
            keys,
        } = self;
        if let Some(keys) = keys {
            keys.save(conn, queue, now)?;
            return Ok(None);
        }
        let at = stored.latest.map_or(now, |latest| latest.max(now));
        stored.window.started(taken, at);
        if taken > 0 || stored.repair {
            let limit = stored.window.limit();
            conn.prepare_cached(sql::SAVE_WINDOW)?.execute(params![
                queue,
                limit.max,
                per_ms(limit),
                stored.window.to_bytes()
            ])?;
        }
        let held_back = room < asked && taken >= room && waiting;
        Ok(stored.window.next_room().filter(|_| held_back))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    use super::*;

    /// Keeps every event's fields as text, to see what a log line names.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<String>>>);

    struct Text<'a>(&'a mut String);

    impl Visit for Text<'_> {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.push_str(&format!("{}={value:?} ", field.name()));
        }
    }

    impl Subscriber for Lines {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut line = format!("{} ", event.metadata().level());
            event.record(&mut Text(&mut line));
            self.0.lock().unwrap().push(line);
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    /// What `f` logged, one line per event.
    fn logged(f: impl FnOnce()) -> Vec<String> {
        let lines = Lines::default();
        tracing::subscriber::with_default(lines.clone(), f);
        lines.0.lock().unwrap().clone()
    }

    #[test]
    fn a_sound_row_is_read_as_stored_without_a_word() {
        let limit = RateLimit::new(3, std::time::Duration::from_millis(100)).unwrap();
        let mut stored = Window::new(limit);
        stored.started(2, 10);
        let lines = logged(|| {
            let mut read = window("q", 3, 100, &stored.to_bytes(), 50);
            assert!(!read.repair);
            assert_eq!(read.latest, Some(10));
            assert_eq!((read.window.limit(), read.window.room(50)), (limit, 1));
        });
        assert!(lines.is_empty(), "{lines:?}");
    }

    #[test]
    fn unreadable_starts_give_a_fresh_window_and_name_the_queue() {
        let limit = RateLimit::new(3, std::time::Duration::from_millis(100)).unwrap();
        let mut ahead = Window::new(limit);
        ahead.started(3, 1_000);
        let lines = logged(|| {
            let mut read = window("mail", 3, 100, &[1, 2, 3], 0);
            assert!(read.repair, "written back, so logged once");
            assert_eq!((read.window.room(0), read.latest), (3, None));
            // Starts up to one period ahead are a clock a little ahead; further, garbage.
            let near = window("near", 3, 100, &ahead.to_bytes(), 900);
            assert_eq!((near.repair, near.latest), (false, Some(1_000)));
            let mut far = window("far", 3, 100, &ahead.to_bytes(), 899);
            assert_eq!((far.repair, far.window.room(899)), (true, 3));
        });
        assert_eq!(lines.len(), 2, "{lines:?}");
        for (line, queue) in lines.iter().zip(["mail", "far"]) {
            assert!(
                line.starts_with("ERROR") && line.contains(&format!("queue=\"{queue}\"")),
                "{lines:?}"
            );
        }
    }

    #[test]
    fn a_limit_out_of_range_is_kept_at_the_nearest_in_range_and_named() {
        let lines = logged(|| {
            let mut read = window("mail", 0, -5, &[], 0);
            assert!(read.repair);
            let w = &mut read.window;
            assert_eq!((w.limit().max, w.limit().per.as_millis()), (1, 1));
            assert_eq!(w.room(0), 1);
            let w = window("big", i64::MAX, i64::MAX, &[], 0).window;
            assert_eq!(w.limit().max, MAX_RATE);
            assert_eq!(w.limit().per, MAX_DELAY);
        });
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("queue=\"mail\""), "{lines:?}");
        assert!(lines[1].contains("queue=\"big\""), "{lines:?}");
    }
}
