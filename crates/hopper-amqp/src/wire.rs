//! The wire format: how a job becomes an AMQP message and back. Documented for producers
//! and consumers in other languages in `docs/amqp.md`; change both together.
//!
//! - body: the payload bytes (JSON for Hopper's typed handlers);
//! - `content_type`: `application/json` when the body is JSON, else
//!   `application/octet-stream`; `delivery_mode` 2 (persistent); `message_id`: the id
//!   enqueue returned; `timestamp`: creation, in seconds;
//! - headers: the producer's string headers as they are, plus Hopper's own, all optional
//!   for messages from other producers: [`ATTEMPT`], [`MAX_ATTEMPTS`], [`CREATED_AT`],
//!   [`RUN_AT`], [`ERROR`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use hopper_core::job::DEFAULT_MAX_ATTEMPTS;
use hopper_core::{Job, JobId, LeaseId, Millis, NewJob};
use lapin::BasicProperties;
use lapin::message::Delivery;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};

use crate::options::QueueKind;

/// Attempts charged before this delivery (0 or absent for a new job).
pub const ATTEMPT: &str = "x-hopper-attempt";
/// Attempts allowed before the job is dead-lettered (default 25).
pub const MAX_ATTEMPTS: &str = "x-hopper-max-attempts";
/// When the job was first enqueued, in ms since the epoch.
pub const CREATED_AT: &str = "x-hopper-created-at";
/// Not run before this time, in ms since the epoch (delayed jobs and retries).
pub const RUN_AT: &str = "x-hopper-run-at";
/// The error of the last failed attempt (retries and dead letters).
pub const ERROR: &str = "x-hopper-error";
/// The queue a dead letter came from.
pub const QUEUE: &str = "x-hopper-queue";
/// Set to `"true"` among a job's headers when RabbitMQ marks the delivery redelivered (an
/// earlier holder's channel closed or the message was released): it may have run before.
pub const REDELIVERED: &str = "amqp-redelivered";
/// RabbitMQ's redelivery counter on quorum queues.
pub const DELIVERY_COUNT: &str = "x-delivery-count";

/// Bits of a delivery id that hold the delivery tag; the channel generation is above them.
pub const TAG_BITS: u32 = 40;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;

/// The id of a delivery: its channel's generation and its delivery tag, so a settlement
/// finds its channel and a stale one (an older generation) is recognised and fenced.
pub fn delivery_id(generation: u64, tag: u64) -> JobId {
    JobId(((generation << TAG_BITS) | (tag & TAG_MASK)) as i64)
}

/// The generation and delivery tag inside a delivery id.
pub fn split_id(id: JobId) -> (u64, u64) {
    let v = id.0 as u64;
    (v >> TAG_BITS, v & TAG_MASK)
}

/// A fresh enqueue id: milliseconds since 2025 in the high bits, then a per-process salt,
/// then a sequence, so ids ascend within a process and two processes sharing a server do
/// not mint the same one (short of the same 10-bit salt in the same millisecond).
pub fn next_enqueue_id(now: Millis) -> JobId {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    static SALT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    const EPOCH_2025: i64 = 1_735_689_600_000;
    let salt = *SALT.get_or_init(|| fastrand_salt() & 0x3ff);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let ms = (now - EPOCH_2025).max(0) as u64;
    // The sequence's own bits carry into the milliseconds only after 4096 ids in one
    // process: the id stays unique and ascending, just a little ahead of the clock.
    JobId((((ms << 22) | (salt << 12)) + (seq & 0xfff) + ((seq >> 12) << 22)) as i64)
}

/// The wall clock in milliseconds, as messages carry their times.
pub(crate) fn now_ms() -> Millis {
    hopper_core::job::to_millis(std::time::SystemTime::now())
}

