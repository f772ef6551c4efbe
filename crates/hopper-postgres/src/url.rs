//! Broker URLs: `postgres://user:password@host:port/db?schema=name`. The `schema` parameter
//! is Hopper's own and is removed before the URL reaches the driver.

use std::str::FromStr;
use std::time::Duration;

use hopper_core::{ConfigError, Error, Result};
use sqlx::postgres::{PgConnectOptions, PgConnection};

/// The form a PostgreSQL broker URL takes, for refusals.
const FORM: &str = "postgres://user:password@host:port/database[?schema=name]";

#[derive(Debug, Clone)]
pub(crate) struct BrokerUrl {
    pub(crate) options: PgConnectOptions,
    pub(crate) schema: Option<String>,
    /// `max_payload`, when the URL names one.
    pub(crate) max_payload: Option<usize>,
    /// The URL as it may be printed: password replaced by `***`.
    pub(crate) shown: String,
    /// How long a new connection may go unanswered (`connect_timeout`, in seconds).
    pub(crate) connect_timeout: Duration,
}

impl BrokerUrl {
    /// Reads `url` through core's [`hopper_core::BrokerUrl`]; `schema`,
    /// `connect_timeout` and `max_payload` are Hopper's and do not reach the driver.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let mut parsed = hopper_core::BrokerUrl::parse(url, &["postgres", "postgresql"], FORM)?;
        let schema = parsed.take("schema");
        let connect_timeout = parsed.take_connect_timeout()?;
        let max_payload = parsed.take_max_payload()?;
        let shown = parsed.shown().to_owned();
        let options = PgConnectOptions::from_str(parsed.as_str()).map_err(|e| {
            Error::Config(ConfigError::new(
                "broker URL",
                &shown,
                format!("{FORM} ({e})"),
            ))
        })?;
        Ok(BrokerUrl {
            options,
            schema,
            max_payload,
            shown,
            connect_timeout,
        })
    }

    pub(crate) async fn connect(&self) -> Result<PgConnection> {
        crate::conn::connect(&self.options, &self.shown, self.connect_timeout).await
    }
}
