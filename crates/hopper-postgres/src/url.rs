//! Broker URLs: `postgres://user:password@host:port/db?schema=name`. The `schema` parameter
//! is Hopper's own and is removed before the URL reaches the driver.

use std::str::FromStr;

use hopper_core::{ConfigError, Error, Result, redact_url as redact};
use sqlx::postgres::{PgConnectOptions, PgConnection};

#[derive(Debug, Clone)]
pub(crate) struct BrokerUrl {
    pub(crate) options: PgConnectOptions,
    pub(crate) schema: Option<String>,
    /// The URL as it may be printed: password replaced by `***`.
    pub(crate) shown: String,
}

impl BrokerUrl {
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let shown = redact(url);
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (url, None),
        };
        let mut schema = None;
        let mut kept = Vec::new();
        for pair in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|p| !p.is_empty())
        {
            match pair.split_once('=') {
                Some(("schema", value)) => schema = Some(value.to_owned()),
                _ => kept.push(pair),
            }
        }
        let driver_url = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        let options = PgConnectOptions::from_str(&driver_url).map_err(|e| {
            Error::Config(ConfigError::new(
                "broker URL",
                &shown,
                format!("postgres://user:password@host:port/database[?schema=name] ({e})"),
            ))
        })?;
        Ok(BrokerUrl {
            options,
            schema,
            shown,
        })
    }

    pub(crate) async fn connect(&self) -> Result<PgConnection> {
        crate::conn::connect(&self.options, &self.shown).await
    }
}
