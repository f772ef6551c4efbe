//! Errors: [`Error`] for the library, [`ConfigError`] for refused settings.

use std::fmt;

use crate::id::JobId;

/// A setting Hopper refuses, with the value given and what it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The setting, as a user writes it (`prefetch`, `max_batch`, `queue`, …).
    pub setting: String,
    /// The value that was refused.
    pub value: String,
    /// What is allowed, or why the combination cannot work.
    pub allowed: String,
}

impl ConfigError {
    /// A refusal of `setting = value`, explained by `allowed`.
    pub fn new(
        setting: impl Into<String>,
        value: impl fmt::Display,
        allowed: impl Into<String>,
    ) -> Self {
        ConfigError {
            setting: setting.into(),
            value: value.to_string(),
            allowed: allowed.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {} `{}`: allowed: {}",
            self.setting, self.value, self.allowed
        )
    }
}

impl std::error::Error for ConfigError {}

/// Everything that can go wrong in Hopper's library calls.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting was refused; nothing was started.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A payload could not be serialised.
    #[error("payload could not be encoded: {0}")]
    Encode(String),
    /// A payload could not be decoded into the handler's type.
    #[error("payload of job {job} could not be decoded: {message}")]
    Decode {
        /// The job whose payload failed.
        job: JobId,
        /// The decoder's message.
        message: String,
    },
    /// The broker failed; the source says how. The first line carries the source's own
    /// message too (the database's, as the server put it), so a log of `{error}` alone
    /// says why, not only what the broker was doing.
    #[error("broker error: {message}{}", cause_of(source))]
    Broker {
        /// What the broker was doing and what went wrong.
        message: String,
        /// The driver's error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The broker does not offer this operation.
    #[error("{broker} broker does not support {what}")]
    NotSupported {
        /// The broker's name.
        broker: &'static str,
        /// The operation asked for.
        what: &'static str,
    },
    /// The broker or worker has shut down.
    #[error("{0} has shut down")]
    Closed(&'static str),
}

impl Error {
    /// A broker failure with a driver error inside.
    pub fn broker(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Broker {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }

    /// A broker failure described by a message only.
    pub fn broker_msg(message: impl Into<String>) -> Self {
        Error::Broker {
            message: message.into(),
            source: None,
        }
    }

    /// Whether the error is a refused setting.
    pub fn is_config(&self) -> bool {
        matches!(self, Error::Config(_))
    }

    /// Whether the error came from the broker (connection, query, file).
    pub fn is_broker(&self) -> bool {
        matches!(self, Error::Broker { .. })
    }

    /// The error and every cause under it, for a log line or a message to a person:
    /// `broker error: fetching jobs: database is locked`. The error's own `Display` gives
    /// only its first part, as Rust errors do, so that printers walking
    /// [`source`](std::error::Error::source) themselves do not repeat the causes.
    pub fn chain(&self) -> Chain<'_> {
        Chain(self)
    }
}

/// `: ` and the message of `source`, or nothing without one.
fn cause_of(source: &Option<Box<dyn std::error::Error + Send + Sync>>) -> String {
    source.as_ref().map_or(String::new(), |s| format!(": {s}"))
}

/// An error with its causes, joined by `: ` ([`Error::chain`]).
#[derive(Debug, Clone, Copy)]
pub struct Chain<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut last = self.0.to_string();
        f.write_str(&last)?;
        let mut cause = self.0.source();
        while let Some(e) = cause {
            // Drivers often end their message with their cause's (sqlx: `error returned
            // from database: <the server's message>`); that cause is not repeated.
            let text = e.to_string();
            if !last.ends_with(&text) {
                write!(f, ": {text}")?;
            }
            last = text;
            cause = e.source();
        }
        Ok(())
    }
}

/// Short for `Result<T, hopper_core::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// An error whose own cause has a cause.
    #[derive(Debug, thiserror::Error)]
    #[error("the transaction carrying it failed")]
    struct Outer(#[source] std::io::Error);

    /// An error that ends its message with its cause's, as sqlx's do.
    #[derive(Debug, thiserror::Error)]
    #[error("returned: {0}")]
    struct Outer2(#[source] std::io::Error);

    #[test]
    fn a_chain_names_every_cause_once() {
        let e = Error::broker("fetching jobs", Outer(std::io::Error::other("disk full")));
        // The first line says why as well as what: the driver's own message follows.
        assert_eq!(
            e.to_string(),
            "broker error: fetching jobs: the transaction carrying it failed"
        );
        assert_eq!(
            e.chain().to_string(),
            "broker error: fetching jobs: the transaction carrying it failed: disk full"
        );
        // A cause whose text ends its error's is not repeated.
        let e = Error::broker(
            "connecting",
            Outer2(std::io::Error::other("database \"x\" does not exist")),
        );
        assert_eq!(
            e.chain().to_string(),
            "broker error: connecting: returned: database \"x\" does not exist"
        );
        let alone = Error::broker_msg("the SQLite thread stopped while opening");
        assert_eq!(alone.chain().to_string(), alone.to_string());
    }
}
