//! Rate limits per key ([`RateLimit::per_key`]): a window for each rate key of a limited
//! queue's jobs (`hopper_rate_keys`, migration 0011), jobs without a key sharing the window
//! of the empty key.
//!
//! A claim of such a queue holds the queue's limit row ([`super::rate`]), so claims of the
//! queue take turns in every process, and reads its candidates as any claim does. It then
//! asks the queue's [`KeyGate`] about each, in the claim's order: a job whose key's window
//! has room is taken and its start recorded; one whose window is full is moved to the time
//! that window will have room for it ([`Window::defer`]), so that no claim reads it again
//! before then. Moved jobs leave the claim short: it reads the queue again, each read
//! twice as far as the last, until it has its budget, the queue has no more due jobs, or
//! it has moved [`DEFER_PER_CLAIM`] jobs (`fetch::claim_keyed`). Those reads lock and
//! return ids and keys only; the jobs taken from them are read whole at the end. The windows it touched are written
//! back before it commits ([`KeyGate::save`]), still under the queue's lock.
//!
//! Statements are batched: a read of the windows of the keys a read found, one update for
//! the jobs it moved, one upsert and one delete for the windows at the end. Each claim
//! spreads the jobs it holds back afresh from their window's next room, so a job held back
//! again goes first, ahead of those spread after it.

use std::collections::{HashMap, HashSet};

use hopper_core::rate::{RateLimit, Window};
use hopper_core::{JobId, Millis};
use sqlx::Row;
use sqlx::mysql::MySqlConnection;

use crate::sql::{self, MAX_LIST, fixed, padded};

/// The most jobs one claim moves back: it bounds the time a claim holds the queue's lock
/// when a key has a deep backlog; the next claim goes on from there.
pub(crate) const DEFER_PER_CLAIM: usize = 4096;

/// How far past the claim's clock a stored start may lie: more was not written by a claim,
/// nor by a clock so far out of step, and would hold the queue (or key) until it left the
/// window.
pub(super) const MAX_LEAD: Millis = 60_000;

/// The most key windows one statement writes (five values each).
const SAVE_ROWS: usize = 1024;

/// A key's window during one claim.
struct Key {
    window: Window,
    changed: bool,
}

/// A per-key limited queue's windows during one claim.
pub(crate) struct KeyGate {
    queue: String,
    limit: RateLimit,
    keys: HashMap<Vec<u8>, Key>,
    /// Jobs held back and not yet moved: (id, new `run_at`).
    moves: Vec<(i64, Millis)>,
    /// Jobs held back so far.
    pub(super) deferred: usize,
    /// Whether the queue's idle windows are due to be dropped (a period since the last
    /// time).
    sweep: bool,
}

impl KeyGate {
    /// The gate of `queue`, limited per key by `limit`, whose windows were last swept at
    /// `swept_at`.
    pub(crate) fn new(queue: &str, limit: RateLimit, swept_at: Millis, now: Millis) -> Self {
        KeyGate {
            queue: queue.to_owned(),
            limit,
            keys: HashMap::new(),
            moves: Vec::new(),
            deferred: 0,
            sweep: now.saturating_sub(swept_at) >= limit.per_ms(),
        }
    }

    /// Whether the claim stopped at [`DEFER_PER_CLAIM`].
    pub(crate) fn capped(&self) -> bool {
        self.deferred >= DEFER_PER_CLAIM
    }

