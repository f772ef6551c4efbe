//! Configuration: what parses and validates without connecting anywhere.
//!
//! - RabbitMQ: `AmqpOptions::with_url_settings` on any query (`prefetch`, `declare`,
//!   `confirms`, `queue_type`, `ack_hold_ms`, others); `QueueKind` and `Prefetch` from
//!   text; and `AmqpBroker::connect_with`'s refusals, called only when the documented
//!   rules say the options are refused (so it stops before connecting), on a loopback URL.
//! - PostgreSQL: `PgBroker::connect` and `hopper_postgres::migrate` on URLs with any
//!   driver query parameters (sqlx's own URL parsing included) and a `?schema=` that the
//!   documented rule refuses, so each stops at the schema check, before connecting; and
//!   `PgOptions` through `PgBroker::connect_with`.
//! - MySQL: `MySqlBroker::connect` on URLs without a database (refused after sqlx parses
//!   them, before connecting), and `MySqlOptions` through `MySqlBroker::connect_with`.
//! - `connect_with` reads the URL (its `max_payload=` overriding the options') before it
//!   checks the options: options the documented rules refuse, on a loopback URL, are
//!   refused by name before connecting; valid ones, on a URL of another scheme, are
//!   refused for the URL.
//! - Every refusal above is asserted to show no part of the URL's password.
//!
//! The worker's configuration has a target of its own, `worker_config`.

#![no_main]

mod common;

use std::time::Duration;

use arbitrary::Arbitrary;
use common::{Built, SecretUrl, assert_hidden};
use futures_util::FutureExt;
use hopper_amqp::{AmqpBroker, AmqpOptions, QueueKind, QueueSettings};
use hopper_core::job::MAX_PAYLOAD_LIMIT;
use hopper_core::{Error, Prefetch};
use hopper_mysql::{MySqlBroker, MySqlOptions};
use hopper_postgres::{PgBroker, PgOptions};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
enum Input {
    Amqp(AmqpInput),
    Postgres(SqlUrl),
    PgOptions(PgOpts),
    Mysql(SqlUrl),
    MysqlOptions(MyOpts),
    Text(String),
}

// ---------------------------------------------------------------- AMQP

/// The query keys `with_url_settings` reads (and two it leaves to others).
const AMQP_KEYS: [&str; 8] = [
    "prefetch",
    "declare",
    "confirms",
    "queue_type",
    "ack_hold_ms",
    "max_payload",
    "heartbeat",
    "connect_timeout",
];
/// The settings `with_url_settings` may refuse.
const AMQP_REFUSED: [&str; 6] = [
    "prefetch",
    "declare",
    "confirms",
    "queue_type",
    "ack_hold_ms",
    "max_payload",
];
const WORDS: [&str; 9] = [
    "true", "false", "on", "off", "classic", "quorum", "", "1KiB", "0MiB",
];

#[derive(Debug, Arbitrary)]
enum AmqpKey {
    Known(u8),
    Other(String),
}

#[derive(Debug, Arbitrary)]
enum AmqpValue {
    Number(u64),
    Flag(bool),
    Word(u8),
    Text(String),
}

#[derive(Debug, Arbitrary)]
struct AmqpInput {
    query: Vec<(AmqpKey, AmqpValue, bool)>,
    raw_query: Option<String>,
    prefetch: Option<u32>,
    queues: Vec<(String, bool)>,
    ack_hold_ms: Option<u64>,
    reconnect: Option<(u64, u64)>,
    password: String,
}

