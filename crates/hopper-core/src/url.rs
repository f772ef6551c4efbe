//! Broker URLs as they may be shown: passwords never reach a log or an error message.

/// The URL with any password replaced by `***`: `postgres://app:s3cret@db/jobs` becomes
/// `postgres://app:***@db/jobs`.
pub fn redact_url(url: &str) -> String {
    // The `@` that ends the user info: the last one before the query, or, when a password
    // holds a `?` and none precedes it, the last one of all. A URL that does not parse is
    // redacted too: whatever a mistyped `:/` or a `/` in the password leaves.
    let before_query = url.find('?').map_or(url, |q| &url[..q]);
    let Some(at) = before_query.rfind('@').or_else(|| url.rfind('@')) else {
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
        assert_eq!(
            redact_url("postgres://u:p@h/db?note=a@b"),
            "postgres://u:***@h/db?note=a@b"
        );
        assert_eq!(redact_url("postgres:u:S3cret@h/db"), "postgres:u:***@h/db");
    }
}
