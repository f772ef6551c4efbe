//! Hopper: background jobs and messages for Rust. Producers put jobs on named queues held
//! by a broker; workers take them in batches sized to keep every slot busy without
//! hoarding, run them on a bounded pool, and settle each one.
//!
//! # Layout
//! This crate is the front door. At its root: what a program that enqueues and works jobs
//! uses (jobs, the [`Worker`] and its options, the [`Broker`] handle and what it reports,
//! errors), each broker behind its feature, and [`connect`], which opens a broker by URL.
//! - [`broker`]: the kit for writing a broker crate (fetch requests, settlements, leases,
//!   held copies of jobs, the clock); a program that only enqueues and works jobs does not
//!   need it.
//! - [`memory`]: the in-process broker's topics.
//! - [`worker`]: the worker's limits and defaults, as constants.
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
pub use hopper_core::admin;
pub use hopper_core::group;
pub use hopper_core::registry;
pub use hopper_core::{
    AdminCalls, AttemptError, Broker, CancelOutcome, Capabilities, Chain, ConfigError, Cursor,
    Enqueued, Error, GroupOutcome, GroupStatus, Job, JobContext, JobError, JobId, JobPage,
    JobQuery, JobRecord, JobResult, JobState, Limits, ListState, MemoryBroker, Missed, NewJob,
    Prefetch, QueueCounts, QueueOptions, QueueStats, QueueStatus, RateLimit, Result, RetryPolicy,
    RunAt, Schedule, ScheduleBeat, ScheduleInfo, Selection, Throughput, UniqueKey, UniqueScope,
    Worker, WorkerBuilder, WorkerCounts, WorkerInfo, WorkerStats, redact_url, sample_queue_metrics,
    set_queue_gauges,
};
#[cfg(feature = "mysql")]
pub use hopper_mysql::{MySqlBroker, MySqlOptions};
#[cfg(feature = "postgres")]
pub use hopper_postgres::{PgBroker, PgOptions};
#[cfg(feature = "sqlite")]
pub use hopper_sqlite::SqliteBroker;

pub mod broker {
    //! The kit for broker crates: what a [`Broker`] implementation takes and returns
    //! (fetch requests with their budgets, leases, settlements and their outcomes), the
    //! copies of held jobs a broker keeps, the adaptive sizer, the clock brokers read, and
    //! helpers for times and headers. Programs that enqueue and work jobs do not need it.
    pub use hopper_core::broker::*;
    pub use hopper_core::clock::{Clock, Pace};
    pub use hopper_core::job::{
        DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_PAYLOAD, MAX_ATTEMPTS, MAX_DELAY, MAX_HEADER_NAME,
        MAX_HEADERS_BYTES, MAX_PAYLOAD_LIMIT, MAX_RUN_AT, MAX_UNIQUE_KEY, MIN_RUN_AT, Millis,
        earlier_with_key, from_millis, headers_from_json, to_millis, validate_queue_name,
    };
    pub use hopper_core::{AutoSizer, JobCopy, LeaseId};
}

pub mod memory {
    //! The in-process broker and its topics: publish once, many subscriptions.
    pub use hopper_core::memory::{MemoryBroker, Subscription, Topic};
}

pub mod worker {
    //! The worker's limits and defaults.
    pub use hopper_core::worker::{
        DEFAULT_BATCH_WAIT, DEFAULT_MAX_BATCH, HANDOFF_MAX, MAX_BATCH_LIMIT, MAX_FETCHES_IN_FLIGHT,
        POOL_KEEP_ALIVE, SIZES_KEPT, STOP_SETTLE_LIMIT,
    };
}

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

/// Each broker's URL schemes, the feature that builds it in, and whether this build has it.
type FeatureTable = [(&'static [&'static str], &'static str, bool)];

const FEATURES: &FeatureTable = &[
    (&["sqlite"], "sqlite", cfg!(feature = "sqlite")),
    (
        &["postgres", "postgresql"],
        "postgres",
        cfg!(feature = "postgres"),
    ),
    (&["mysql", "mariadb"], "mysql", cfg!(feature = "mysql")),
    (&["amqp"], "amqp", cfg!(feature = "amqp")),
];

/// The feature `url`'s broker needs, when this build left it out.
fn left_out(url: &str, table: &FeatureTable) -> Option<&'static str> {
    let (scheme, _) = url.split_once("://")?;
    table
        .iter()
        .find(|(schemes, _, on)| !on && schemes.contains(&scheme))
        .map(|(_, feature, _)| *feature)
}

fn refuse(url: &str) -> Error {
    let allowed = match left_out(url, FEATURES) {
        Some(feature) => format!(
            "a build with the hopper crate's `{feature}` feature (hopper = {{ version = \"0.1\", \
             features = [\"{feature}\"] }}); this build connects to {}",
            supported_schemes()
        ),
        None => format!("one of {}", supported_schemes()),
    };
    Error::Config(ConfigError::new("broker URL", redact_url(url), allowed))
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

    #[test]
    fn a_url_of_a_feature_left_out_names_the_feature() {
        let table: &FeatureTable = &[
            (&["postgres", "postgresql"], "postgres", false),
            (&["amqp"], "amqp", true),
        ];
        assert_eq!(
            left_out("postgresql://u:pw@host/db", table),
            Some("postgres")
        );
        assert_eq!(left_out("amqp://guest:guest@host:5672/%2f", table), None);
        assert_eq!(left_out("redis://host/0", table), None);
        assert_eq!(left_out("postgres:/host/db", table), None);
        // The message of this build, for a scheme it left out or for an unknown one.
        let err = refuse("postgres://u:pw@host/db").to_string();
        if cfg!(feature = "postgres") {
            assert!(
                err.ends_with(&format!("one of {}", supported_schemes())),
                "{err}"
            );
        } else {
            assert!(err.contains("`postgres` feature"), "{err}");
        }
        assert!(!err.contains("pw"), "{err}");
    }
}
