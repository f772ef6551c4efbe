//! Broker URLs: read once, the same way for every broker ([`BrokerUrl`]), and shown
//! without their passwords ([`redact_url`]), which never reach a log or an error message.

use std::time::Duration;

use crate::error::ConfigError;

/// The URL with any password replaced by `***`: `postgres://app:s3cret@db/jobs` becomes
/// `postgres://app:***@db/jobs`.
pub fn redact_url(url: &str) -> String {
    // The `@` that ends the user info: the last one of all. A password may hold `@`, `?`
    // and `/`, so no `@` but the last can be known to end it; when the query holds one
    // too, more is hidden than needed, which only costs a little of what is shown. A URL
    // that does not parse is redacted too: whatever a mistyped `:/` leaves.
    let Some(at) = url.rfind('@') else {
        return url.to_owned();
    };
    let start = if let Some(i) = url[..at].find("://") {
        i + 3
    } else if let Some(i) = url[..at].find(":/") {
        i + 2
    } else {
        url[..at].find(':').map_or(0, |i| i + 1)
    };
    match url[start..at].find(':') {
        Some(colon) => format!("{}:***{}", &url[..start + colon], &url[at..]),
        None => url.to_owned(),
    }
}

/// A broker URL read once, by the `url` crate, the same way for every broker: its scheme
/// checked, the settings that are Hopper's taken out of its query, and the rest handed to
/// the driver. A URL that does not parse, or names no host, is refused showing only its
/// redacted form ([`redact_url`]): its text is never echoed, since a password may be
/// where the parser stopped.
#[derive(Debug, Clone)]
pub struct BrokerUrl {
    url: url::Url,
    shown: String,
}

/// The `connect_timeout` a URL may set, in whole seconds.
const CONNECT_TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 1..=3600;

impl BrokerUrl {
    /// Parses `raw`, which must use one of `schemes` and name a host; `form` describes the
    /// URL expected, for the refusal.
    ///
    /// # Errors
    /// A URL that does not parse, of another scheme, or without a host.
    pub fn parse(raw: &str, schemes: &[&str], form: &str) -> Result<BrokerUrl, ConfigError> {
        let shown = redact_url(raw);
        let refuse = |why: String| ConfigError::new("broker URL", &shown, why);
        let url = url::Url::parse(raw).map_err(|e| refuse(format!("{form} ({e})")))?;
        if !schemes.contains(&url.scheme()) {
            return Err(refuse(form.to_owned()));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(refuse(format!("{form} (no host)")));
        }
        Ok(BrokerUrl { url, shown })
    }

    /// The URL as it may be shown: password replaced by `***`.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The URL as it stands, Hopper's settings taken out: for the driver.
    pub fn as_str(&self) -> &str {
        self.url.as_str()
    }

