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
//! | `postgres://user:pass@host/db[?schema=name]` | `PgBroker`, many workers on many machines | `postgres` |
//! | `mysql://user:pass@host/db` | `MySqlBroker`, MySQL 8 and MariaDB 10.6+ | `mysql` |
//! | `amqp://user:pass@host:5672/vhost[?prefetch=N&declare=true]` | `AmqpBroker`, RabbitMQ | `amqp` |
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

#[cfg(feature = "amqp")]
pub use hopper_amqp::{AmqpBroker, AmqpOptions, QueueKind, QueueSettings};
pub use hopper_core::*;
#[cfg(feature = "mysql")]
pub use hopper_mysql::{MySqlBroker, MySqlOptions};
#[cfg(feature = "postgres")]
pub use hopper_postgres::{PgBroker, PgOptions};
#[cfg(feature = "sqlite")]
pub use hopper_sqlite::SqliteBroker;

/// The broker URL used when none is given: an SQLite file in the working directory.
pub const DEFAULT_BROKER_URL: &str = "sqlite://hopper.db";

/// The URL schemes this build can connect to.
pub fn supported_schemes() -> String {
    let mut schemes = vec!["memory://"];
    if cfg!(feature = "sqlite") {
        schemes.push("sqlite://PATH");
    }
    if cfg!(feature = "postgres") {
        schemes.push("postgres://USER:PASSWORD@HOST/DB[?schema=NAME]");
    }
    if cfg!(feature = "mysql") {
        schemes.push("mysql://USER:PASSWORD@HOST/DB");
    }
    if cfg!(feature = "amqp") {
        schemes.push("amqp://USER:PASSWORD@HOST:PORT/VHOST[?prefetch=N&declare=true]");
    }
    schemes.join(", ")
}

fn refuse(url: &str) -> Error {
    Error::Config(ConfigError::new(
        "broker URL",
        redact_url(url),
        format!("one of {}", supported_schemes()),
    ))
}

/// Opens the broker a URL names. Each call opens a new broker: two `memory://` calls give
/// two separate sets of queues. A SQL broker whose schema is behind this build is refused
/// with the `hopper migrate` command to run.
pub async fn connect(url: &str) -> Result<Arc<dyn Broker>> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| refuse(url))?;
    match scheme {
        "memory" if rest.is_empty() => Ok(Arc::new(MemoryBroker::new())),
        #[cfg(feature = "sqlite")]
        "sqlite" if !rest.is_empty() => Ok(Arc::new(SqliteBroker::open(rest).await?)),
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => Ok(Arc::new(PgBroker::connect(url).await?)),
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => Ok(Arc::new(MySqlBroker::connect(url).await?)),
        #[cfg(feature = "amqp")]
        "amqp" => Ok(Arc::new(AmqpBroker::connect(url).await?)),
        _ => Err(refuse(url)),
    }
}

/// Brings the broker's schema up to this build's version; returns how many migrations ran.
/// SQLite migrates itself when opened, and memory has no schema: both report 0.
pub async fn migrate(url: &str) -> Result<u32> {
    let (scheme, _) = url.split_once("://").ok_or_else(|| refuse(url))?;
    match scheme {
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => hopper_postgres::migrate(url).await,
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => hopper_mysql::migrate(url).await,
        _ => connect(url).await.map(|_| 0),
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
