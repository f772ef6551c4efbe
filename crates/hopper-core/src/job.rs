//! Jobs as producers create them ([`NewJob`]) and as workers receive them ([`Job`]).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use smallvec::SmallVec;

use crate::error::{ConfigError, Error};
pub(crate) use crate::id::{IdMap, IdSet};
pub use crate::id::{JobId, LeaseId};
pub use checked::CheckedJobs;
pub use limits::{
    DEFAULT_MAX_PAYLOAD, Limits, MAX_ATTEMPTS, MAX_DELAY, MAX_GROUP, MAX_HEADER_NAME,
    MAX_HEADERS_BYTES, MAX_ORDERING_KEY, MAX_PAYLOAD_LIMIT, MAX_RUN_AT, MIN_RUN_AT, validate_group,
};
pub use ordering::{BLOCKED, is_blocked, own_run_at};
pub use unique::{Enqueued, MAX_UNIQUE_KEY, UniqueKey, UniqueScope, earlier_with_key};

mod checked;
mod limits;
pub mod ordering;
mod unique;

/// Attempts a job gets when its producer names no other number (Sidekiq's default).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 25;

/// Milliseconds since the Unix epoch: how brokers store times.
pub type Millis = i64;

/// Converts a wall-clock time to [`Millis`].
pub fn to_millis(t: SystemTime) -> Millis {
    // Saturating: a time past what i64 milliseconds hold must not wrap into the past.
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

/// Converts [`Millis`] back to a wall-clock time.
pub fn from_millis(ms: Millis) -> SystemTime {
    if ms >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

/// Checks a queue name against `[A-Za-z0-9_.:-]{1,128}`.
pub fn validate_queue_name(name: &str) -> Result<(), ConfigError> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-');
    if name.is_empty() || name.len() > 128 || !name.chars().all(ok_char) {
        return Err(ConfigError::new(
            "queue",
            name,
            "1 to 128 characters from A-Z a-z 0-9 _ . : -",
        ));
    }
    Ok(())
}

/// When a new job may run: now, at a time, or after a delay counted from enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunAt {
    /// As soon as a worker is free.
    Now,
    /// Not before this time.
    At(SystemTime),
    /// Not before this long after the broker accepted the job.
    After(Duration),
}

/// A job as a producer describes it, before a broker has accepted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    /// The queue the job goes to.
    pub queue: String,
    /// The payload: JSON when made by [`NewJob::json`], any bytes otherwise.
    pub payload: Vec<u8>,
    /// Higher runs first. Default 0.
    pub priority: i32,
    /// When the job may run.
    pub run_at: RunAt,
    /// Attempts before the job is dead-lettered. Default [`DEFAULT_MAX_ATTEMPTS`].
    pub max_attempts: u32,
    /// Free-form string headers, kept with the job.
    pub headers: BTreeMap<String, String>,
    /// A key no other job of the queue may hold while this one does
    /// ([`unique_key`](NewJob::unique_key)).
    pub unique: Option<UniqueKey>,
    /// A key whose jobs in the queue run one at a time, in enqueue order
    /// ([`ordering_key`](NewJob::ordering_key)).
    pub ordering_key: Option<String>,
    /// The group it is a member of ([`group`](NewJob::group)).
    pub group: Option<String>,
    /// The key whose window counts its start under a limit per key
    /// ([`rate_key`](NewJob::rate_key)).
    pub rate_key: Option<String>,
}

impl NewJob {
    /// A job carrying raw bytes.
    pub fn new(queue: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        NewJob {
            queue: queue.into(),
            payload: payload.into(),
            priority: 0,
            run_at: RunAt::Now,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            headers: BTreeMap::new(),
            unique: None,
            ordering_key: None,
            group: None,
            rate_key: None,
        }
    }

    /// A job whose payload is `value` serialised as JSON.
    pub fn json<T: Serialize + ?Sized>(queue: impl Into<String>, value: &T) -> Result<Self, Error> {
        let payload = serde_json::to_vec(value).map_err(|e| Error::Encode(e.to_string()))?;
        Ok(NewJob::new(queue, payload))
    }

