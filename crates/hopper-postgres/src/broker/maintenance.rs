//! Upkeep of the tables, started by fetches: vacuuming the jobs table after every so many
//! claims ([`PgOptions::vacuum_after`](crate::PgOptions::vacuum_after)), pruning completed
//! jobs past their retention ([`PgOptions::keep_completed`](crate::PgOptions::keep_completed)),
//! and deleting unique keys whose hold has ended.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hopper_core::clock::Pace;
use hopper_core::{Error, Millis, Result};
use sqlx::postgres::PgConnection;

use super::{PgBroker, db_err};
use crate::conn::Held;

/// The least time between two vacuums by one broker, and how many times its last
/// vacuum's duration it waits at least, so vacuuming takes at most a tenth of the time.
const VACUUM_MIN_GAP: Duration = Duration::from_secs(1);
const VACUUM_GAP_FACTOR: u32 = 10;
/// How long a vacuum may take before the broker gives up on it (and its connection), so a
/// vacuum that never answers does not stop the next ones.
const VACUUM_TIMEOUT: Duration = Duration::from_secs(600);
/// How often, at most, one broker walks the unique keys for holds that ended; how many
/// keys one statement examines, and how many statements one round sends at most. A
/// round examines at most 10,000 keys, and the next goes on where it stopped.
const PRUNE_KEYS_EVERY_MS: Millis = 60_000;
const KEYS_PER_CHUNK: i64 = 1000;
const CHUNKS_PER_ROUND: usize = 10;

impl PgBroker {
    /// Counts `claimed` jobs towards the next vacuum, and starts it in the background when
    /// it is due (see [`PgOptions::vacuum_after`](crate::PgOptions::vacuum_after)).
    pub(super) fn count_claims(&self, claimed: usize) {
        let Some(after) = self.inner.options.vacuum_after else {
            return;
        };
        let pace = &self.inner.vacuum_pace;
        if pace.denied.load(Ordering::Relaxed) {
            return;
        }
        let since = pace.claimed.fetch_add(claimed as u64, Ordering::Relaxed) + claimed as u64;
        if since < after || !pace.not_before_passed() || pace.running.swap(true, Ordering::AcqRel) {
            return;
        }
        pace.claimed.store(0, Ordering::Relaxed);
        let broker = self.clone();
        tokio::spawn(async move { broker.vacuum().await });
    }

    /// Runs one vacuum of the jobs table, then sets when the next may start.
    async fn vacuum(&self) {
        let started = Instant::now();
        let result = match self.inner.vacuum.get().await {
            Ok(mut held) => {
                if !self.vacuum_allowed(&mut held).await {
                    drop(held);
                    let pace = &self.inner.vacuum_pace;
                    pace.denied.store(true, Ordering::Relaxed);
                    pace.running.store(false, Ordering::Release);
                    return;
                }
                // Unprepared: a VACUUM is run once in a while, never cached.
                let run = sqlx::query(&self.inner.sql.vacuum)
                    .persistent(false)
                    .execute(held.conn());
                match tokio::time::timeout(VACUUM_TIMEOUT, run).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => {
                        held.check(&e);
                        Err(Error::broker("vacuuming the jobs table", e))
                    }
                    Err(_) => {
                        // The statement may still be running: the connection is dropped,
                        // and with it the server's session.
                        held.discard();
                        Err(Error::broker_msg(format!(
                            "vacuuming the jobs table: no answer in {VACUUM_TIMEOUT:?}"
                        )))
                    }
                }
            }
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "vacuum of the jobs table failed; claims go on");
        }
        let took = started.elapsed();
        tracing::debug!(took_ms = took.as_millis() as u64, "vacuumed the jobs table");
        let pace = &self.inner.vacuum_pace;
        *pace.not_before.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Instant::now() + (took * VACUUM_GAP_FACTOR).max(VACUUM_MIN_GAP));
        pace.running.store(false, Ordering::Release);
    }

    /// Whether this broker's role may vacuum the jobs table, asked once per broker. When it
    /// may not, says so once and leaves the table to autovacuum; an error asking counts as
    /// allowed (the vacuum itself then reports it).
    async fn vacuum_allowed(&self, held: &mut Held<'_>) -> bool {
        if self.inner.vacuum_pace.checked.swap(true, Ordering::Relaxed) {
            return true;
        }
        match sqlx::query_scalar::<_, bool>(&self.inner.sql.vacuum_allowed)
            .persistent(false)
            .fetch_one(held.conn())
            .await
        {
            Ok(true) => true,
            Ok(false) => {
                tracing::warn!(
                    schema = %self.inner.options.schema,
                    "this role does not own the jobs table, so it cannot vacuum it: \
                     vacuuming is left to autovacuum (PgOptions::vacuum_after)"
                );
                false
            }
            Err(e) => {
                held.check(&e);
                true
            }
        }
    }

    /// Prunes completed jobs past their retention, when that is due.
    pub(super) async fn prune(&self, conn: &mut PgConnection, now_hint: Millis) -> Result<()> {
        if let Some(keep) = self.inner.options.keep_completed {
            if self.inner.prune_pace.due(now_hint) {
                sqlx::query(&self.inner.sql.prune_completed)
                    .bind(self.now())
                    .bind(keep.as_millis() as i64)
                    .execute(&mut *conn)
                    .await
                    .map_err(db_err("pruning completed jobs"))?;
            }
        }
        Ok(())
    }
}

