//! Lease renewal: the leases of every held job in one statement.

use std::collections::HashSet;
use std::time::Duration;

use hopper_core::{LeaseId, Result};

use super::PgBroker;

impl PgBroker {
    /// [`Broker::renew`](hopper_core::Broker::renew).
    pub(super) async fn renew_leases(
        &self,
        leases: &[LeaseId],
        ttl: Duration,
    ) -> Result<Vec<LeaseId>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = leases.iter().map(|l| l.0).collect();
        // On a claim connection: a renewal lost in a server crash only shortens a lease,
        // and fencing already handles a lease that ran out (docs/design.md, "Leases and
        // fencing"), so it need not wait for the WAL flush either.
        let mut held = self.inner.claims.get().await?;
        let renewed: Vec<i64> = sqlx::query_scalar(&self.inner.sql.renew)
            .bind(&ids)
            .bind(ttl.as_millis() as i64)
            .bind(self.now())
            .fetch_all(held.conn())
            .await
            .map_err(|e| held.fail("renewing leases", e))?;
        let renewed: HashSet<i64> = renewed.into_iter().collect();
        Ok(leases
            .iter()
            .copied()
            .filter(|l| !renewed.contains(&l.0))
            .collect())
    }
}
