//! Settling: acks, retries, dead letters, releases, snoozes and cancels of any mix in one
//! statement, each applied only while its job is still held under the named lease.

use std::collections::HashSet;

use hopper_core::admin::{ERROR_HISTORY, MAX_ERROR_BYTES, bounded_error};
use hopper_core::{JobId, Outcome, Result, SettleReport, Settlement};

use super::PgBroker;

impl PgBroker {
    /// [`Broker::settle`](hopper_core::Broker::settle).
    pub(super) async fn settle_jobs(&self, settlements: &[Settlement]) -> Result<SettleReport> {
        if settlements.is_empty() {
            return Ok(SettleReport::default());
        }
        let n = settlements.len();
        let (mut ids, mut leases, mut kinds, mut delays, mut errors) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        // The history's copies of the errors too long for it (see settle.sql).
        let (mut cut_ids, mut cuts) = (Vec::new(), Vec::new());
        let mut requeues = false;
        for s in settlements {
            let (kind, delay, error) = outcome_kind(&s.outcome);
            requeues |= matches!(kind, 1 | 3 | 5 | 6);
            ids.push(s.job.0);
            leases.push(s.lease.0);
            kinds.push(kind);
            delays.push(delay);
            if let Some(long) = error.filter(|e| e.len() > MAX_ERROR_BYTES) {
                cut_ids.push(s.job.0);
                cuts.push(bounded_error(long));
            }
            errors.push(error);
        }
        let pool = if self.inner.options.durable_settlements {
            &self.inner.conns
        } else {
            &self.inner.claims
        };
        let mut held = pool.get().await?;
        let rows: Vec<Option<i64>> = sqlx::query_scalar(&self.inner.sql.settle)
            .bind(&ids)
            .bind(&leases)
            .bind(&kinds)
            .bind(&delays)
            .bind(&errors)
            .bind(self.now())
            .bind(self.inner.options.keep_completed.is_some())
            .bind(&cut_ids)
            .bind(&cuts)
            .bind(ERROR_HISTORY as i32)
            .bind(&self.inner.channel)
            .fetch_all(held.conn())
            .await
            .map_err(|e| held.fail("settling jobs", e))?;
        let mut applied = Vec::with_capacity(rows.len());
        for id in rows {
            match id {
                Some(id) => applied.push(id),
                // A NULL: a key's next job was unblocked, or a group's completion job was
                // enqueued (see settle.sql).
                None => requeues = true,
            }
        }
        drop(held);
        if requeues {
            self.bump();
        }
        let applied_set: HashSet<i64> = applied.iter().copied().collect();
        Ok(SettleReport {
            applied: applied.len(),
            fenced: ids
                .into_iter()
                .filter(|id| !applied_set.contains(id))
                .map(JobId)
                .collect(),
        })
    }
}

fn outcome_kind(o: &Outcome) -> (i16, i64, Option<&str>) {
    match o {
        Outcome::Ack => (0, 0, None),
        Outcome::Retry {
            delay,
            error,
            step_aside,
        } => {
            let kind = if *step_aside { 6 } else { 1 };
            (kind, delay.as_millis() as i64, Some(error))
        }
        Outcome::DeadLetter { error } => (2, 0, Some(error)),
        Outcome::Release => (3, 0, None),
        Outcome::Cancel => (4, 0, None),
        Outcome::Snooze { delay } => (5, delay.as_millis() as i64, None),
    }
}
