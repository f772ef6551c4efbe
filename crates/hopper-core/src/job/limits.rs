//! The ranges every job must fall in, checked once in core before any broker sees the job
//! ([`NewJob::validate_within`]), and enforced again by each broker's schema so that rows
//! written by other programs cannot hold what a worker could not read.
//!
//! | field | range |
//! |---|---|
//! | `priority` | any `i32` |
//! | `max_attempts` | 1 to [`MAX_ATTEMPTS`] |
//! | delay | at most [`MAX_DELAY`] |
//! | `run_at` | [`MIN_RUN_AT`] to [`MAX_RUN_AT`] |
//! | header names | 1 to [`MAX_HEADER_NAME`] bytes, no NUL |
//! | header values | no NUL; names and values together at most [`MAX_HEADERS_BYTES`] |
//! | ordering key | 1 to [`MAX_ORDERING_KEY`] bytes, no NUL; not with a unique key |
//! | group | 1 to [`MAX_GROUP`] bytes, no NUL; not with a unique or ordering key |
//! | unique key | 1 to [`MAX_UNIQUE_KEY`](super::MAX_UNIQUE_KEY) bytes, no NUL; a period of more than 0 and at most [`MAX_DELAY`] |
//! | payload | at most [`Limits::max_payload`], [`DEFAULT_MAX_PAYLOAD`] unless the broker is told otherwise |

use std::time::Duration;

use super::{Millis, NewJob, RunAt, to_millis, validate_queue_name};
use crate::error::{ConfigError, Error};

/// The most attempts a job may be given.
pub const MAX_ATTEMPTS: u32 = i32::MAX as u32;
/// The longest delay a job may be given: 100 years, far inside every broker's time column.
pub const MAX_DELAY: Duration = Duration::from_secs(100 * 365 * 86_400);
/// The longest header name, in bytes: what an AMQP field table can carry (a short
/// string), so a job's headers mean the same on every broker.
pub const MAX_HEADER_NAME: usize = 255;
/// The longest ordering key ([`NewJob::ordering_key`]), in bytes: as long as a unique key.
pub const MAX_ORDERING_KEY: usize = 255;

/// The longest group name ([`NewJob::group`]), in bytes: as long as a unique key.
pub const MAX_GROUP: usize = 255;

/// Checks a group's name: 1 to [`MAX_GROUP`] bytes, no NUL.
pub fn validate_group(group: &str) -> Result<(), ConfigError> {
    if group.is_empty() || group.len() > MAX_GROUP || group.contains('\0') {
        let allowed = format!("1 to {MAX_GROUP} bytes, no NUL");
        return Err(ConfigError::new("group", group.escape_debug(), allowed));
    }
    Ok(())
}
/// The most bytes a job's header names and values may hold together. Headers are
/// metadata (trace ids, tenants, reasons); a worker reads them with every job.
pub const MAX_HEADERS_BYTES: usize = 64 * 1024;
/// The latest time a job may be given to run at: the end of the year 9999, in ms.
pub const MAX_RUN_AT: Millis = 253_402_300_799_999;
/// The earliest: the start of the year 1. Any time in the past runs at once; this only
/// keeps the stored number inside what every database's date functions read.
pub const MIN_RUN_AT: Millis = -62_135_596_800_000;
/// The payload size a broker accepts unless told otherwise: 8 MiB. A job carries what a
/// handler needs to find its work; a file belongs in storage, with its key in the job.
/// MariaDB refuses statements over 16 MiB by default (`max_allowed_packet`), and so does
/// RabbitMQ 4 for messages.
pub const DEFAULT_MAX_PAYLOAD: usize = 8 << 20;
/// The largest payload limit a broker may be set to: 512 MiB.
pub const MAX_PAYLOAD_LIMIT: usize = 512 << 20;

/// What a broker accepts beyond the fixed ranges: set per broker (its options, or
/// `max_payload=` in its URL), and reported by [`Broker::limits`](crate::Broker::limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest payload, in bytes.
    pub max_payload: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_payload: DEFAULT_MAX_PAYLOAD,
        }
    }
}