fn amqp(input: AmqpInput) {
    let mut query = String::new();
    for (key, value, no_equals) in &input.query {
        let key = match key {
            AmqpKey::Known(i) => AMQP_KEYS[usize::from(*i) % AMQP_KEYS.len()],
            AmqpKey::Other(k) => k,
        };
        let value = match value {
            AmqpValue::Number(n) => n.to_string(),
            AmqpValue::Flag(b) => b.to_string(),
            AmqpValue::Word(i) => WORDS[usize::from(*i) % WORDS.len()].to_owned(),
            AmqpValue::Text(t) => t.clone(),
        };
        if !query.is_empty() {
            query.push('&');
        }
        query.push_str(key);
        if !no_equals {
            query.push('=');
            query.push_str(&value);
        }
    }
    if let Some(raw) = &input.raw_query {
        query.push_str(raw);
    }
    let password: String = input
        .password
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    // Loopback and a port nothing listens on: even a mistaken connection attempt stays on
    // this machine.
    let url = format!("amqp://hopper:{password}@127.0.0.1:1/%2f?{query}");

    let mut options = AmqpOptions::new();
    if let Some(p) = input.prefetch {
        options = options.prefetch(p);
    }
    for (name, quorum) in &input.queues {
        let kind = if *quorum {
            QueueKind::Quorum
        } else {
            QueueKind::Classic
        };
        options = options.queue(name.clone(), QueueSettings::new().kind(kind));
    }
    if let Some(ms) = input.ack_hold_ms {
        options = options.ack_hold(Duration::from_millis(ms));
    }
    if let Some((min, max)) = input.reconnect {
        options = options.reconnect(Duration::from_millis(min), Duration::from_millis(max));
    }

    let read = options.clone().with_url_settings(&url);
    let read = match read {
        Ok(o) => o,
        Err(e) => {
            assert!(AMQP_REFUSED.contains(&e.setting.as_str()), "{e}");
            let _ = e.to_string();
            return;
        }
    };
    // The documented rules of `validate`, applied to what the URL left.
    let refused = !(1..=MAX_PAYLOAD_LIMIT).contains(&read.max_payload)
        || read.prefetch.is_some_and(|w| !(1..=65_535).contains(&w))
        || read
            .queues
            .keys()
            .any(|q| hopper_core::job::validate_queue_name(q).is_err())
        || read.ack_hold > hopper_amqp::options::MAX_ACK_HOLD
        || read.reconnect_min.is_zero()
        || read.reconnect_max < read.reconnect_min;
    if !refused {
        return;
    }
    // The broker's own `connect_timeout` check comes first; a bad one is refused too.
    match AmqpBroker::connect_with(&url, options).now_or_never() {
        Some(Err(Error::Config(e))) => {
            let shown = e.to_string();
            assert!(
                password.is_empty() || !shown.contains(&format!(":{password}@")),
                "{shown}"
            );
        }
        Some(Err(other)) => panic!("refused options gave a non-config error: {other:?}"),
        Some(Ok(_)) => panic!("refused options were accepted: {url:?}"),
        None => panic!("refused options went on to connect: {url:?}"),
    }
}

// ---------------------------------------------------------------- SQL URLs

/// Query keys the SQL drivers or Hopper read.
const SQL_KEYS: [&str; 18] = [
    "schema",
    "connect_timeout",
    "max_payload",
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "application_name",
    "options",
    "statement-cache-capacity",
    "charset",
    "collation",
    "timezone",
    "socket",
    "host",
    "port",
    "user",
    "password",
    "dbname",
];

#[derive(Debug, Arbitrary)]
enum SqlKey {
    Known(u8),
    Other(String),
}

impl SqlKey {
    fn as_str(&self) -> &str {
        match self {
            SqlKey::Known(i) => SQL_KEYS[usize::from(*i) % SQL_KEYS.len()],
            SqlKey::Other(k) => k,
        }
    }
}

#[derive(Debug, Arbitrary)]
struct SqlUrl {
    /// The user, password, host, port and path; its scheme is replaced.
    url: SecretUrl,
    other_scheme: bool,
    params: Vec<(SqlKey, String)>,
    /// The `schema` value, made one that the documented rule refuses.
    bad_schema: BadSchema,
}

#[derive(Debug, Arbitrary)]
enum BadSchema {
    Digit(u8, String),
    Upper(String),
    Long,
    Empty,
}

impl BadSchema {
    fn value(&self) -> String {
        match self {
            BadSchema::Digit(d, rest) => format!("{}{rest}", d % 10),
            BadSchema::Upper(rest) => format!("X{rest}"),
            BadSchema::Long => "s".repeat(64),
            BadSchema::Empty => String::new(),
        }
    }
}

/// Whether the documented schema rule refuses `s`: 1 to 63 of `a-z 0-9 _`, not starting
/// with a digit.
fn schema_refused(s: &str) -> bool {
    let mut chars = s.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    !first_ok || !rest_ok || s.len() > 63
}

/// The generated URL with `params` and a bad `schema` added to its query.
fn sql_url(input: &SqlUrl, scheme: &str) -> Option<Built> {
    let mut url = SecretUrl {
        scheme: common::Scheme::Other(scheme.to_owned()),
        ..input.url.clone()
    };
    url.fragment = None;
    for (k, v) in &input.params {
        url.query.push((k.as_str().to_owned(), v.clone()));
    }
    url.query
        .push(("schema".to_owned(), input.bad_schema.value()));
    url.build()
}

