//! Upkeep of the jobs table, started by fetches: vacuuming it after every so many claims
//! ([`PgOptions::vacuum_after`](crate::PgOptions::vacuum_after)), and pruning completed
//! jobs past their retention ([`PgOptions::keep_completed`](crate::PgOptions::keep_completed)).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
