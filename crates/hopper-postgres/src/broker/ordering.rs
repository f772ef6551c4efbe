//! Ordering keys ([`hopper_core::job::ordering`]): a batch with keyed jobs goes through
//! enqueue_ordered.sql, which stores them blocked and frees each key's first; when a keyed
//! job ends, the settlement's own statement (settle.sql) frees the next, and the reaper's,
//! a cancel's or a re-drive's is followed by unblock.sql. All take the keys' locks before they read, so a
//! producer and a settlement of the same key never both miss the job between them (see
//! 0010_ordering_keys.sql).

use hopper_core::Result;
use sqlx::postgres::PgConnection;

use super::{PgBroker, db_err};

impl PgBroker {
    /// Unblocks the next job of each of `lines` (queue, key) whose job ended, waking the
    /// workers when one was. The reaper, a cancel and a re-drive call it after their own
    /// statement committed: a process that dies between the two leaves the key's next job
    /// blocked until the next job of the key ends or the keys are swept
    /// ([`PgBroker::unblock_stuck`]).
    pub(super) async fn unblock(
        &self,
        conn: &mut PgConnection,
        lines: Vec<(String, String)>,
    ) -> Result<()> {
        let (queues, keys): (Vec<String>, Vec<String>) = lines.into_iter().unzip();
        let (n, _woke): (i32, Option<bool>) = sqlx::query_as(&self.inner.sql.unblock)
            .bind(&queues)
            .bind(&keys)
            .bind(&self.inner.channel)
            .bind(self.now())
            .fetch_one(conn)
            .await
            .map_err(db_err("unblocking the next jobs of ordering keys"))?;
        if n > 0 {
            self.bump();
        }
        Ok(())
    }
}

/// How many keys one sweep unblocks at most.
const STUCK_PER_SWEEP: i64 = 1000;

impl PgBroker {
    /// Unblocks the next jobs of keys left with blocked jobs only, as a process that died
    /// between a reap, cancel or re-drive and its [`unblock`](Self::unblock) leaves them: at most
    /// [`STUCK_PER_SWEEP`] keys, from the background round that prunes unique keys (at
    /// most once a minute). Returns how many jobs it unblocked.
    pub(super) async fn unblock_stuck(&self) -> Result<u64> {
        let mut held = self.inner.conns.get().await?;
        let n: Option<i32> = sqlx::query_scalar(&self.inner.sql.unblock_stuck)
            .bind(STUCK_PER_SWEEP)
            .bind(self.now())
            .fetch_one(held.conn())
            .await
            .map_err(db_err("sweeping ordering keys"))?;
        let n = n.unwrap_or(0).max(0) as u64;
        if n > 0 {
            self.bump();
        }
        Ok(n)
    }
}