fn fastrand_salt() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    t ^ (std::process::id() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Whether the body is JSON, for its `content_type` label: a full parse (without building
/// anything), since a wrong label would mislead consumers in other languages.
fn is_json(payload: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(payload).is_ok()
}

/// The properties of a new job's message: `attempt` charged so far, `error` of the last.
pub fn properties(
    message_id: Option<&str>,
    job: &NewJob,
    created_at: Millis,
    run_at: Millis,
    attempt: u32,
    error: Option<&str>,
) -> BasicProperties {
    let mut headers = FieldTable::default();
    for (k, v) in &job.headers {
        headers.insert(ShortString::from(k.as_str()), long_string(v));
    }
    // Attempt and max attempts go only when they differ from what their absence means (0
    // and DEFAULT_MAX_ATTEMPTS): every consumer parses each header of every message, and on
    // a new job with the default limit these two were two of its three.
    if attempt > 0 {
        headers.insert(ATTEMPT.into(), AMQPValue::LongLongInt(attempt as i64));
    }
    if job.max_attempts != DEFAULT_MAX_ATTEMPTS {
        headers.insert(
            MAX_ATTEMPTS.into(),
            AMQPValue::LongLongInt(job.max_attempts as i64),
        );
    }
    headers.insert(CREATED_AT.into(), AMQPValue::LongLongInt(created_at));
    if run_at > created_at {
        headers.insert(RUN_AT.into(), AMQPValue::LongLongInt(run_at));
    }
    if let Some(e) = error {
        headers.insert(ERROR.into(), long_string(e));
    }
    let content_type = if is_json(&job.payload) {
        "application/json"
    } else {
        "application/octet-stream"
    };
    let props = BasicProperties::default()
        .with_content_type(content_type.into())
        .with_delivery_mode(2)
        .with_timestamp((created_at / 1000).max(0) as u64)
        .with_headers(headers);
    match message_id {
        Some(m) => props.with_message_id(m.into()),
        None => props,
    }
}

/// The properties of a copy of `job` (a retry, a dead letter or a snooze): the same
/// message with `charged` attempts in [`ATTEMPT`], `error` as its last error and, when it
/// waits in a retry queue, when it is due.
pub fn copy_properties(
    job: &Job,
    message_id: Option<&str>,
    run_at: Option<Millis>,
    charged: u32,
    error: Option<&str>,
) -> BasicProperties {
    let mut new = NewJob::new(job.queue.clone(), Vec::new());
    new.max_attempts = job.max_attempts;
    new.headers = job.headers.clone();
    new.headers.remove(REDELIVERED);
    let props = properties(
        message_id,
        &new,
        job.created_at,
        run_at.unwrap_or(job.created_at),
        charged,
        error,
    );
    props.with_content_type(job_content_type(job).into())
}

/// The [`ERROR`] a delivery carries from an earlier attempt, if any: a snoozed copy keeps
/// it as it is, since putting a job off is no failure of its own.
pub(crate) fn carried_error(props: &BasicProperties) -> Option<Box<str>> {
    let v = props.headers().as_ref()?.inner().get(ERROR)?;
    as_string(v).map(String::into_boxed_str)
}

/// The properties of a dead letter sent back to its queue: the same message (id, body,
/// error, creation, the producer's headers), with its attempts reset and due now. The
/// server's dead-lettering records go too (`x-death`, `x-first-death-*`,
/// `x-last-death-*`, a quorum queue's `x-delivery-count`): they would be read as attempts,
/// or make the server take the next dead-lettering for a cycle.
pub fn redriven(props: &BasicProperties) -> BasicProperties {
    let Some(table) = props.headers() else {
        return props.clone();
    };
    let mut kept = FieldTable::default();
    for (k, v) in table.inner() {
        let dropped = matches!(
            k.as_str(),
            ATTEMPT | RUN_AT | QUEUE | DELIVERY_COUNT | "x-death"
        ) || k.as_str().starts_with("x-first-death-")
            || k.as_str().starts_with("x-last-death-");
        if !dropped {
            kept.insert(k.clone(), v.clone());
        }
    }
    props.clone().with_headers(kept)
}

fn job_content_type(job: &Job) -> &'static str {
    if is_json(&job.payload) {
        "application/json"
    } else {
        "application/octet-stream"
    }
}

fn long_string(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()))
}

fn as_i64(v: &AMQPValue) -> Option<i64> {
    match v {
        AMQPValue::ShortShortInt(n) => Some(*n as i64),
        AMQPValue::ShortShortUInt(n) => Some(*n as i64),
        AMQPValue::ShortInt(n) => Some(*n as i64),
        AMQPValue::ShortUInt(n) => Some(*n as i64),
        AMQPValue::LongInt(n) => Some(*n as i64),
        AMQPValue::LongUInt(n) => Some(*n as i64),
        AMQPValue::LongLongInt(n) => Some(*n),
        AMQPValue::Timestamp(n) => Some(*n as i64),
        AMQPValue::ShortString(s) => s.as_str().trim().parse().ok(),
        AMQPValue::LongString(s) => std::str::from_utf8(s.as_bytes()).ok()?.trim().parse().ok(),
        _ => None,
    }
}