/// When the broker may vacuum next: claims counted since the last vacuum, whether one is
/// running, and the earliest time the next may start.
#[derive(Debug, Default)]
pub(super) struct VacuumPace {
    claimed: AtomicU64,
    running: AtomicBool,
    /// Whether the role's right to vacuum was asked, and the answer was no.
    checked: AtomicBool,
    denied: AtomicBool,
    not_before: std::sync::Mutex<Option<Instant>>,
}

impl VacuumPace {
    fn not_before_passed(&self) -> bool {
        self.not_before
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none_or(|t| Instant::now() >= t)
    }
}

impl PgBroker {
    /// Starts a round of [`prune_keys`](Self::prune_keys) in the background when one is
    /// due and none is running. Keys held by no one cost nothing but room, so they go
    /// at a walk, off the path of fetches, and fetches never wait on them.
    pub(super) fn prune_keys_when_due(&self, now_hint: Millis) {
        let prune = &self.inner.key_prune;
        if !prune.pace.due(now_hint) || prune.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let broker = self.clone();
        tokio::spawn(async move {
            let round = broker.answered("pruning unique keys", broker.prune_keys());
            match round.await {
                Ok(deleted) => tracing::debug!(deleted, "pruned unique keys"),
                Err(e) => tracing::warn!(error = %e, "pruning unique keys failed; enqueues go on"),
            }
            match broker
                .answered("sweeping ordering keys", broker.unblock_stuck())
                .await
            {
                Ok(0) => {}
                Ok(n) => tracing::info!(n, "unblocked the next jobs of keys left blocked"),
                Err(e) => tracing::warn!(error = %e, "sweeping ordering keys failed"),
            }
            match broker
                .answered("sweeping groups", broker.sweep_groups())
                .await
            {
                Ok(0) => {}
                Ok(n) => tracing::info!(n, "enqueued completion jobs of groups left unfired"),
                Err(e) => tracing::warn!(error = %e, "sweeping groups failed"),
            }
            broker
                .inner
                .key_prune
                .running
                .store(false, Ordering::Release);
        });
    }

    /// One round of pruning: walks the keys in the order of their primary key from where
    /// the last round stopped, a chunk per statement (prune_unique.sql), deleting those
    /// whose hold has ended, until the walk reaches the end (the next starts over) or
    /// [`CHUNKS_PER_ROUND`] chunks were examined. Returns how many keys it deleted. Each
    /// chunk takes a connection of its own, so enqueues wait at most for one chunk.
    async fn prune_keys(&self) -> Result<u64> {
        let prune = &self.inner.key_prune;
        let mut after = prune
            .after
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut deleted = 0;
        for _ in 0..CHUNKS_PER_ROUND {
            let mut held = self.inner.conns.get().await?;
            let (examined, gone, last_queue, last_key): (i64, i64, Option<String>, Option<String>) =
                sqlx::query_as(&self.inner.sql.prune_unique)
                    .bind(self.now())
                    .bind(&after.0)
                    .bind(&after.1)
                    .bind(KEYS_PER_CHUNK)
                    .fetch_one(held.conn())
                    .await
                    .map_err(|e| held.fail("pruning unique keys", e))?;
            deleted += gone as u64;
            match (last_queue, last_key) {
                (Some(queue), Some(key)) if examined >= KEYS_PER_CHUNK => after = (queue, key),
                _ => {
                    after = Default::default();
                    break;
                }
            }
        }
        *prune.after.lock().unwrap_or_else(|p| p.into_inner()) = after;
        Ok(deleted)
    }
}

/// When the broker prunes unique keys next, whether a round is running, and where the
/// walk of the keys stands: the last (queue, key) examined, or empty for the start.
#[derive(Debug)]
pub(super) struct KeyPrune {
    pace: Pace,
    running: AtomicBool,
    after: Mutex<(String, String)>,
}

impl Default for KeyPrune {
    fn default() -> Self {
        KeyPrune {
            pace: Pace::new(PRUNE_KEYS_EVERY_MS),
            running: AtomicBool::new(false),
            after: Mutex::default(),
        }
    }
}
