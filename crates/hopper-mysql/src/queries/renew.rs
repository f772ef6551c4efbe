//! Lease renewal.

use std::collections::HashSet;

use hopper_core::Millis;
use sqlx::mysql::MySqlConnection;

use crate::sql::{self, MAX_LIST, padded};

/// Extends the leases that are still live to `ttl_ms` from now; returns those that are
/// live afterwards. Two statements, each committing on its own: safe to repeat.
pub(crate) async fn renew(
    conn: &mut MySqlConnection,
    leases: &[i64],
    ttl_ms: Millis,
    now: Option<Millis>,
) -> Result<HashSet<i64>, sqlx::Error> {
    let mut live = HashSet::with_capacity(leases.len());
    for chunk in leases.chunks(MAX_LIST) {
        let size = padded(chunk.len());
        let ids: Vec<i64> = (0..size)
            .map(|i| chunk.get(i).copied().unwrap_or(0))
            .collect();
        let text = sql::with_ids(&sql::RENEW, size);

        let mut query = sqlx::query(&text).bind(now).bind(ttl_ms);
        for id in &ids {
            query = query.bind(*id);
        }
        query.bind(now).execute(&mut *conn).await?;

        // Renewed rows expire `ttl` after the update's now, so they are still live at this
        // later now; rows of a lease that had expired are not.
        let text = sql::with_ids(&sql::LIVE_LEASES, size);

        let mut query = sqlx::query_scalar::<_, i64>(&text);
        for id in &ids {
            query = query.bind(*id);
        }
        live.extend(query.bind(now).fetch_all(&mut *conn).await?);
    }
    Ok(live)
}