fn postgres(input: SqlUrl) {
    let scheme = if input.other_scheme {
        "postgresql"
    } else {
        "postgres"
    };
    let Some(built) = sql_url(&input, scheme) else {
        return;
    };
    // Called only when it cannot connect: the URL does not parse, or the schema it names
    // (the first `schema` parameter, as core's `take` reads it) is refused.
    if let Ok(mut parsed) =
        hopper_core::BrokerUrl::parse(&built.url, &["postgres", "postgresql"], "form")
    {
        match parsed.take("schema") {
            Some(s) if schema_refused(&s) => {}
            _ => return,
        }
    }
    for (what, result) in [
        (
            "PgBroker::connect",
            PgBroker::connect(&built.url)
                .now_or_never()
                .map(|r| r.map(drop)),
        ),
        (
            "hopper_postgres::migrate",
            hopper_postgres::migrate(&built.url)
                .now_or_never()
                .map(|r| r.map(drop)),
        ),
    ] {
        match result {
            Some(Err(e)) => {
                assert!(e.is_config(), "{what}: {e:?}");
                assert_hidden(what, &built, &e.to_string());
                assert_hidden(what, &built, &e.chain().to_string());
            }
            Some(Ok(())) => panic!("{what} accepted a refused schema: {:?}", built.url),
            None => panic!("{what} went on to connect: {:?}", built.url),
        }
    }
}

fn mysql(input: SqlUrl) {
    let scheme = if input.other_scheme {
        "mariadb"
    } else {
        "mysql"
    };
    let mut input = input;
    // No database: refused after the driver has read the URL, before connecting.
    input.url.path = String::new();
    let Some(built) = sql_url(&input, scheme) else {
        return;
    };
    if let Ok(parsed) = hopper_core::BrokerUrl::parse(&built.url, &["mysql", "mariadb"], "form") {
        let u = url::Url::parse(parsed.as_str()).expect("parsed");
        if !u.path().trim_start_matches('/').is_empty() {
            return;
        }
    }
    match MySqlBroker::connect(&built.url).now_or_never() {
        Some(Err(e)) => {
            assert!(e.is_config(), "{e:?}");
            assert_hidden("MySqlBroker::connect", &built, &e.to_string());
            assert_hidden("MySqlBroker::connect", &built, &e.chain().to_string());
        }
        Some(Ok(_)) => panic!("a URL without a database was accepted: {:?}", built.url),
        None => panic!(
            "a URL without a database went on to connect: {:?}",
            built.url
        ),
    }
}

// ---------------------------------------------------------------- SQL options

/// A `max_payload=` for the URL, which overrides the options' own.
#[derive(Debug, Arbitrary)]
enum UrlPayload {
    None,
    Bytes(usize),
    Kib(usize),
    Mib(usize),
    Text(String),
}

impl UrlPayload {
    fn value(&self) -> Option<String> {
        Some(match self {
            UrlPayload::None => return None,
            UrlPayload::Bytes(n) => n.to_string(),
            UrlPayload::Kib(n) => format!("{n}KiB"),
            UrlPayload::Mib(n) => format!("{n}MiB"),
            UrlPayload::Text(t) => t.chars().filter(char::is_ascii_alphanumeric).collect(),
        })
    }
}

/// The documented reading of `max_payload=`: bytes, or a number with `KiB` or `MiB`,
/// from 1 byte to `MAX_PAYLOAD_LIMIT`; `None` when refused.
fn url_payload(value: &str) -> Option<usize> {
    let split = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (digits, unit) = value.split_at(split);
    let scale = match unit {
        "" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        _ => return None,
    };
    let bytes = digits.parse::<usize>().ok()?.checked_mul(scale)?;
    (1..=MAX_PAYLOAD_LIMIT).contains(&bytes).then_some(bytes)
}

/// A URL that core refuses by its scheme, so a broker never gets as far as connecting.
const NOWHERE: &str = "nowhere://h/db";

/// What `connect_with` must do with options and a URL `max_payload`, given the settings
/// the documented rules refuse (`refused`, the options' max_payload not yet applied):
/// refuse by one of their names on a loopback URL, before connecting; with nothing
/// refused, refuse `NOWHERE` for its URL.
fn expect_refusal<F, B>(
    scheme: &str,
    payload: &UrlPayload,
    own_payload: usize,
    mut refused: Vec<&'static str>,
    connect_with: F,
) where
    F: Fn(&str) -> Option<Result<B, Error>>,
    B: std::fmt::Debug,
{
    let value = payload.value();
    let effective = match value.as_deref().map(url_payload) {
        None => Some(own_payload),
        Some(read) => read,
    };
    if effective.is_none_or(|b| !(1..=MAX_PAYLOAD_LIMIT).contains(&b)) {
        refused.push("max_payload");
    }
    if refused.is_empty() {
        match connect_with(NOWHERE) {
            Some(Err(Error::Config(e))) => assert_eq!(e.setting, "broker URL", "{e}"),
            other => panic!("unexpected: {other:?}"),
        }
        return;
    }
    let query = value.map_or(String::new(), |v| format!("?max_payload={v}"));
    // Loopback and a port nothing listens on: even a mistaken attempt stays here.
    let url = format!("{scheme}://hopper:pw@127.0.0.1:1/hopper{query}");
    match connect_with(&url) {
        Some(Err(Error::Config(e))) => {
            assert!(refused.contains(&e.setting.as_str()), "{refused:?}: {e}");
            assert!(!e.to_string().contains(":pw@"), "{e}");
        }
        Some(Err(other)) => panic!("refused options gave a non-config error: {other:?}"),
        Some(Ok(b)) => panic!("refused options were accepted: {url:?} {b:?}"),
        None => panic!("refused options went on to connect: {url:?} {refused:?}"),
    }
}

