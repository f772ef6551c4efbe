//! Row decoding: what brokers use to turn stored data into a `Job`.
//!
//! - SQL brokers (SQLite, PostgreSQL, MySQL): their row readers are private and need a real
//!   database row, so this fuzzes the pure helpers they call on every row:
//!   `headers_from_json` (claims) and `headers_for_record` (listings) on any stored text,
//!   and `unreadable_row`.
//! - RabbitMQ: a message is its row. `hopper_amqp::wire::decode` turns a delivery with any
//!   properties and headers (as another producer may send) into a job; a job's own
//!   `wire::properties` / `copy_properties` must decode back to the same job; delivery ids
//!   split back into their generation and tag.

#![no_main]

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use hopper_amqp::QueueKind;
use hopper_amqp::wire::{self, ATTEMPT, CREATED_AT, DELIVERY_COUNT, MAX_ATTEMPTS, RUN_AT};
use hopper_core::job::{UNREADABLE_HEADERS, headers_for_record, headers_from_json, unreadable_row};
use hopper_core::{LeaseId, NewJob};
use lapin::BasicProperties;
use lapin::message::Delivery;
use lapin::types::{AMQPValue, DecimalValue, FieldArray, FieldTable, LongString, ShortString};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
enum Value {
    Bool(bool),
    I8(i8),
    U8(u8),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    F32(f32),
    F64(f64),
    Decimal(u8, u32),
    Short(String),
    Long(Vec<u8>),
    /// A number as text, as producers in other languages send it.
    NumberText(i64, bool),
    Array(Vec<i64>),
    Timestamp(u64),
    Table,
    Bytes(Vec<u8>),
    Void,
}

