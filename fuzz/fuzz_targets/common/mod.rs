//! Structured broker URLs shaped `scheme://user:SECRET@host:port/path?query#fragment`,
//! whose secret is known, so a target can assert that no message shows it.
//!
//! The secret is built of text pieces and at least one [`MARKER`]; no other part of the URL
//! holds the marker, so any shown text with the marker in it (as written or
//! percent-encoded) shows a part of the password.

#![allow(dead_code)]

use arbitrary::Arbitrary;

/// A character found nowhere in a generated URL but in its password.
pub const MARKER: &str = "\u{1F511}";
/// The marker percent-encoded, as `url` writes it back.
pub const MARKER_ENCODED: &str = "%F0%9F%94%91";

#[derive(Debug, Clone, Arbitrary)]
pub enum Scheme {
    Postgres,
    Postgresql,
    Mysql,
    Mariadb,
    Amqp,
    Amqps,
    Sqlite,
    Memory,
    Redis,
    Other(String),
}

impl Scheme {
    pub fn as_str(&self) -> &str {
        match self {
            Scheme::Postgres => "postgres",
            Scheme::Postgresql => "postgresql",
            Scheme::Mysql => "mysql",
            Scheme::Mariadb => "mariadb",
            Scheme::Amqp => "amqp",
            Scheme::Amqps => "amqps",
            Scheme::Sqlite => "sqlite",
            Scheme::Memory => "memory",
            Scheme::Redis => "redis",
            Scheme::Other(s) => s,
        }
    }
}

/// What stands between the scheme and the user: `://`, or the mistypes that the
/// redaction also handles.
#[derive(Debug, Clone, Arbitrary)]
pub enum Separator {
    Slashes,
    OneSlash,
    Colon,
}

#[derive(Debug, Clone, Arbitrary)]
pub enum Piece {
    Marker,
    Text(String),
    /// Characters that end parts of a URL, where redaction has to guess.
    Special(SpecialChar),
}

#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum SpecialChar {
    At,
    Question,
    Slash,
    Hash,
    Colon,
    Percent,
    Amp,
    Equals,
}

impl SpecialChar {
    fn as_char(self) -> char {
        match self {
            SpecialChar::At => '@',
            SpecialChar::Question => '?',
            SpecialChar::Slash => '/',
            SpecialChar::Hash => '#',
            SpecialChar::Colon => ':',
            SpecialChar::Percent => '%',
            SpecialChar::Amp => '&',
            SpecialChar::Equals => '=',
        }
    }
}

#[derive(Debug, Clone, Arbitrary)]
pub enum Host {
    Local,
    Ip4([u8; 4]),
    Name(String),
    Empty,
}

#[derive(Debug, Clone, Arbitrary)]
pub enum Port {
    None,
    Number(u16),
    Text(String),
}

#[derive(Debug, Clone, Arbitrary)]
pub struct SecretUrl {
    pub scheme: Scheme,
    pub separator: Separator,
    pub user: String,
    pub secret: Vec<Piece>,
    /// The marker is always in the secret: here, before the first piece or after it.
    pub marker_first: bool,
    pub host: Host,
    pub port: Port,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub fragment: Option<String>,
}

/// A generated URL, its secret, and the URL as `redact_url` must show it.
#[derive(Debug)]
pub struct Built {
    pub url: String,
    pub secret: String,
    /// `scheme` + separator + `user:***`, then the URL from its last `@` on: the
    /// redaction runs to the last `@` of the whole URL, since the password may hold `@`,
    /// `?` and `/` (a query with an `@` of its own hides more than the password).
    pub redacted: String,
}

/// Characters that end the user part of a URL; a user name with one of them in it makes
/// what follows something other than a password, so they are left out of users.
fn user_char(c: char) -> bool {
    !matches!(c, ':' | '/' | '?' | '#' | '@' | '\\') && !c.is_control()
}

impl SecretUrl {
    /// The URL, or `None` when a part other than the secret holds the marker.
    pub fn build(&self) -> Option<Built> {
        let mut secret = String::new();
        if self.marker_first {
            secret.push_str(MARKER);
        }
        for piece in &self.secret {
            match piece {
                Piece::Marker => secret.push_str(MARKER),
                Piece::Text(t) => secret.push_str(t),
                Piece::Special(c) => secret.push(c.as_char()),
            }
        }
        if !self.marker_first {
            secret.push_str(MARKER);
        }
        let user: String = self.user.chars().filter(|&c| user_char(c)).collect();
        let scheme = self.scheme.as_str();
        let separator = match self.separator {
            Separator::Slashes => "://",
            Separator::OneSlash => ":/",
            Separator::Colon => ":",
        };
        // A scheme is a letter, then letters, digits, `+`, `-`, `.`.
        let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if !scheme_ok {
            return None;
        }
        // After the mistypes `scheme:/` and `scheme:` (which the redaction also handles), a
        // `:/` or `://` in the password reads as the end of the scheme: a password with a
        // `/` is not this shape there.
        if !matches!(self.separator, Separator::Slashes) && secret.contains('/') {
            return None;
        }
        let host = match &self.host {
            Host::Local => "127.0.0.1".to_owned(),
            Host::Ip4(ip) => format!("{}.{}.{}.{}", ip[0], ip[1], ip[2], ip[3]),
            Host::Name(n) => n.clone(),
            Host::Empty => String::new(),
        };
        let port = match &self.port {
            Port::None => String::new(),
            Port::Number(n) => format!(":{n}"),
            Port::Text(t) => format!(":{t}"),
        };
        let mut rest = format!("{host}{port}");
        if !self.path.is_empty() {
            rest.push('/');
            rest.push_str(&self.path);
        }
        if !self.query.is_empty() {
            rest.push('?');
            let pairs: Vec<String> = self.query.iter().map(|(k, v)| format!("{k}={v}")).collect();
            rest.push_str(&pairs.join("&"));
        }
        if let Some(f) = &self.fragment {
            rest.push('#');
            rest.push_str(f);
        }
        // And the host, path and query of a mistyped URL hold no `:/` of their own, which
        // would read as the end of its scheme. (An `@` there is fine: the redaction runs to
        // the last `@`, hiding more.)
        if !matches!(self.separator, Separator::Slashes) && rest.contains(":/") {
            return None;
        }
        let url = format!("{scheme}{separator}{user}:{secret}@{rest}");
        let outside = format!("{scheme}{separator}{user}:@{rest}");
        if shows_secret(&outside) {
            return None;
        }
        let last_at = url.rfind('@').expect("the secret ends at an `@`");
        let redacted = format!("{scheme}{separator}{user}:***{}", &url[last_at..]);
        Some(Built {
            url,
            secret,
            redacted,
        })
    }
}

/// Whether `text` holds the marker, as written or percent-encoded (any case).
pub fn shows_secret(text: &str) -> bool {
    text.contains(MARKER) || text.to_ascii_uppercase().contains(MARKER_ENCODED)
}

/// Panics, showing the URL and the text, when `text` shows part of the secret.
#[track_caller]
pub fn assert_hidden(what: &str, url: &Built, text: &str) {
    assert!(
        !shows_secret(text),
        "{what} shows the password\n  url:    {:?}\n  secret: {:?}\n  shown:  {:?}",
        url.url,
        url.secret,
        text
    );
}
