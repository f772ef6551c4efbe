//! Rate limits ([`hopper_core::rate`]): at most `max` claims of a queue's jobs in any
//! window of `per`, across every worker of the schema.
//!
//! A limited queue has a row in `hopper_rate_limits` (0011_rate_limits.sql) holding its
//! limit and its window: the times of its latest claims and how many jobs each took. The
//! claim statement (claim.sql) keeps it in the same round trip. When one of the queues
//! asked has a row, it calls `hopper_rate_take`, which locks those rows in queue order
//! and gives each queue's room at the claim's time; the budgets are cut to it; and once
//! the jobs are claimed `hopper_rate_record` appends what each queue took and drops what
//! left its window. A claimer that waits for the lock reads the window its predecessor
//! left, so claims from any number of processes never start more than the limit between
//! them. When a full window cut a budget, the claim's next due time is when that window
//! has room again. A claim of queues without a limit pays one probe of the table's key
//! and runs neither function (the two are PL/pgSQL so that such a claim never starts
//! their work: measured, the same work written into the claim's own plan cost every claim
//! 0.1 ms, against 0.03 ms now).
//!
//! Setting the limit writes the row here, keeping the window (set_rate_limit.sql);
//! lifting it deletes the row (lift_rate_limit.sql). Both wake the workers, of this
//! process and, by NOTIFY, of the others, so a raised or lifted limit is used at once.
//! A limit or window another program stored wrong is read as the nearest good one; the
//! claim reports it and the broker logs it ([`broken_limit`]).

use std::time::Duration;

use hopper_core::{RateLimit, Result};

use super::PgBroker;

impl PgBroker {
    /// [`Broker::set_rate_limit`](hopper_core::Broker::set_rate_limit), the name already
    /// checked.
    pub(super) async fn limit_rate(&self, queue: &str, limit: Option<RateLimit>) -> Result<()> {
        let mut held = self.inner.conns.get().await?;
        match limit {
            Some(limit) => {
                let per_ms = i64::try_from(limit.per.as_millis()).unwrap_or(i64::MAX);
                sqlx::query(&self.inner.sql.set_rate_limit)
                    .bind(queue)
                    .bind(limit.max as i32)
                    .bind(per_ms)
                    .bind(&self.inner.channel)
                    .bind(limit.per_key)
                    .execute(held.conn())
                    .await
                    .map_err(|e| held.fail("setting a rate limit", e))?;
            }
            None => {
                sqlx::query(&self.inner.sql.lift_rate_limit)
                    .bind(queue)
                    .bind(&self.inner.channel)
                    .execute(held.conn())
                    .await
                    .map_err(|e| held.fail("lifting a rate limit", e))?;
            }
        }
        // The workers of this process wake without waiting for the NOTIFY to come back
        // (and when the broker does not listen).
        self.bump();
        Ok(())
    }
}

/// A limit as stored (starts per window, the window in ms), for the queue's statistics.
/// One the table's checks should have refused (another program changed them) is logged
/// and shown as none: the statistics of the rest must not fail for it.
pub(super) fn stored_limit(
    queue: &str,
    max: Option<i32>,
    per_ms: Option<i64>,
) -> Option<RateLimit> {
    let (max, per_ms) = (max?, per_ms?);
    let limit = match (u32::try_from(max), u64::try_from(per_ms)) {
        (Ok(max), Ok(per)) => RateLimit::new(max, Duration::from_millis(per)).ok(),
        _ => None,
    };
    if limit.is_none() {
        tracing::warn!(
            queue,
            max,
            per_ms,
            "a stored rate limit is out of range; not shown"
        );
    }
    limit
}

/// Logs a limited queue whose stored limit or window the claim could not read as Hopper
/// writes them (another program wrote them): it counted the window afresh, or read the
/// limit as the nearest in range, and went on; `why` says which.
pub(super) fn broken_limit(queue: &str, why: &str) {
    tracing::error!(
        queue,
        reason = why,
        "a stored rate limit cannot be read as written"
    );
}
