//! Hopper: background jobs and messages for Rust. Producers put jobs on named queues held
//! by a broker; workers take them in batches sized to keep every slot busy without
//! hoarding, run them on a bounded pool, and settle each one.
//!
//! # Layout
//! This crate is the front door: it re-exports [`hopper_core`] (jobs, the [`Worker`], the
//! in-process [`MemoryBroker`]) and each broker crate behind its feature, and [`connect`]s
//! to a broker by URL.
//!
//! | URL | broker | feature |
//! |---|---|---|
//! | `memory://` | [`MemoryBroker`], in-process, not durable | always |
//! | `sqlite://PATH` | `SqliteBroker`, one durable file (the default) | `sqlite` (default) |
//!
//! ```no_run
//! use hopper::{JobContext, NewJob, QueueOptions, Worker};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Email { to: String }
//!
//! # async fn example() -> hopper::Result<()> {
//! let broker = hopper::connect("sqlite://hopper.db").await?;
//! broker.enqueue(vec![NewJob::json("emails", &Email { to: "ada@example.com".into() })?]).await?;
//!
//! let worker = Worker::builder(broker)
//!     .queue("emails", QueueOptions::new().concurrency(10), |job: JobContext<Email>| async move {
//!         println!("sending to {}", job.payload.to);
//!         Ok(())
//!     })
//!     .start()?;
//! // … later
//! worker.shutdown().await;
//! # Ok(()) }
//! ```

use std::sync::Arc;

pub use hopper_core::*;
#[cfg(feature = "sqlite")]
pub use hopper_sqlite::SqliteBroker;

/// The broker URL used when none is given: an SQLite file in the working directory.
pub const DEFAULT_BROKER_URL: &str = "sqlite://hopper.db";

/// The URL schemes this build can connect to.
pub fn supported_schemes() -> &'static str {
    if cfg!(feature = "sqlite") {
        "memory://, sqlite://PATH"
    } else {
        "memory://"
    }
}

/// Opens the broker a URL names. Each call opens a new broker: two `memory://` calls give
/// two separate sets of queues.
pub async fn connect(url: &str) -> Result<Arc<dyn Broker>> {
    let refuse = || {
        Error::Config(ConfigError::new(
            "broker URL",
            redact_url(url),
            format!("one of {}", supported_schemes()),
        ))
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(refuse)?;
    match scheme {
        "memory" if rest.is_empty() => Ok(Arc::new(MemoryBroker::new())),
        #[cfg(feature = "sqlite")]
        "sqlite" if !rest.is_empty() => Ok(Arc::new(SqliteBroker::open(rest).await?)),
        _ => Err(refuse()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unknown_urls_are_refused_with_the_supported_schemes_and_no_password() {
        let err = connect("redis://u:pw@host/0")
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "invalid broker URL `redis://u:***@host/0`: allowed: one of {}",
                supported_schemes()
            )
        );
        assert!(connect("memory://").await.is_ok());
        assert!(connect("hopper.db").await.is_err());
    }
}