impl Limits {
    /// Limits with the largest payload set to `bytes`.
    ///
    /// # Errors
    /// `max_payload` outside 1 to [`MAX_PAYLOAD_LIMIT`], named.
    pub fn max_payload(bytes: usize) -> Result<Limits, ConfigError> {
        if !(1..=MAX_PAYLOAD_LIMIT).contains(&bytes) {
            return Err(ConfigError::new(
                "max_payload",
                bytes,
                format!("1 to {MAX_PAYLOAD_LIMIT} bytes"),
            ));
        }
        Ok(Limits { max_payload: bytes })
    }

    /// Reads a `max_payload` URL parameter: bytes, or a number with `KiB` or `MiB`.
    ///
    /// # Errors
    /// A value that is not such a size, or is out of range, named.
    pub fn parse_max_payload(text: &str) -> Result<Limits, ConfigError> {
        let refuse = || {
            ConfigError::new(
                "max_payload",
                text,
                format!("bytes, or a number with KiB or MiB, up to {MAX_PAYLOAD_LIMIT} bytes"),
            )
        };
        let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
            Some(i) => text.split_at(i),
            None => (text, ""),
        };
        let scale: usize = match unit {
            "" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            _ => return Err(refuse()),
        };
        let n: usize = digits.parse().map_err(|_| refuse())?;
        let bytes = n.checked_mul(scale).ok_or_else(refuse)?;
        Limits::max_payload(bytes).map_err(|_| refuse())
    }
}

impl NewJob {
    /// [`validate_within`](NewJob::validate_within) the default [`Limits`].
    pub fn validate(&self) -> Result<(), Error> {
        self.validate_within(&Limits::default())
    }

    /// Checks what a broker must refuse, naming the setting: a bad queue name, or a value
    /// outside the ranges of this module's table.
    pub fn validate_within(&self, limits: &Limits) -> Result<(), Error> {
        validate_queue_name(&self.queue)?;
        if self.payload.len() > limits.max_payload {
            let allowed = format!(
                "at most {} bytes (the broker's max_payload)",
                limits.max_payload
            );
            return Err(ConfigError::new(
                "payload",
                format!("{} bytes", self.payload.len()),
                allowed,
            )
            .into());
        }
        if !(1..=MAX_ATTEMPTS).contains(&self.max_attempts) {
            let allowed = format!("1..={MAX_ATTEMPTS}");
            return Err(ConfigError::new("max_attempts", self.max_attempts, allowed).into());
        }
        match self.run_at {
            RunAt::After(d) if d > MAX_DELAY => {
                let allowed = format!("at most {} days", MAX_DELAY.as_secs() / 86_400);
                return Err(ConfigError::new("delay", format!("{d:?}"), allowed).into());
            }
            RunAt::At(t) if !(MIN_RUN_AT..=MAX_RUN_AT).contains(&to_millis(t)) => {
                let allowed = "from the year 1 to the end of the year 9999";
                return Err(ConfigError::new("run_at", format!("{t:?}"), allowed).into());
            }
            _ => {}
        }
        if let Some(unique) = &self.unique {
            unique.validate()?;
        }
        if let Some(key) = &self.ordering_key {
            if key.is_empty() || key.len() > MAX_ORDERING_KEY || key.contains('\0') {
                let allowed = format!("1 to {MAX_ORDERING_KEY} bytes, no NUL");
                return Err(ConfigError::new("ordering_key", key.escape_debug(), allowed).into());
            }
        }
        if let Some(key) = &self.rate_key {
            if key.is_empty() || key.len() > MAX_ORDERING_KEY || key.contains('\0') {
                let allowed = format!("1 to {MAX_ORDERING_KEY} bytes, no NUL");
                return Err(ConfigError::new("rate_key", key.escape_debug(), allowed).into());
            }
        }
        if let Some(group) = &self.group {
            validate_group(group)?;
            if self.unique.is_some() || self.ordering_key.is_some() {
                let allowed = "no unique or ordering key on a member of a group";
                return Err(ConfigError::new("group", group.escape_debug(), allowed).into());
            }
        }
        self.validate_headers()
    }

