//! The calls that serve operators and tests: cancel, one job's record, a queue's counts,
//! its dead letters, and purging it.

use hopper_core::{CancelOutcome, JobId, JobRecord, LeaseId, QueueCounts, Result};

use super::rows::record_from_row;
use super::{PgBroker, db_err};

impl PgBroker {
    /// [`Broker::cancel`](hopper_core::Broker::cancel).
    pub(super) async fn cancel_job(&self, id: JobId) -> Result<CancelOutcome> {
        let mut held = self.inner.conns.get().await?;
        let cancelled: Option<(i64, Option<String>, Option<String>, bool)> =
            sqlx::query_as(&self.inner.sql.cancel)
                .bind(id.0)
                .bind(self.now())
                .bind(&self.inner.channel)
                .fetch_optional(held.conn())
                .await
                .map_err(|e| held.fail("cancelling a job", e))?;
        if let Some((_, queue, key, fired)) = cancelled {
            if fired {
                // The last member of a sealed group: its completion job was enqueued.
                self.bump();
            }
            if let (Some(queue), Some(key)) = (queue, key) {
                self.unblock(held.conn(), vec![(queue, key)]).await?;
            }
            return Ok(CancelOutcome::Cancelled);
        }
        let row: Option<(i16, Option<i64>)> = sqlx::query_as(&self.inner.sql.job_lease)
            .bind(id.0)
            .fetch_optional(held.conn())
            .await
            .map_err(|e| held.fail("reading a job's lease", e))?;
        Ok(match row {
            Some((1, Some(lease))) => CancelOutcome::Held(LeaseId(lease)),
            _ => CancelOutcome::NotFound,
        })
    }

    /// [`Broker::job`](hopper_core::Broker::job).
    pub(super) async fn read_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        let mut held = self.inner.conns.get().await?;
        let row = sqlx::query(&self.inner.sql.job_record)
            .bind(id.0)
            .fetch_optional(held.conn())
            .await
            .map_err(|e| held.fail("reading a job", e))?;
        row.as_ref()
            .map(record_from_row)
            .transpose()
            .map_err(db_err("decoding a job"))
    }

    /// [`Broker::counts`](hopper_core::Broker::counts).
    pub(super) async fn count_jobs(&self, queue: &str) -> Result<QueueCounts> {
        let mut held = self.inner.conns.get().await?;
        let (pending, scheduled, leased, dead): (i64, i64, i64, i64) =
            sqlx::query_as(&self.inner.sql.counts)
                .bind(queue)
                .bind(self.now())
                .fetch_one(held.conn())
                .await
                .map_err(|e| held.fail("counting jobs", e))?;
        Ok(QueueCounts {
            pending: pending as u64,
            scheduled: scheduled as u64,
            leased: leased as u64,
            dead: dead as u64,
        })
    }

    /// [`Broker::dead_letters`](hopper_core::Broker::dead_letters).
    pub(super) async fn list_dead_letters(
        &self,
        queue: &str,
        limit: usize,
    ) -> Result<Vec<JobRecord>> {
        let mut held = self.inner.conns.get().await?;
        let rows = sqlx::query(&self.inner.sql.dead_letters)
            .bind(queue)
            .bind(limit.min(i64::MAX as usize) as i64)
            .fetch_all(held.conn())
            .await
            .map_err(|e| held.fail("listing dead letters", e))?;
        rows.iter()
            .map(record_from_row)
            .collect::<Result<_, _>>()
            .map_err(db_err("decoding dead letters"))
    }

    /// [`Broker::purge`](hopper_core::Broker::purge).
    pub(super) async fn purge_queue(&self, queue: &str) -> Result<u64> {
        let mut held = self.inner.conns.get().await?;
        let (n, fired): (i64, bool) = sqlx::query_as(&self.inner.sql.purge)
            .bind(queue)
            .bind(self.now())
            .bind(&self.inner.channel)
            .fetch_one(held.conn())
            .await
            .map_err(|e| held.fail("purging a queue", e))?;
        if fired {
            // Purged members completed a group: its completion job was enqueued.
            self.bump();
        }
        Ok(n.max(0) as u64)
    }
}
