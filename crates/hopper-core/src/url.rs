//! Broker URLs as they may be shown: passwords never reach a log or an error message.

/// The URL with any password replaced by `***`: `postgres://app:s3cret@db/jobs` becomes
/// `postgres://app:***@db/jobs`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
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
}