    fn validate_headers(&self) -> Result<(), Error> {
        let mut total = 0;
        for (k, v) in &self.headers {
            if k.is_empty() || k.len() > MAX_HEADER_NAME {
                let allowed = format!("a name of 1 to {MAX_HEADER_NAME} bytes");
                return Err(ConfigError::new("header", k.escape_debug(), allowed).into());
            }
            if k.contains('\0') || v.contains('\0') {
                let allowed = "no NUL character in a header's name or value";
                return Err(ConfigError::new("header", k.escape_debug(), allowed).into());
            }
            total += k.len() + v.len();
        }
        if total > MAX_HEADERS_BYTES {
            let allowed = format!("names and values of at most {MAX_HEADERS_BYTES} bytes together");
            return Err(ConfigError::new("headers", format!("{total} bytes"), allowed).into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    /// Values past what every broker stores are refused by name before any is written:
    /// no wrap-around into the past, no silent clamp.
    #[test]
    fn out_of_range_values_are_refused_by_name() {
        let job = || NewJob::new("q", b"x".to_vec());
        let refused = |j: NewJob| match j.validate() {
            Err(Error::Config(c)) => c.setting,
            other => panic!("not refused: {other:?}"),
        };
        assert_eq!(refused(job().max_attempts(0)), "max_attempts");
        assert_eq!(refused(job().delay(Duration::MAX)), "delay");
        assert_eq!(
            refused(job().delay(MAX_DELAY + Duration::from_millis(1))),
            "delay"
        );
        let far = SystemTime::UNIX_EPOCH + Duration::from_secs(400_000_000_000);
        assert_eq!(refused(job().run_at(far)), "run_at");
        assert_eq!(refused(job().header("a\0b", "v")), "header");
        assert_eq!(refused(job().header("k", "v\0")), "header");
        assert_eq!(refused(job().header("", "v")), "header");
        assert_eq!(refused(job().header("h".repeat(256), "v")), "header");
        let before_year_1 = SystemTime::UNIX_EPOCH - Duration::from_secs(62_135_596_801);
        assert_eq!(refused(job().run_at(before_year_1)), "run_at");
        let half = "v".repeat(MAX_HEADERS_BYTES / 2);
        assert_eq!(
            refused(job().header("a", &half).header("b", &half)),
            "headers"
        );
        let big = NewJob::new("q", vec![0; DEFAULT_MAX_PAYLOAD + 1]);
        assert_eq!(refused(big), "payload");
        for ok in [
            job().max_attempts(1),
            job().max_attempts(MAX_ATTEMPTS),
            job().delay(MAX_DELAY),
            job().header("k", "v"),
            job().header("h".repeat(255), "v"),
            job().header("a", &half[2..]).header("b", &half),
            job().run_at(SystemTime::UNIX_EPOCH - Duration::from_secs(86_400)),
            NewJob::new("q", vec![0; DEFAULT_MAX_PAYLOAD]),
        ] {
            ok.validate().unwrap();
        }
        assert_eq!(to_millis(far), 400_000_000_000_000);
        assert_eq!(
            to_millis(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::MAX / 2)),
            i64::MAX
        );
    }

    /// A broker set to a smaller limit refuses what the default accepts, and the limit
    /// reads from a URL's `max_payload` in bytes, KiB or MiB.
    #[test]
    fn the_payload_limit_is_the_brokers() {
        let small = Limits::parse_max_payload("1KiB").unwrap();
        assert_eq!(small.max_payload, 1024);
        let job = |n| NewJob::new("q", vec![0; n]);
        job(1024).validate_within(&small).unwrap();
        assert!(job(1025).validate_within(&small).is_err());
        assert_eq!(
            Limits::parse_max_payload("2MiB").unwrap().max_payload,
            2 << 20
        );
        assert_eq!(Limits::parse_max_payload("300").unwrap().max_payload, 300);
        for bad in [
            "",
            "0",
            "1GiB",
            "513MiB",
            "12kb",
            "-1",
            "99999999999999999999",
        ] {
            let e = Limits::parse_max_payload(bad).unwrap_err();
            assert_eq!((e.setting.as_str(), e.value.as_str()), ("max_payload", bad));
        }
    }
}
