//! Errors: [`Error`] for the library, [`ConfigError`] for refused settings.

use std::fmt;

use crate::job::JobId;

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
    /// The broker failed; the source says how.
    #[error("broker error: {message}")]
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
}

/// Short for `Result<T, hopper_core::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