#[derive(Debug, Arbitrary)]
struct PgOpts {
    schema: Option<String>,
    connections: usize,
    listen: bool,
    keep_completed: Option<u64>,
    vacuum_after: Option<u64>,
    durable: bool,
    statement_timeout: Option<(u64, u32)>,
    max_payload: Option<usize>,
    url_payload: UrlPayload,
}

fn pg_options(o: PgOpts) {
    let mut options = PgOptions::default()
        .connections(o.connections)
        .listen(o.listen)
        .vacuum_after(o.vacuum_after)
        .durable_settlements(o.durable)
        .statement_timeout(
            o.statement_timeout
                .map(|(s, n)| Duration::new(s, n % 1_000_000_000)),
        );
    if let Some(s) = &o.schema {
        options = options.schema(s.clone());
    }
    if let Some(ms) = o.keep_completed {
        options = options.keep_completed(Duration::from_millis(ms));
    }
    if let Some(n) = o.max_payload {
        options = options.max_payload(n);
    }
    let mut refused = Vec::new();
    if schema_refused(&options.schema) {
        refused.push("schema");
    }
    if options
        .statement_timeout
        .is_some_and(|t| t < Duration::from_millis(1))
    {
        refused.push("statement_timeout");
    }
    if !(1..=64).contains(&options.connections) {
        refused.push("connections");
    }
    if options.vacuum_after == Some(0) {
        refused.push("vacuum_after");
    }
    let own = options.max_payload;
    expect_refusal("postgres", &o.url_payload, own, refused, |url| {
        PgBroker::connect_with(url, options.clone()).now_or_never()
    });
}

#[derive(Debug, Arbitrary)]
struct MyOpts {
    connections: usize,
    wake_poll: Option<(u64, u64)>,
    statement_timeout: Option<(u64, u32)>,
    max_payload: Option<usize>,
    url_payload: UrlPayload,
}

fn mysql_options(o: MyOpts) {
    let poll = o
        .wake_poll
        .map(|(a, b)| (Duration::from_micros(a), Duration::from_micros(b)));
    let timeout = o
        .statement_timeout
        .map(|(s, n)| Duration::new(s, n % 1_000_000_000));
    let mut options = MySqlOptions::default()
        .connections(o.connections)
        .wake_poll(poll)
        .statement_timeout(timeout);
    if let Some(n) = o.max_payload {
        options = options.max_payload(n);
    }
    let mut refused = Vec::new();
    if timeout.is_some_and(|t| t < Duration::from_millis(1)) {
        refused.push("statement_timeout");
    }
    if !(1..=64).contains(&o.connections) {
        refused.push("connections");
    }
    if poll.is_some_and(|(min, max)| min.is_zero() || min > max) {
        refused.push("wake_poll");
    }
    let own = options.max_payload;
    expect_refusal("mysql", &o.url_payload, own, refused, |url| {
        MySqlBroker::connect_with(url, options.clone()).now_or_never()
    });
}

// ---------------------------------------------------------------- text

fn text(s: String) {
    match s.parse::<Prefetch>() {
        Ok(p) => {
            let again: Prefetch = p.to_string().parse().expect("a prefetch reads back");
            assert_eq!(again, p);
            assert_ne!(p, Prefetch::Fixed(0));
        }
        Err(e) => assert_eq!(e.setting, "prefetch"),
    }
    match s.parse::<QueueKind>() {
        Ok(k) => assert_eq!(k.to_string(), s),
        Err(e) => assert_eq!(e.setting, "queue_type"),
    }
    let _ = AmqpOptions::new().with_url_settings(&s);
}

fuzz_target!(|input: Input| match input {
    Input::Amqp(a) => amqp(a),
    Input::Postgres(u) => postgres(u),
    Input::PgOptions(o) => pg_options(o),
    Input::Mysql(u) => mysql(u),
    Input::MysqlOptions(o) => mysql_options(o),
    Input::Text(s) => text(s),
});
