//! The operator calls besides listing: dead letters re-driven or discarded, queues paused
//! and resumed for every worker of the schema, and the names and statistics of queues
//! (rate limits are set in `rate`).

use hopper_core::admin::{QueueStatus, Selection, lag_since};
use hopper_core::registry::windows;
use hopper_core::{QueueCounts, Result};

use super::PgBroker;
use super::rate::stored_limit;
use super::registry::{bucket_ms, buckets};

/// A selection as the parameters of retry_dead.sql and discard_dead.sql: the ids, or the
/// queue and how many of its oldest.
fn chosen(which: &Selection) -> (Vec<i64>, Option<&str>, i64) {
    match which {
        Selection::Jobs(ids) => (ids.iter().map(|id| id.0).collect(), None, 0),
        Selection::Queue { queue, at_most } => (
            Vec::new(),
            Some(queue.as_str()),
            (*at_most).min(i64::MAX as usize) as i64,
        ),
    }
}

impl PgBroker {
    /// [`Broker::retry_dead`](hopper_core::Broker::retry_dead).
    pub(super) async fn retry_dead_letters(&self, which: &Selection) -> Result<u64> {
        let (ids, queue, at_most) = chosen(which);
        let mut held = self.inner.conns.get().await?;
        type Redriven = (i64, Option<bool>, Option<Vec<String>>, Option<Vec<String>>);
        let (n, _woke, queues, keys): Redriven = sqlx::query_as(&self.inner.sql.retry_dead)
            .bind(&ids)
            .bind(queue)
            .bind(at_most)
            .bind(self.now())
            .bind(&self.inner.channel)
            .fetch_one(held.conn())
            .await
            .map_err(|e| held.fail("retrying dead letters", e))?;
        if let (Some(queues), Some(keys)) = (queues, keys) {
            // Keyed jobs went back blocked: each runs once its key is free.
            let lines = queues.into_iter().zip(keys).collect();
            self.unblock(held.conn(), lines).await?;
        }
        if n > 0 {
            self.bump();
        }
        Ok(n as u64)
    }

    /// [`Broker::discard_dead`](hopper_core::Broker::discard_dead).
    pub(super) async fn discard_dead_letters(&self, which: &Selection) -> Result<u64> {
        let (ids, queue, at_most) = chosen(which);
        let mut held = self.inner.conns.get().await?;
        let done = sqlx::query(&self.inner.sql.discard_dead)
            .bind(&ids)
            .bind(queue)
            .bind(at_most)
            .execute(held.conn())
            .await
            .map_err(|e| held.fail("discarding dead letters", e))?;
        Ok(done.rows_affected())
    }

    /// [`Broker::set_paused`](hopper_core::Broker::set_paused), the name already checked.
    pub(super) async fn pause_queue(&self, queue: &str, paused: bool) -> Result<bool> {
        let mut held = self.inner.conns.get().await?;
        if paused {
            let added: Option<String> = sqlx::query_scalar(&self.inner.sql.pause)
                .bind(queue)
                .bind(self.now())
                .fetch_optional(held.conn())
                .await
                .map_err(|e| held.fail("pausing a queue", e))?;
            return Ok(added.is_some());
        }
        let (n, _woke): (i64, Option<bool>) = sqlx::query_as(&self.inner.sql.resume)
            .bind(queue)
            .bind(&self.inner.channel)
            .fetch_one(held.conn())
            .await
            .map_err(|e| held.fail("resuming a queue", e))?;
        if n > 0 {
            self.bump();
        }
        Ok(n > 0)
    }

    /// [`Broker::queues`](hopper_core::Broker::queues).
    pub(super) async fn queue_names(&self) -> Result<Vec<String>> {
        let mut held = self.inner.conns.get().await?;
        sqlx::query_scalar(&self.inner.sql.queues)
            .fetch_all(held.conn())
            .await
            .map_err(|e| held.fail("listing queues", e))
    }

    /// [`Broker::queue_stats`](hopper_core::Broker::queue_stats) (`bound` None) and
    /// [`Broker::queue_glance`](hopper_core::Broker::queue_glance): the counts, each state
    /// counted no further than `bound + 1` jobs where bounded, and the last minute's and
    /// hour's throughput summed from the queue's buckets.
    pub(super) async fn queue_status(
        &self,
        queue: &str,
        bound: Option<u64>,
    ) -> Result<QueueStatus> {
        // The counts, paused, oldest_due, now, the buckets' starts and counts, then the
        // rate limit's starts per window, window and whether it holds per key.
        type Row = (
            i64,
            i64,
            i64,
            i64,
            bool,
            Option<i64>,
            i64,
            V,
            V,
            V,
            V,
            L,
            Option<i64>,
            Option<bool>,
        );
        type V = Vec<i64>;
        type L = Option<i32>;
        // How many jobs each count reads at most: one past the bound says "more".
        let limit = bound.map(|b| i64::try_from(b.saturating_add(1)).unwrap_or(i64::MAX));
        let mut held = self.inner.conns.get().await?;
        let row: Row = sqlx::query_as(&self.inner.sql.queue_stats)
            .bind(queue)
            .bind(self.now())
            .bind(bucket_ms())
            .bind(limit)
            .fetch_one(held.conn())
            .await
            .map_err(|e| held.fail("reading queue statistics", e))?;
        let (pending, scheduled, leased, dead, paused, oldest_due, now, ..) = row;
        let kept = buckets(&row.7, &row.8, &row.9, &row.10);
        let (last_minute, last_hour) = windows(&kept, now);
        Ok(QueueStatus {
            queue: queue.to_owned(),
            counts: QueueCounts {
                pending: pending as u64,
                scheduled: scheduled as u64,
                leased: leased as u64,
                dead: dead as u64,
            },
            paused,
            lag: lag_since(oldest_due, now),
            last_minute: Some(last_minute),
            last_hour: Some(last_hour),
            bound,
            consumers: None,
            rate_limit: stored_limit(queue, row.11, row.12)
                .map(|l| if row.13 == Some(true) { l.per_key() } else { l }),
        })
    }
}
