//! Broker URLs: `mysql://user:password@host:port/database` (or `mariadb://…`). The URL
//! as shown anywhere has its password replaced by `***`.

use std::str::FromStr;
use std::time::Duration;

use hopper_core::{ConfigError, Error, Result};
use sqlx::mysql::MySqlConnectOptions;

/// The forms a broker URL may take, for refusals.
const ALLOWED: &str = "mysql://user:password@host:port/database";

/// Prepared statements each connection keeps. Statements whose text depends on a count
/// are padded to a power of two (see `sql`), which keeps the texts in use below this.
const STATEMENT_CACHE: usize = 128;

#[derive(Clone)]
pub(crate) struct BrokerUrl {
    pub(crate) options: MySqlConnectOptions,
    /// The URL as it may be printed: password replaced by `***`.
    pub(crate) shown: String,
    /// How long a new connection may go unanswered (`connect_timeout`, in seconds).
    pub(crate) connect_timeout: Duration,
    /// `max_payload`, when the URL names one.
    pub(crate) max_payload: Option<usize>,
}

impl BrokerUrl {
    /// Reads `url` through core's [`hopper_core::BrokerUrl`]; `connect_timeout` and
    /// `max_payload` are Hopper's and do not reach the driver.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let mut parsed = hopper_core::BrokerUrl::parse(url, &["mysql", "mariadb"], ALLOWED)?;
        let connect_timeout = parsed.take_connect_timeout()?;
        let max_payload = parsed.take_max_payload()?;
        let shown = parsed.shown().to_owned();
        let refuse = |why: String| Error::Config(ConfigError::new("broker URL", &shown, why));
        let options = MySqlConnectOptions::from_str(parsed.as_str())
            .map_err(|e| refuse(format!("{ALLOWED} ({})", scrub(&e.to_string(), url))))?;
        if options.get_database().is_none_or(str::is_empty) {
            return Err(refuse(format!("{ALLOWED}, naming the database")));
        }
        // UNIX_TIMESTAMP(NOW(3)) is exact only in a zone without daylight saving; UTC also
        // keeps every session of every process on the same reading.
        let options = options
            .timezone(Some("+00:00".to_owned()))
            .statement_cache_capacity(STATEMENT_CACHE);
        Ok(BrokerUrl {
            options,
            shown,
            connect_timeout,
            max_payload,
        })
    }
}

/// `text` with the URL's password, if it has one, replaced by `***`: driver messages may
/// quote the URL they could not parse.
fn scrub(text: &str, url: &str) -> String {
    let password = url
        .split_once("://")
        .map(|(_, rest)| &rest[..rest.find(['/', '?']).unwrap_or(rest.len())])
        .and_then(|authority| authority.rsplit_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, password)| password)
        .filter(|p| !p.is_empty());
    match password {
        Some(p) => text.replace(p, "***"),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::{BrokerUrl, scrub};

    #[test]
    fn refusals_name_the_url_without_its_password() {
        for bad in [
            "mysql://app:s3cret@db:notaport/jobs",
            "postgres://app:s3cret@db/jobs",
            "mysql://app:s3cret@db:3306",
        ] {
            let err = BrokerUrl::parse(bad).err().expect(bad).to_string();
            assert!(err.contains("app:***@db"), "{err}");
            assert!(!err.contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn scrub_hides_the_password() {
        assert_eq!(
            scrub("bad url mysql://a:pw@h/d", "mysql://a:pw@h/d"),
            "bad url mysql://a:***@h/d"
        );
        assert_eq!(scrub("no secret", "mysql://a@h/d"), "no secret");
    }
}