    /// Reads the stored windows of `keys` not read yet, at the claim's time `now`; a key
    /// without a row starts afresh. A row no claim would write (one that does not decode,
    /// or whose latest start lies more than [`MAX_LEAD`] after `now`, which would hold the
    /// key until then) is logged, naming the queue and key, and starts afresh too.
    pub(super) async fn load<'k>(
        &mut self,
        conn: &mut MySqlConnection,
        keys: impl Iterator<Item = &'k [u8]>,
        now: Millis,
    ) -> Result<(), sqlx::Error> {
        let mut missing: Vec<&[u8]> = Vec::new();
        let mut asked: HashSet<&[u8]> = HashSet::new();
        for key in keys {
            if !self.keys.contains_key(key) && asked.insert(key) {
                missing.push(key);
            }
        }
        for chunk in missing.chunks(MAX_LIST) {
            let size = padded(chunk.len());
            let text = sql::with_ids(&sql::RATE_KEYS_READ, size);
            let mut query = sqlx::query(&text).bind(self.queue.as_str());
            for i in 0..size {
                query = query.bind(chunk[i.min(chunk.len() - 1)]);
            }
            for row in query.fetch_all(&mut *conn).await? {
                let (key, starts): (Vec<u8>, Vec<u8>) = (row.try_get(0)?, row.try_get(1)?);
                let read =
                    Window::from_bytes(self.limit, &starts).and_then(|w| match w.latest_start() {
                        Some(t) if t > now.saturating_add(MAX_LEAD) => Err(format!(
                            "its latest start, at {t} ms, is more than {MAX_LEAD} ms after \
                             the claim's clock ({now} ms)"
                        )),
                        _ => Ok(w),
                    });
                let key_entry = match read {
                    Ok(window) => Key {
                        window,
                        changed: false,
                    },
                    Err(why) => {
                        tracing::error!(queue = %self.queue,
                            key = %String::from_utf8_lossy(&key), reason = %why,
                            "a stored rate window of a key cannot be read: starting it afresh");
                        // Dropped or written back fresh at the end, so it is logged once.
                        Key {
                            window: Window::new(self.limit),
                            changed: true,
                        }
                    }
                };
                self.keys.insert(key, key_entry);
            }
            for key in chunk {
                self.keys.entry(key.to_vec()).or_insert_with(|| Key {
                    window: Window::new(self.limit),
                    changed: false,
                });
            }
        }
        Ok(())
    }

    /// Whether job `id` of `key` may start at `now`: its start is recorded when it may;
    /// when its key's window is full it is held back, to be moved by [`flush`](Self::flush)
    /// to when the window has room.
    pub(super) fn admit(&mut self, id: JobId, key: &[u8], now: Millis) -> bool {
        let entry = self.keys.get_mut(key).expect("loaded before admitting");
        entry.changed = true;
        if entry.window.room(now) > 0 {
            entry.window.started(1, now);
            return true;
        }
        let at = entry.window.defer(now);
        self.moves.push((id.0, at));
        self.deferred += 1;
        false
    }

    /// Moves the jobs held back since the last flush, in one statement per [`MAX_LIST`].
    pub(super) async fn flush(&mut self, conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
        for chunk in self.moves.chunks(MAX_LIST) {
            let size = padded(chunk.len());
            let text = sql::rate_defer(size);
            let mut query = sqlx::query(&text);
            for i in 0..size {
                let (id, at) = chunk[i.min(chunk.len() - 1)];
                query = query.bind(id).bind(at);
            }
            query.execute(&mut *conn).await?;
        }
        self.moves.clear();
        Ok(())
    }

    /// Writes back the windows the claim changed, dropping those left idle, and drops the
    /// queue's other idle windows when a period has passed since that was last done.
    pub(crate) async fn save(
        &mut self,
        conn: &mut MySqlConnection,
        now: Millis,
    ) -> Result<(), sqlx::Error> {
        let queue = self.queue.as_str();
        if self.sweep {
            let since = now.saturating_sub(self.limit.per_ms());
            sqlx::query(fixed(&sql::RATE_KEYS_SWEEP))
                .bind(queue)
                .bind(since)
                .bind(since)
                .bind(now)
                .bind(now)
                .execute(&mut *conn)
                .await?;
            sqlx::query(fixed(&sql::RATE_KEYS_SWEPT))
                .bind(now)
                .bind(queue)
                .execute(&mut *conn)
                .await?;
            self.sweep = false;
        }
        let (mut kept, mut idle) = (Vec::new(), Vec::new());
        for (key, entry) in self.keys.iter_mut().filter(|(_, e)| e.changed) {
            entry.changed = false;
            if entry.window.idle(now) {
                idle.push(key.as_slice());
            } else {
                kept.push((key.as_slice(), &entry.window));
            }
        }
        for chunk in kept.chunks(SAVE_ROWS) {
            let size = padded(chunk.len());
            let text = sql::rate_keys_save(size);
            let mut query = sqlx::query(&text);
            for i in 0..size {
                let (key, window) = chunk[i.min(chunk.len() - 1)];
                query = query
                    .bind(queue)
                    .bind(key)
                    .bind(window.to_bytes())
                    .bind(window.latest_start())
                    .bind(window.booked().map(|(at, _)| at));
            }
            query.execute(&mut *conn).await?;
        }
        for chunk in idle.chunks(MAX_LIST) {
            let size = padded(chunk.len());
            let text = sql::with_ids(&sql::RATE_KEYS_FORGET, size);
            let mut query = sqlx::query(&text).bind(queue);
            for i in 0..size {
                query = query.bind(chunk[i.min(chunk.len() - 1)]);
            }
            query.execute(&mut *conn).await?;
        }
        Ok(())
    }
}
