//! The wake poller: MySQL has no LISTEN/NOTIFY, so a task watches `SELECT MAX(id)` on a
//! connection of its own and bumps the broker's wake signal when it moves, which means
//! another process (or this one) enqueued. It polls every `min` after a change and doubles
//! the interval up to `max` while nothing changes; the query is one index dive.
//!
//! After (re)connecting it bumps once: jobs enqueued while it could not look are found by
//! the fetch that follows. The broker aborts the task when it is dropped.

use std::time::Duration;

use sqlx::Connection;
use sqlx::mysql::MySqlConnectOptions;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::conn::open;
use crate::queries::max_id;

pub(crate) fn spawn(
    options: MySqlConnectOptions,
    shown_url: String,
    limit: Duration,
    (min, max): (Duration, Duration),
    wake: watch::Sender<u64>,
) -> JoinHandle<()> {
    let bump = move |wake: &watch::Sender<u64>| wake.send_modify(|n| *n = n.wrapping_add(1));
    tokio::spawn(async move {
        let mut interval = min;
        let mut conn = None;
        let mut last: Option<Option<i64>> = None;
        loop {
            if conn.is_none() {
                match open(&options, &shown_url, limit).await {
                    Ok(c) => {
                        conn = Some(c);
                        if last.is_some() {
                            bump(&wake);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "wake poller cannot connect; retrying");
                        tokio::time::sleep(max).await;
                        continue;
                    }
                }
            }
            let c = conn.as_mut().expect("connected above");
            match max_id(c).await {
                Ok(seen) => {
                    match last {
                        Some(before) if before == seen => interval = (interval * 2).min(max),
                        Some(_) => {
                            bump(&wake);
                            interval = min;
                        }
                        None => {}
                    }
                    last = Some(seen);
                }
                Err(e) => {
                    tracing::warn!(url = %shown_url, error = %e, "wake poller lost its connection");
                    if let Some(c) = conn.take() {
                        let _ = c.close_hard().await;
                    }
                    interval = max;
                }
            }
            tokio::time::sleep(interval).await;
        }
    })
}
