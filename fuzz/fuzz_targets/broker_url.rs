//! Broker URLs: `hopper_core::BrokerUrl` (`parse`, `take`, `set_default`,
//! `take_connect_timeout`), `redact_url`, and `hopper::connect`'s refusal of URLs this
//! build cannot open (built without broker features, so it connects nowhere).
//!
//! Asserted, beyond no panic: for URLs shaped `scheme://user:SECRET@host…` (see
//! `common`), neither `redact_url`, nor `BrokerUrl::shown`, nor any error's `Display`
//! shows part of the secret, and `redact_url` hides everything from the user's `:` to the
//! last `@` of the URL; the query operations keep their contracts.

#![no_main]

mod common;

use std::time::Duration;

use arbitrary::Arbitrary;
use common::{SecretUrl, assert_hidden};
use futures_util::FutureExt;
use hopper_core::{BrokerUrl, CONNECT_TIMEOUT, redact_url};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
enum Source {
    Secret(SecretUrl),
    Raw(String),
}

#[derive(Debug, Arbitrary)]
enum Op {
    Take(Key),
    SetDefault(Key, String),
    TakeConnectTimeout,
}

#[derive(Debug, Arbitrary)]
enum Key {
    Schema,
    ConnectTimeout,
    Sslmode,
    Prefetch,
    Other(String),
}

impl Key {
    fn as_str(&self) -> &str {
        match self {
            Key::Schema => "schema",
            Key::ConnectTimeout => "connect_timeout",
            Key::Sslmode => "sslmode",
            Key::Prefetch => "prefetch",
            Key::Other(k) => k,
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Input {
    source: Source,
    /// Which schemes `parse` accepts.
    schemes: u8,
    ops: Vec<Op>,
}

const SCHEMES: [&str; 6] = [
    "postgres",
    "postgresql",
    "mysql",
    "mariadb",
    "amqp",
    "sqlite",
];
const FORM: &str = "scheme://user:password@host:port/path";

fuzz_target!(|input: Input| {
    // The operations' own keys and values are not the password.
    let op_shows = |op: &Op| match op {
        Op::Take(k) => common::shows_secret(k.as_str()),
        Op::SetDefault(k, v) => common::shows_secret(k.as_str()) || common::shows_secret(v),
        Op::TakeConnectTimeout => false,
    };
    if input.ops.iter().any(op_shows) {
        return;
    }
    let built = match &input.source {
        Source::Secret(s) => match s.build() {
            Some(b) => Some(b),
            None => return,
        },
        Source::Raw(_) => None,
    };
    let raw: &str = match (&input.source, &built) {
        (_, Some(b)) => &b.url,
        (Source::Raw(r), None) => r,
        _ => unreachable!(),
    };
    let schemes: Vec<&str> = SCHEMES
        .iter()
        .enumerate()
        .filter(|(i, _)| input.schemes & (1 << i) != 0)
        .map(|(_, s)| *s)
        .collect();

    let shown = redact_url(raw);
    // Redacting twice changes nothing more.
    assert_eq!(redact_url(&shown), shown, "raw: {raw:?}");
    if let Some(b) = &built {
        assert_hidden("redact_url", b, &shown);
        // Redaction runs to the last `@` of the whole URL.
        assert_eq!(shown, b.redacted, "raw: {raw:?}");
    }

    // The facade: a build without broker features refuses every URL but `memory://`,
    // without connecting anywhere, showing no password.
    match hopper::connect(raw).now_or_never() {
        Some(Ok(_)) => assert_eq!(raw, "memory://"),
        Some(Err(e)) => {
            assert!(e.is_config(), "{e:?}");
            if let Some(b) = &built {
                assert_hidden("hopper::connect's refusal", b, &e.to_string());
                assert_hidden("hopper::connect's refusal (Debug)", b, &format!("{e:?}"));
            }
        }
        None => panic!("hopper::connect without broker features waited: {raw:?}"),
    }

    let mut url = match BrokerUrl::parse(raw, &schemes, FORM) {
        Ok(url) => url,
        Err(e) => {
            assert_eq!(e.setting, "broker URL");
            assert_eq!(e.value, shown);
            if let Some(b) = &built {
                assert_hidden("BrokerUrl::parse's refusal", b, &e.to_string());
            }
            return;
        }
    };
    assert_eq!(url.shown(), shown);
    let parsed = url::Url::parse(url.as_str()).expect("a parsed URL reads back");
    assert!(schemes.contains(&parsed.scheme()));
    assert!(parsed.host_str().is_some_and(|h| !h.is_empty()));

    for op in &input.ops {
        match op {
            Op::Take(key) => {
                let key = key.as_str();
                let had = query_value(url.as_str(), key);
                let took = url.take(key);
                assert_eq!(took, had, "take({key:?}) of {:?}", url.as_str());
                assert_eq!(url.take(key), None, "a key is taken whole");
                assert_eq!(query_value(url.as_str(), key), None);
            }
            Op::SetDefault(key, value) => {
                let key = key.as_str();
                let had = query_value(url.as_str(), key);
                url.set_default(key, value);
                let now = query_value(url.as_str(), key);
                match had {
                    Some(v) => assert_eq!(now, Some(v)),
                    None => assert_eq!(now.as_deref(), Some(value.as_str())),
                }
            }
            Op::TakeConnectTimeout => {
                let had = query_value(url.as_str(), "connect_timeout");
                match url.take_connect_timeout() {
                    Ok(d) => match had {
                        None => assert_eq!(d, CONNECT_TIMEOUT),
                        Some(v) => {
                            assert!((1..=3600).contains(&d.as_secs()), "{v:?} gave {d:?}");
                            assert_eq!(d, Duration::from_secs(v.parse().unwrap()));
                        }
                    },
                    Err(e) => {
                        assert_eq!(e.setting, "connect_timeout");
                        assert_eq!(Some(e.value.clone()), had);
                        if let Some(b) = &built {
                            assert_hidden("take_connect_timeout's refusal", b, &e.to_string());
                        }
                    }
                }
                assert_eq!(query_value(url.as_str(), "connect_timeout"), None);
            }
        }
        // Whatever was taken or set, the URL stays one the driver can read, and what may
        // be shown does not change.
        url::Url::parse(url.as_str()).expect("the URL stays readable");
        assert_eq!(url.shown(), shown);
    }
});

/// The first value of `key` in the URL's query, as `url` decodes it.
fn query_value(url: &str, key: &str) -> Option<String> {
    url::Url::parse(url)
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}