impl Value {
    fn amqp(&self) -> AMQPValue {
        match self {
            Value::Bool(b) => AMQPValue::Boolean(*b),
            Value::I8(n) => AMQPValue::ShortShortInt(*n),
            Value::U8(n) => AMQPValue::ShortShortUInt(*n),
            Value::I16(n) => AMQPValue::ShortInt(*n),
            Value::U16(n) => AMQPValue::ShortUInt(*n),
            Value::I32(n) => AMQPValue::LongInt(*n),
            Value::U32(n) => AMQPValue::LongUInt(*n),
            Value::I64(n) => AMQPValue::LongLongInt(*n),
            Value::F32(f) => AMQPValue::Float(*f),
            Value::F64(f) => AMQPValue::Double(*f),
            Value::Decimal(scale, value) => AMQPValue::DecimalValue(DecimalValue {
                scale: *scale,
                value: *value,
            }),
            Value::Short(s) => AMQPValue::ShortString(short(s)),
            Value::Long(b) => AMQPValue::LongString(LongString::from(b.clone())),
            Value::NumberText(n, padded) => {
                let text = if *padded {
                    format!(" {n} ")
                } else {
                    n.to_string()
                };
                AMQPValue::LongString(LongString::from(text.into_bytes()))
            }
            Value::Array(v) => AMQPValue::FieldArray(FieldArray::from(
                v.iter()
                    .map(|n| AMQPValue::LongLongInt(*n))
                    .collect::<Vec<_>>(),
            )),
            Value::Timestamp(t) => AMQPValue::Timestamp(*t),
            Value::Table => AMQPValue::FieldTable(FieldTable::default()),
            Value::Bytes(b) => AMQPValue::ByteArray(b.clone().into()),
            Value::Void => AMQPValue::Void,
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Key {
    Attempt,
    MaxAttempts,
    CreatedAt,
    RunAt,
    DeliveryCount,
    Error,
    Redelivered,
    Other(String),
}

impl Key {
    fn name(&self) -> String {
        match self {
            Key::Attempt => ATTEMPT.to_owned(),
            Key::MaxAttempts => MAX_ATTEMPTS.to_owned(),
            Key::CreatedAt => CREATED_AT.to_owned(),
            Key::RunAt => RUN_AT.to_owned(),
            Key::DeliveryCount => DELIVERY_COUNT.to_owned(),
            Key::Error => wire::ERROR.to_owned(),
            Key::Redelivered => wire::REDELIVERED.to_owned(),
            Key::Other(s) => s.clone(),
        }
    }
}

/// A delivery as any producer may send it.
#[derive(Debug, Arbitrary)]
struct Foreign {
    tag: u64,
    generation: u64,
    redelivered: bool,
    quorum: bool,
    data: Vec<u8>,
    timestamp: Option<u64>,
    headers: Option<Vec<(Key, Value)>>,
    now: i64,
}

/// A job as Hopper itself publishes it.
#[derive(Debug, Arbitrary)]
struct Own {
    payload: Vec<u8>,
    max_attempts: u32,
    headers: Vec<(String, String)>,
    created_at: i64,
    run_at: i64,
    attempt: u32,
    error: Option<String>,
    message_id: Option<u64>,
    tag: u64,
    generation: u16,
    redelivered: bool,
}

#[derive(Debug, Arbitrary)]
enum Input {
    /// Headers text a SQL row may hold, written by anyone.
    Stored(Option<Vec<u8>>),
    Foreign(Foreign),
    Own(Own),
}

/// A short string cut to the 255 bytes AMQP allows (at a character boundary).
fn short(s: &str) -> ShortString {
    let mut end = s.len().min(255);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    ShortString::from(&s[..end])
}

fuzz_target!(|input: Input| match input {
    Input::Stored(bytes) => stored(bytes),
    Input::Foreign(f) => foreign(f),
    Input::Own(o) => own(o),
});

fn stored(bytes: Option<Vec<u8>>) {
    let text = bytes.map(|b| String::from_utf8_lossy(&b).into_owned());
    let text = text.as_deref();
    let record = headers_for_record(text);
    match headers_from_json(text) {
        Ok(map) => {
            assert_eq!(record, map);
            // What was read is stored the same way again.
            let again = serde_json::to_string(&map).unwrap();
            assert_eq!(headers_from_json(Some(&again)).unwrap(), map);
        }
        Err(e) => {
            assert_eq!(
                record,
                BTreeMap::from([(UNREADABLE_HEADERS.to_owned(), text.unwrap().to_owned())])
            );
            let why = unreadable_row(format_args!("column 8: {e}"));
            assert!(why.starts_with("the row cannot be read as a job: column 8: "));
        }
    }
}

fn foreign(f: Foreign) {
    let mut props = BasicProperties::default();
    if let Some(t) = f.timestamp {
        props = props.with_timestamp(t);
    }
    let mut expected_headers = BTreeMap::new();
    let mut own_created_at = false;
    if let Some(headers) = &f.headers {
        let mut table = FieldTable::default();
        for (k, v) in headers {
            let name = short(&k.name());
            table.insert(name.clone(), v.amqp());
        }
        own_created_at = table.inner().keys().any(|k| k.as_str() == CREATED_AT);
        for (k, v) in table.inner() {
            let k = k.as_str();
            if k.starts_with("x-") || k == wire::REDELIVERED {
                continue;
            }
            match v {
                AMQPValue::ShortString(_)
                | AMQPValue::LongString(_)
                | AMQPValue::Boolean(_)
                | AMQPValue::Float(_)
                | AMQPValue::Double(_)
                | AMQPValue::ShortShortInt(_)
                | AMQPValue::ShortShortUInt(_)
                | AMQPValue::ShortInt(_)
                | AMQPValue::ShortUInt(_)
                | AMQPValue::LongInt(_)
                | AMQPValue::LongUInt(_)
                | AMQPValue::LongLongInt(_)
                | AMQPValue::Timestamp(_) => {
                    expected_headers.insert(k.to_owned(), ());
                }
                _ => {}
            }
        }
        props = props.with_headers(table);
    }
    let mut delivery = Delivery::mock(
        f.tag,
        ShortString::from(""),
        ShortString::from("q"),
        f.redelivered,
        f.data.clone(),
    );
    delivery.properties = props;
    let kind = if f.quorum {
        QueueKind::Quorum
    } else {
        QueueKind::Classic
    };
    let job = wire::decode(delivery, "q", f.generation, kind, f.now);
    assert_eq!(job.queue, "q");
    assert_eq!(job.payload, f.data);
    assert!(job.attempt >= 1, "{job:?}");
    assert!(job.max_attempts >= 1, "{job:?}");
    assert_eq!(job.lease, LeaseId(f.generation as i64));
    assert_eq!(job.headers.contains_key(wire::REDELIVERED), f.redelivered);
    for k in expected_headers.keys() {
        assert!(job.headers.contains_key(k), "header {k:?} lost: {job:?}");
    }
    assert!(job.headers.keys().all(|k| !k.starts_with("x-")));
    // Without Hopper's own creation time, another producer's `timestamp` (seconds) is
    // the creation time when it fits in i64 milliseconds; otherwise, or without one, the
    // delivery's arrival stands in.
    if !own_created_at {
        let from_timestamp = f
            .timestamp
            .and_then(|t| i64::try_from(t).ok()?.checked_mul(1000));
        assert_eq!(job.created_at, from_timestamp.unwrap_or(f.now), "{f:?}");
    }
    let (generation, tag) = wire::split_id(job.id);
    assert_eq!(tag, f.tag & ((1 << wire::TAG_BITS) - 1));
    if f.generation < 1 << (64 - wire::TAG_BITS - 1) {
        assert_eq!(generation, f.generation);
    }
}

fn own(o: Own) {
    let mut new = NewJob::new("q", o.payload.clone()).max_attempts(o.max_attempts);
    for (k, v) in &o.headers {
        new = new.header(k.clone(), v.clone());
    }
    // Hopper publishes only jobs that validated, with its own headers kept apart.
    if new.validate().is_err()
        || new
            .headers
            .keys()
            .any(|k| k.starts_with("x-") || k == wire::REDELIVERED)
    {
        return;
    }
    let message_id = o.message_id.map(|n| n.to_string());
    let props = wire::properties(
        message_id.as_deref(),
        &new,
        o.created_at,
        o.run_at,
        o.attempt,
        o.error.as_deref(),
    );
    let generation = u64::from(o.generation);
    let mut delivery = Delivery::mock(
        o.tag,
        ShortString::from(""),
        ShortString::from("q"),
        o.redelivered,
        o.payload.clone(),
    );
    delivery.properties = props;
    let job = wire::decode(delivery, "q", generation, QueueKind::Classic, 0);
    let mut want_headers = new.headers.clone();
    if o.redelivered {
        want_headers.insert(wire::REDELIVERED.to_owned(), "true".to_owned());
    }
    assert_eq!(job.headers, want_headers);
    assert_eq!(job.payload, o.payload);
    assert_eq!(job.attempt, o.attempt.saturating_add(1));
    assert_eq!(job.max_attempts, new.max_attempts);
    assert_eq!(job.created_at, o.created_at);
    assert_eq!(job.run_at, o.run_at.max(o.created_at));
    assert_eq!(
        wire::split_id(job.id),
        (generation, o.tag & ((1 << wire::TAG_BITS) - 1))
    );

    // A retry's copy of that job decodes to the same job, one attempt further on.
    let error = o.error.as_deref().unwrap_or("boom");
    let copy = wire::copy_properties(&job, message_id.as_deref(), Some(o.run_at), error);
    let mut again = Delivery::mock(
        o.tag,
        ShortString::from(""),
        ShortString::from("q"),
        false,
        o.payload.clone(),
    );
    again.properties = copy;
    let retried = wire::decode(again, "q", generation, QueueKind::Classic, 0);
    assert_eq!(retried.headers, new.headers);
    assert_eq!(retried.attempt, job.attempt.saturating_add(1));
    assert_eq!(retried.max_attempts, job.max_attempts);
    assert_eq!(retried.created_at, job.created_at);
}
