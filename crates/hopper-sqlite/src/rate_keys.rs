//! Rate limits per key on the file ([`RateLimit::per_key`]): a window for each rate key of
//! a limited queue's jobs (`hopper_rate_keys`, migration 0012), jobs without a key sharing
//! the window of the empty key.
//!
//! A claim of such a queue reads its candidates as any claim does, then asks the queue's
//! [`KeyGate`] about each: a job whose key's window has room is claimed and its start
//! recorded; one whose window is full is moved (`DEFER_JOB`) to the time that window will
//! have room for it ([`Window::defer`]), so no claim reads it again before then. The
//! windows touched are written back at the end of the claim, inside its write transaction,
//! where no other claim of any process can read them in between (see [`crate::rate`]).

use std::collections::HashMap;

use hopper_core::rate::{RateLimit, Window};
use hopper_core::{JobId, Millis};
use rusqlite::{Connection, OptionalExtension, params};

use crate::sql;

/// The most jobs one claim moves back: it bounds the time a claim holds the write lock
/// when a key has a deep backlog; the next claim goes on from there.
pub(crate) const DEFER_PER_CLAIM: usize = 4096;

/// A key's window during one claim.
struct Key {
    window: Window,
    changed: bool,
}

/// A per-key limited queue's windows during one claim.
pub(crate) struct KeyGate {
    limit: RateLimit,
    keys: HashMap<String, Key>,
    /// Jobs moved back so far.
    pub(crate) deferred: usize,
    /// Whether the queue's idle windows are due to be dropped (a period since the last
    /// time).
    sweep: bool,
}

impl KeyGate {
    /// The gate of a queue limited per key by `limit`, whose windows were last swept at
    /// `swept_at`.
    pub(crate) fn new(limit: RateLimit, swept_at: Millis, now: Millis) -> Self {
        let per = limit.per_ms();
        KeyGate {
            limit,
            keys: HashMap::new(),
            deferred: 0,
            sweep: now.saturating_sub(swept_at) >= per,
        }
    }

    /// Whether `job` of `queue` may start at `now`: its rate key (empty for none) when it
    /// may. When its key's window is full the job is moved to when it has room, and this
    /// says no.
    pub(crate) fn admit(
        &mut self,
        conn: &Connection,
        queue: &str,
        job: JobId,
        now: Millis,
    ) -> rusqlite::Result<Option<String>> {
        let key: Option<String> = conn
            .prepare_cached(sql::JOB_RATE_KEY)?
            .query_row(params![job.0], |row| row.get(0))?;
        let key = key.unwrap_or_default();
        if !self.keys.contains_key(&key) {
            let read = read_window(conn, queue, &key, self.limit, now)?;
            self.keys.insert(key.clone(), read);
        }
        let entry = self.keys.get_mut(&key).expect("read above");
        if entry.window.room(now) > 0 {
            return Ok(Some(key));
        }
        let at = entry.window.defer(now);
        entry.changed = true;
        conn.prepare_cached(sql::DEFER_JOB)?
            .execute(params![job.0, at])?;
        self.deferred += 1;
        Ok(None)
    }

    /// Records the start, at `now`, of a job of `key` that [`admit`](Self::admit) let
    /// through and the claim took.
    pub(crate) fn started(&mut self, key: &str, now: Millis) {
        if let Some(entry) = self.keys.get_mut(key) {
            entry.window.started(1, now);
            entry.changed = true;
        }
    }

    /// Writes back the windows the claim changed, and drops the queue's idle windows when
    /// a period has passed since that was last done.
    pub(crate) fn save(self, conn: &Connection, queue: &str, now: Millis) -> rusqlite::Result<()> {
        let mut save = conn.prepare_cached(sql::SAVE_KEY_WINDOW)?;
        for (key, mut entry) in self.keys.into_iter().filter(|(_, e)| e.changed) {
            if entry.window.idle(now) {
                conn.prepare_cached(sql::DROP_KEY_WINDOW)?
                    .execute(params![queue, key])?;
                continue;
            }
            let booked = entry.window.booked();
            save.execute(params![
                queue,
                key,
                entry.window.to_bytes(),
                entry.window.latest_start(),
                booked.map(|(t, _)| t),
                booked.map_or(0, |(_, n)| n),
            ])?;
        }
        if self.sweep {
            let per = self.limit.per_ms();
            conn.prepare_cached(sql::SWEEP_RATE_KEYS)?.execute(params![
                queue,
                now.saturating_sub(per),
                now
            ])?;
            conn.prepare_cached(sql::RATE_KEYS_SWEPT)?
                .execute(params![queue, now])?;
        }
        Ok(())
    }
}

/// `key`'s window of `queue` as stored, or a fresh one. A row no broker would write is
/// logged, naming the queue and key, and read as a fresh window.
fn read_window(
    conn: &Connection,
    queue: &str,
    key: &str,
    limit: RateLimit,
    now: Millis,
) -> rusqlite::Result<Key> {
    let row = conn
        .prepare_cached(sql::KEY_WINDOW)?
        .query_row(params![queue, key], |row| row.get::<_, Vec<u8>>(0))
        .optional()?;
    let Some(starts) = row else {
        return Ok(Key {
            window: Window::new(limit),
            changed: false,
        });
    };
    let mut window = match Window::from_bytes(limit, &starts) {
        Ok(w) => w,
        Err(why) => {
            tracing::error!(queue, key, reason = %why,
                "a stored rate window of a key cannot be read: starting it afresh");
            Window::new(limit)
        }
    };
    // The row's `booked_at` is what the last claim gave the jobs it held back, for the
    // sweep: each claim spreads the jobs it holds back afresh (see `Window::defer`).
    window.room(now);
    Ok(Key {
        window,
        changed: false,
    })
}