    /// Sets the priority (higher runs first).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Runs the job no earlier than `delay` after enqueue.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.run_at = RunAt::After(delay);
        self
    }

    /// Runs the job no earlier than `at`.
    pub fn run_at(mut self, at: SystemTime) -> Self {
        self.run_at = RunAt::At(at);
        self
    }

    /// Sets the number of attempts before the job is dead-lettered: from 1 to
    /// [`MAX_ATTEMPTS`]; the enqueue refuses others.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// Adds a header.
    pub fn header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(key.into(), value.into());
        self
    }

    /// Makes the job unique by `key` in its queue until it ends
    /// ([`UniqueScope::Unfinished`]): while a job holding the key waits or runs, enqueuing
    /// another with it stores nothing and returns the holder's id
    /// ([`Enqueued::existing`]). Brokers that cannot look jobs up by key refuse the
    /// enqueue ([`Capabilities::unique`](crate::Capabilities::unique)).
    pub fn unique_key(self, key: impl Into<String>) -> Self {
        self.unique(key, UniqueScope::Unfinished)
    }

    /// Makes the job unique by `key` in its queue for as long as `scope` says.
    pub fn unique(mut self, key: impl Into<String>, scope: UniqueScope) -> Self {
        self.unique = Some(UniqueKey {
            key: key.into(),
            scope,
        });
        self
    }

    /// Runs the job after every job of its queue enqueued earlier with the same `key` has
    /// ended, and never beside one: jobs sharing a key run one at a time, in enqueue order,
    /// across all workers, while jobs of other keys run in parallel as usual. A job that
    /// fails and waits to be retried keeps the next one waiting. Within a key, enqueue order
    /// comes before priority. Brokers that cannot order jobs refuse the enqueue
    /// ([`Capabilities::ordered`](crate::Capabilities::ordered)); see [`ordering`].
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// Makes the job a member of `group`: once the group is sealed
    /// ([`Broker::seal_group`](crate::Broker::seal_group)) and every member has completed,
    /// died or been cancelled, the broker enqueues the group's completion job, once. See
    /// [`group`](crate::group). Brokers that cannot count groups refuse the enqueue
    /// ([`Capabilities::groups`](crate::Capabilities::groups)).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Counts the job's start against `key`'s own window when its queue's rate limit is
    /// [per key](crate::RateLimit::per_key): one tenant's or one account's jobs then start
    /// at most the limit's `max` times per period, whatever the others do. Under a limit
    /// for the whole queue the key is kept and counts nothing. Brokers without
    /// [`Capabilities::rate_limits_per_key`](crate::Capabilities::rate_limits_per_key)
    /// refuse the enqueue.
    pub fn rate_key(mut self, key: impl Into<String>) -> Self {
        self.rate_key = Some(key.into());
        self
    }

    /// [`rate_key`](NewJob::rate_key) from the field `field` of the job's JSON payload
    /// (an object): a string as it is, a number or a boolean as JSON writes it. A payload
    /// that is not such an object, or lacks the field, is refused by name (`rate_key`).
    pub fn rate_key_from(self, field: &str) -> Result<Self, ConfigError> {
        let refused = |why: &str| ConfigError::new("rate_key", field.escape_debug(), why);
        let value: serde_json::Value = serde_json::from_slice(&self.payload)
            .map_err(|_| refused("a field of a JSON object payload; the payload is not JSON"))?;
        let key = match value.get(field) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => v.to_string(),
            Some(_) => return Err(refused("a field holding a string, a number or a boolean")),
            None => {
                return Err(refused(
                    "a field of the payload; the payload has none by that name",
                ));
            }
        };
        Ok(self.rate_key(key))
    }

    /// The time the job may first run, given the broker's `now`.
    pub fn run_at_millis(&self, now: Millis) -> Millis {
        match self.run_at {
            RunAt::Now => now,
            RunAt::At(t) => to_millis(t),
            RunAt::After(d) => now + d.as_millis() as i64,
        }
    }

    /// `run_at` for a broker that may let its database clock decide. With `now` (a clock of
    /// the broker's own): the absolute time and no delay. Without: the absolute time when the
    /// producer named one, else `None` and the delay the database adds to its own clock.
    pub fn run_at_parts(&self, now: Option<Millis>) -> (Option<Millis>, Millis) {
        match (now, self.run_at) {
            (Some(now), _) => (Some(self.run_at_millis(now)), 0),
            (None, RunAt::Now) => (None, 0),
            (None, RunAt::At(t)) => (Some(to_millis(t)), 0),
            (None, RunAt::After(d)) => (None, d.as_millis() as i64),
        }
    }

    /// The headers as brokers store them: a JSON object, or `None` when there are none.
    pub fn headers_json(&self) -> Option<String> {
        (!self.headers.is_empty()).then(|| {
            serde_json::to_string(&self.headers).expect("a map of strings always serialises")
        })
    }
}