    /// Takes the query parameter `key` out of the URL, returning its value.
    pub fn take(&mut self, key: &str) -> Option<String> {
        let pairs: Vec<(String, String)> = self.url.query_pairs().into_owned().collect();
        let value = pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())?;
        let rest: Vec<(String, String)> = pairs.into_iter().filter(|(k, _)| k != key).collect();
        if rest.is_empty() {
            self.url.set_query(None);
        } else {
            self.url.query_pairs_mut().clear().extend_pairs(rest);
        }
        Some(value)
    }

    /// Sets the query parameter `key` to `value` unless the URL names it already: a
    /// default the driver gets that the URL may override.
    pub fn set_default(&mut self, key: &str, value: &str) {
        if !self.url.query_pairs().any(|(k, _)| k == key) {
            self.url.query_pairs_mut().append_pair(key, value);
        }
    }

    /// Takes `max_payload` (bytes, or a number with `KiB` or `MiB`) out of the URL: the
    /// largest payload the broker accepts; `None` without it.
    ///
    /// # Errors
    /// A value that is not such a size, or is out of range, named.
    pub fn take_max_payload(&mut self) -> Result<Option<usize>, ConfigError> {
        self.take("max_payload")
            .map(|v| crate::Limits::parse_max_payload(&v).map(|l| l.max_payload))
            .transpose()
    }

    /// Takes `connect_timeout` (whole seconds, 1 to 3600) out of the URL: how long a new
    /// connection may go unanswered; [`CONNECT_TIMEOUT`](crate::CONNECT_TIMEOUT) without it.
    ///
    /// # Errors
    /// A value that is not a whole number of seconds in range, named.
    pub fn take_connect_timeout(&mut self) -> Result<Duration, ConfigError> {
        let Some(value) = self.take("connect_timeout") else {
            return Ok(crate::CONNECT_TIMEOUT);
        };
        match value.parse::<u64>() {
            Ok(s) if CONNECT_TIMEOUT_RANGE.contains(&s) => Ok(Duration::from_secs(s)),
            _ => Err(ConfigError::new(
                "connect_timeout",
                value,
                "whole seconds, 1 to 3600",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_never_survive_redaction() {
        assert_eq!(
            redact_url("postgres://app:s3cret@db:5432/jobs?schema=x"),
            "postgres://app:***@db:5432/jobs?schema=x"
        );
        assert_eq!(
            redact_url("amqp://guest:p@ss@host/"),
            "amqp://guest:***@host/"
        );
        assert_eq!(
            redact_url("amqp://guest@localhost/"),
            "amqp://guest@localhost/"
        );
        assert_eq!(redact_url("sqlite://hopper.db"), "sqlite://hopper.db");
    }

    /// URLs that do not parse still lose their passwords: a single slash after the
    /// scheme, a `/` or a `?` in the password, an `@` in the query.
    #[test]
    fn malformed_urls_lose_their_passwords_too() {
        assert_eq!(
            redact_url("postgres:/postgres:S3cretPW@127.0.0.1:5432/test"),
            "postgres:/postgres:***@127.0.0.1:5432/test"
        );
        assert_eq!(
            redact_url("postgres://postgres:S3cretPW/x@127.0.0.1:5432/test"),
            "postgres://postgres:***@127.0.0.1:5432/test"
        );
        assert_eq!(
            redact_url("mysql://root:pa?ss@db/test"),
            "mysql://root:***@db/test"
        );
        // An `@` in the query hides the URL up to it: the password may have held it.
        assert_eq!(
            redact_url("postgres://u:p@h/db?note=a@b"),
            "postgres://u:***@b"
        );
        // Found by fuzzing: a password holding `@` and then `?`.
        assert_eq!(
            redact_url("mysql://:@?k3y@127.0.0.1"),
            "mysql://:***@127.0.0.1"
        );
        assert_eq!(
            redact_url("mysql://u:p@x?y@host/db"),
            "mysql://u:***@host/db"
        );
        assert_eq!(redact_url("postgres:u:S3cret@h/db"), "postgres:u:***@h/db");
    }

    /// Read by the `url` crate: Hopper's settings come out of the query, the rest stays
    /// for the driver, and URLs that do not parse are refused showing no password.
    #[test]
    fn broker_urls_are_read_once_and_refused_without_their_passwords() {
        use super::BrokerUrl;
        let form = "postgres://user:password@host:port/database";
        let mut url = BrokerUrl::parse(
            "postgres://app:s3cret@db:5432/jobs?schema=x&connect_timeout=3&sslmode=disable",
            &["postgres", "postgresql"],
            form,
        )
        .unwrap();
        assert_eq!(url.take("schema").as_deref(), Some("x"));
        assert_eq!(url.take_connect_timeout().unwrap().as_secs(), 3);
        assert_eq!(
            url.as_str(),
            "postgres://app:s3cret@db:5432/jobs?sslmode=disable"
        );
        assert_eq!(
            url.shown(),
            "postgres://app:***@db:5432/jobs?schema=x&connect_timeout=3&sslmode=disable"
        );
        assert_eq!(url.take("schema"), None);
        assert_eq!(url.take_connect_timeout().unwrap(), crate::CONNECT_TIMEOUT);
        url.set_default("sslmode", "require");
        url.set_default("application_name", "w1");
        assert_eq!(
            url.as_str(),
            "postgres://app:s3cret@db:5432/jobs?sslmode=disable&application_name=w1"
        );

        for (raw, why) in [
            (
                "postgres:/postgres:S3cretPW@127.0.0.1:5432/test",
                "(no host)",
            ),
            (
                "postgres://postgres:S3cretPW/x@127.0.0.1:5432/test",
                "invalid port number",
            ),
            ("mysql://root:S3cretPW@db/test", form),
        ] {
            let err = BrokerUrl::parse(raw, &["postgres"], form)
                .unwrap_err()
                .to_string();
            assert!(!err.contains("S3cretPW"), "{err}");
            assert!(err.contains("***") && err.contains(why), "{err}");
        }
        let mut url =
            BrokerUrl::parse("postgres://h/db?connect_timeout=0", &["postgres"], form).unwrap();
        assert_eq!(
            url.take_connect_timeout().unwrap_err().to_string(),
            "invalid connect_timeout `0`: allowed: whole seconds, 1 to 3600"
        );
    }
}
