//! LISTEN/NOTIFY wake-ups: every enqueue notifies the schema's channel; each broker listens
//! on its own connection and bumps its wake signal, so an idle worker fetches within a
//! round trip instead of a poll tick. After the listener reconnects it bumps once more:
//! notifications sent while it was away are lost, and the catch-up fetch finds their jobs.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub(crate) fn spawn(
    options: PgConnectOptions,
    channel: String,
    wake: watch::Sender<u64>,
    shown_url: String,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        // PgListener needs a pool; one connection that never expires.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_lazy_with(options);
        let mut backoff = Duration::from_millis(100);
        loop {
            let mut listener = match PgListener::connect_with(&pool).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(url = %shown_url, error = %e, "LISTEN connection failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            };
            if let Err(e) = listener.listen(&channel).await {
                tracing::warn!(url = %shown_url, error = %e, "LISTEN failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
            backoff = Duration::from_millis(100);
            // Catch up on whatever was enqueued while no one listened.
            wake.send_modify(|n| *n = n.wrapping_add(1));
            loop {
                match listener.try_recv().await {
                    Ok(Some(_)) => wake.send_modify(|n| *n = n.wrapping_add(1)),
                    Ok(None) => {
                        // The connection dropped; try_recv reconnects and re-listens on the
                        // next call. Wake workers for what was missed meanwhile.
                        wake.send_modify(|n| *n = n.wrapping_add(1));
                    }
                    Err(e) => {
                        tracing::warn!(url = %shown_url, error = %e, "LISTEN connection lost");
                        tokio::time::sleep(backoff).await;
                        break;
                    }
                }
            }
        }
    })
}