/// Reads headers stored by [`NewJob::headers_json`]: `None` is no headers.
pub fn headers_from_json(
    text: Option<&str>,
) -> Result<BTreeMap<String, String>, serde_json::Error> {
    text.map_or(Ok(BTreeMap::new()), serde_json::from_str)
}

/// The error a claim dead-letters a stored row with when the row cannot be read as a job
/// (a column another program wrote out of range): `why` names the column.
pub fn unreadable_row(why: impl std::fmt::Display) -> String {
    format!("the row cannot be read as a job: {why}")
}

/// The header under which a job record shows stored headers that are not a JSON object of
/// strings (written by another program), as they were stored: listing dead letters, where
/// such a row ends, must show it among the others rather than fail.
pub const UNREADABLE_HEADERS: &str = "x-hopper-unreadable-headers";

/// Headers for a job record: as [`headers_from_json`], or, when the stored text cannot be
/// read so, that text under [`UNREADABLE_HEADERS`].
pub fn headers_for_record(text: Option<&str>) -> BTreeMap<String, String> {
    headers_from_json(text).unwrap_or_else(|_| {
        BTreeMap::from([(
            UNREADABLE_HEADERS.to_owned(),
            text.unwrap_or_default().to_owned(),
        )])
    })
}

/// Where a job stands in its broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Waiting to be fetched (possibly not due yet).
    Pending,
    /// Held by a fetch's lease.
    Leased,
    /// Finished and retained.
    Completed,
    /// Dead-lettered.
    Dead,
    /// Cancelled before it ran.
    Cancelled,
}

impl JobState {
    /// The state's name as commands and the API print it.
    pub fn name(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Leased => "leased",
            JobState::Completed => "completed",
            JobState::Dead => "dead",
            JobState::Cancelled => "cancelled",
        }
    }
}

/// A job as a worker holds it: claimed under a lease by one fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The broker's id for the job.
    pub id: JobId,
    /// The queue it was taken from.
    pub queue: String,
    /// The payload bytes.
    pub payload: Vec<u8>,
    /// Higher runs first.
    pub priority: i32,
    /// Not run before this time (ms since the epoch).
    pub run_at: Millis,
    /// Attempts charged so far, this one included (1 on the first run).
    pub attempt: u32,
    /// Attempts allowed before the job is dead-lettered.
    pub max_attempts: u32,
    /// The producer's headers.
    pub headers: BTreeMap<String, String>,
    /// When the broker accepted the job (ms since the epoch).
    pub created_at: Millis,
    /// The lease of the fetch that returned this job, shared by every job of that fetch.
    pub lease: LeaseId,
}

impl Job {
    /// Decodes the payload as JSON.
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.payload).map_err(|e| Error::Decode {
            job: self.id,
            message: e.to_string(),
        })
    }

    /// Whether this attempt is the last one allowed.
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }
}

/// A broker's copy of a job it handed out, kept for when the job comes back: a retry, a
/// dead letter, an expired lease. The queue's name is left to the holder, which knows it;
/// a payload of up to [`JobCopy::INLINE`] bytes is kept inline, and headers only when there
/// are some, so copying a small job allocates nothing and dropping the copy frees nothing.
/// A broker copies every job it hands out; an allocation and a free per job there cost a
/// memory drain about a fifth of its rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCopy {
    id: JobId,
    lease: LeaseId,
    priority: i32,
    attempt: u32,
    max_attempts: u32,
    run_at: Millis,
    created_at: Millis,
    /// `None` for none: most jobs carry no headers, and an empty map still takes work to
    /// drop. Boxed so that no headers cost one word, and dropping them one test.
    #[allow(clippy::box_collection)]
    headers: Option<Box<BTreeMap<String, String>>>,
    payload: SmallVec<[u8; JobCopy::INLINE]>,
}