fn as_string(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::Boolean(b) => Some(b.to_string()),
        AMQPValue::Float(f) => Some(f.to_string()),
        AMQPValue::Double(f) => Some(f.to_string()),
        other => as_i64(other).map(|n| n.to_string()),
    }
}

/// The job a delivery carries, as a worker holds it.
pub fn decode(
    delivery: Delivery,
    queue: &str,
    generation: u64,
    kind: QueueKind,
    now: Millis,
) -> Job {
    let props = &delivery.properties;
    let mut headers = BTreeMap::new();
    let (mut attempt, mut max_attempts, mut created_at, mut run_at) = (0i64, None, None, None);
    let mut delivery_count = 0i64;
    if let Some(table) = props.headers() {
        for (k, v) in table.inner() {
            match k.as_str() {
                ATTEMPT => attempt = as_i64(v).unwrap_or(0),
                MAX_ATTEMPTS => max_attempts = as_i64(v),
                CREATED_AT => created_at = as_i64(v),
                RUN_AT => run_at = as_i64(v),
                DELIVERY_COUNT => delivery_count = as_i64(v).unwrap_or(0),
                // The server's and Hopper's bookkeeping are not the producer's headers.
                key if key.starts_with("x-") => {}
                REDELIVERED => {}
                key => {
                    if let Some(s) = as_string(v) {
                        headers.insert(key.to_owned(), s);
                    }
                }
            }
        }
    }
    if delivery.redelivered {
        headers.insert(REDELIVERED.to_owned(), "true".to_owned());
    }
    if kind == QueueKind::Quorum {
        // Both come from headers any producer may set (found by fuzzing: their sum
        // overflowed).
        attempt = attempt.saturating_add(delivery_count);
    }
    let created_at = created_at
        // Another producer's timestamp, in seconds: one past what milliseconds hold in an
        // i64 (found by fuzzing) is not a time, and the delivery's arrival stands in.
        .or_else(|| {
            let secs = (*props.timestamp())?;
            i64::try_from(secs).ok()?.checked_mul(1000)
        })
        .unwrap_or(now);
    Job {
        id: delivery_id(generation, delivery.delivery_tag),
        queue: queue.to_owned(),
        payload: delivery.data,
        priority: 0,
        run_at: run_at.unwrap_or(created_at),
        attempt: u32::try_from(attempt.max(0))
            .unwrap_or(u32::MAX)
            .saturating_add(1),
        max_attempts: max_attempts
            .map_or(DEFAULT_MAX_ATTEMPTS, |n| n.clamp(1, u32::MAX as i64) as u32),
        headers,
        created_at,
        lease: LeaseId(generation as i64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_ids_round_trip_and_enqueue_ids_ascend() {
        let id = delivery_id(7, 123_456);
        assert_eq!(split_id(id), (7, 123_456));
        let a = next_enqueue_id(1_800_000_000_000);
        let b = next_enqueue_id(1_800_000_000_000);
        assert!(b > a, "{a} then {b}");
    }

    fn header_names(props: &BasicProperties) -> Vec<String> {
        let table = props.headers().as_ref().expect("headers");
        table
            .inner()
            .keys()
            .map(|k| k.as_str().to_owned())
            .collect()
    }

    /// A new job at the default limit carries only its creation time; a later attempt, or
    /// another limit, carries what differs from the absent header's meaning.
    #[test]
    fn attempt_headers_go_only_when_they_differ_from_their_absence() {
        let job = NewJob::new("q", b"{}".to_vec());
        let first = properties(None, &job, 1_000, 1_000, 0, None);
        assert_eq!(header_names(&first), [CREATED_AT]);

        let mut limited = NewJob::new("q", b"{}".to_vec());
        limited.max_attempts = 3;
        let retry = properties(None, &limited, 1_000, 5_000, 2, Some("boom"));
        let table = retry.headers().as_ref().unwrap().inner();
        assert_eq!(table.get(ATTEMPT).and_then(as_i64), Some(2));
        assert_eq!(table.get(MAX_ATTEMPTS).and_then(as_i64), Some(3));
        assert_eq!(table.get(RUN_AT).and_then(as_i64), Some(5_000));
        assert_eq!(
            header_names(&retry).len(),
            5,
            "attempt, max, created, run-at, error"
        );
    }

    /// Found by fuzzing: another producer's timestamp past what milliseconds hold in an
    /// i64 overflowed; the delivery's arrival stands in for it.
    #[test]
    fn a_timestamp_past_the_millisecond_range_is_not_a_creation_time() {
        let decoded = |seconds: u64| {
            let mut delivery = Delivery::mock(
                1,
                ShortString::from(""),
                ShortString::from("q"),
                false,
                vec![],
            );
            delivery.properties = BasicProperties::default().with_timestamp(seconds);
            decode(delivery, "q", 1, QueueKind::Classic, 5_000).created_at
        };
        assert_eq!(decoded(u64::MAX), 5_000);
        assert_eq!(decoded(i64::MAX as u64 / 1000 + 1), 5_000);
        assert_eq!(decoded(7), 7_000);
    }

    /// Found by fuzzing: a quorum queue's delivery count added to another producer's
    /// attempt header overflowed.
    #[test]
    fn attempt_headers_at_the_edge_of_their_range_do_not_overflow() {
        let mut delivery = Delivery::mock(
            1,
            ShortString::from(""),
            ShortString::from("q"),
            true,
            vec![],
        );
        let mut table = FieldTable::default();
        table.insert(ATTEMPT.into(), AMQPValue::LongLongInt(i64::MAX));
        table.insert(DELIVERY_COUNT.into(), AMQPValue::LongLongInt(1));
        delivery.properties = BasicProperties::default().with_headers(table);
        let job = decode(delivery, "q", 1, QueueKind::Quorum, 5_000);
        assert_eq!(job.attempt, u32::MAX);
        // Past u32: the most attempts, not the low 32 bits (2^32 read as 0).
        let mut delivery = Delivery::mock(
            1,
            ShortString::from(""),
            ShortString::from("q"),
            false,
            vec![],
        );
        let mut table = FieldTable::default();
        table.insert(ATTEMPT.into(), AMQPValue::LongLongInt(1 << 32));
        delivery.properties = BasicProperties::default().with_headers(table);
        let job = decode(delivery, "q", 1, QueueKind::Classic, 5_000);
        assert_eq!(job.attempt, u32::MAX);
    }

    /// A re-driven dead letter is a first attempt again and due now; its error, creation
    /// time, limit, id and the producer's headers stay.
    #[test]
    fn a_redriven_dead_letter_keeps_its_error_and_loses_its_attempts() {
        let mut job = NewJob::new("q", b"{}".to_vec());
        job.max_attempts = 3;
        job.headers.insert("tenant".into(), "t1".into());
        let mut dead = properties(Some("42"), &job, 1_000, 5_000, 3, Some("boom"));
        let mut table = dead.headers().clone().unwrap();
        table.insert(QUEUE.into(), long_string("q"));
        table.insert(DELIVERY_COUNT.into(), AMQPValue::LongLongInt(2));
        table.insert("x-death".into(), AMQPValue::FieldArray(Default::default()));
        table.insert("x-first-death-reason".into(), long_string("rejected"));
        dead = dead.with_headers(table);
        let back = redriven(&dead);
        let mut names = header_names(&back);
        names.sort();
        assert_eq!(
            names,
            ["tenant", CREATED_AT, ERROR, MAX_ATTEMPTS],
            "attempt, run-at, origin and the server's records dropped"
        );
        assert_eq!(back.message_id(), dead.message_id());
        let mut delivery = Delivery::mock(
            1,
            ShortString::from(""),
            ShortString::from("q"),
            false,
            b"{}".to_vec(),
        );
        delivery.properties = back;
        let again = decode(delivery, "q", 1, QueueKind::Quorum, 9_000);
        assert_eq!((again.attempt, again.max_attempts), (1, 3));
        assert_eq!(again.run_at, 1_000, "due since its creation");
        assert!(redriven(&BasicProperties::default()).headers().is_none());
    }

    #[test]
    fn json_bodies_are_labelled() {
        assert!(is_json(b"{\"a\":1}"));
        assert!(is_json(b"[1, 2]"));
        assert!(is_json(b"42"));
        assert!(!is_json(&[0, 159, 146, 150]));
        assert!(!is_json(b"hello"));
    }
}