impl JobCopy {
    /// Payload bytes kept without an allocation of their own.
    pub const INLINE: usize = 64;

    /// A copy of `job`.
    pub fn new(job: &Job) -> Self {
        JobCopy {
            id: job.id,
            lease: job.lease,
            priority: job.priority,
            attempt: job.attempt,
            max_attempts: job.max_attempts,
            run_at: job.run_at,
            created_at: job.created_at,
            headers: (!job.headers.is_empty()).then(|| Box::new(job.headers.clone())),
            payload: SmallVec::from_slice(&job.payload),
        }
    }

    /// Attempts charged so far.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The job's id.
    pub fn id(&self) -> JobId {
        self.id
    }

    /// The lease the job was handed out under.
    pub fn lease(&self) -> LeaseId {
        self.lease
    }

    /// The job's priority.
    pub fn priority(&self) -> i32 {
        self.priority
    }

    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The whole job again, in `queue`.
    pub fn to_job(&self, queue: &str) -> Job {
        self.clone().into_job(queue)
    }

    /// The whole job again, in `queue`, without copying the payload or the headers a
    /// second time.
    pub fn into_job(self, queue: &str) -> Job {
        Job {
            id: self.id,
            queue: queue.to_owned(),
            payload: self.payload.into_vec(),
            priority: self.priority,
            run_at: self.run_at,
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            headers: self.headers.map_or_else(BTreeMap::new, |h| *h),
            created_at: self.created_at,
            lease: self.lease,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(payload: Vec<u8>) -> Job {
        Job {
            id: JobId(7),
            queue: "emails".into(),
            payload,
            priority: 3,
            run_at: 1_000,
            attempt: 2,
            max_attempts: 5,
            headers: BTreeMap::from([("k".to_owned(), "v".to_owned())]),
            created_at: 900,
            lease: LeaseId(11),
        }
    }

    /// A payload at the inline limit and one past it both come back whole, with every
    /// other field, headers or none, in the queue the holder names.
    #[test]
    fn a_copy_gives_the_whole_job_back() {
        for len in [0, JobCopy::INLINE, JobCopy::INLINE + 1] {
            let mut original = job((0..len).map(|i| i as u8).collect());
            if len == JobCopy::INLINE {
                original.headers.clear();
            }
            let copy = JobCopy::new(&original);
            assert_eq!(copy.payload(), &original.payload[..]);
            assert_eq!(
                (copy.id(), copy.lease(), copy.priority()),
                (JobId(7), LeaseId(11), 3)
            );
            assert_eq!(copy.to_job("emails"), original);
            assert_eq!(copy.into_job("emails"), original);
        }
    }

    #[test]
    fn a_rate_key_comes_from_a_payload_field_or_is_refused_by_name() {
        let from = |payload: &str, field: &str| {
            NewJob::new("q", payload.as_bytes().to_vec()).rate_key_from(field)
        };
        let key = |payload: &str| from(payload, "tenant").unwrap().rate_key.unwrap();
        assert_eq!(key(r#"{"tenant":"acme","n":1}"#), "acme");
        assert_eq!(key(r#"{"tenant":42}"#), "42");
        assert_eq!(key(r#"{"tenant":true}"#), "true");
        for bad in [
            r#"{"other":1}"#,
            r#"{"tenant":null}"#,
            r#"{"tenant":[1]}"#,
            "not json",
            "[1]",
        ] {
            let refused = from(bad, "tenant").unwrap_err();
            assert_eq!(refused.setting, "rate_key", "{bad}");
        }
        let empty = NewJob::new("q", b"x".to_vec()).rate_key("").validate();
        assert!(matches!(empty, Err(Error::Config(c)) if c.setting == "rate_key"));
        let long = NewJob::new("q", b"x".to_vec())
            .rate_key("k".repeat(256))
            .validate();
        assert!(matches!(long, Err(Error::Config(c)) if c.setting == "rate_key"));
    }
}
