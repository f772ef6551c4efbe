//! Unique jobs: a job enqueued with a [`UniqueKey`] is stored only when no job of its queue
//! holds that key; otherwise the enqueue returns the holder's id and says so
//! ([`Enqueued::existing`]).
//!
//! A key is held by the job that took it for as long as its [`UniqueScope`] says. Brokers
//! keep each key's holder with the scope, and decide whether a hold still stands when the
//! next job with that key arrives, from the holder's state ([`UniqueScope::holds`]): so
//! claiming and settling jobs never touch a key, and jobs without one pay nothing.

use std::time::Duration;

use super::{JobState, MAX_DELAY, Millis, NewJob};
use crate::error::{ConfigError, Error};
use crate::id::JobId;

/// The longest unique key, in bytes.
pub const MAX_UNIQUE_KEY: usize = 255;

/// How long a job holds its unique key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UniqueScope {
    /// While it waits with no attempt charged: from its enqueue until a worker takes it,
    /// and again while it waits after being handed back uncharged (released, snoozed, or
    /// re-driven from the dead letters) if no other job took the key meanwhile. Once a
    /// worker takes it, the next job with the key is stored.
    Queued,
    /// Until it ends: while it waits, runs, or waits to be retried. Once it completes, is
    /// dead-lettered, cancelled or purged, the next job with the key is stored. The
    /// default.
    Unfinished,
    /// For this long after it was enqueued, whatever becomes of it: at most one job per
    /// key per period (a period of at most [`MAX_DELAY`]).
    For(Duration),
}

impl UniqueScope {
    /// The scope as brokers store it: 0 queued, 1 unfinished, 2 for a period.
    pub fn code(self) -> i16 {
        match self {
            UniqueScope::Queued => 0,
            UniqueScope::Unfinished => 1,
            UniqueScope::For(_) => 2,
        }
    }

    /// When a hold taken at `now` ends regardless of its job (ms since the epoch): only
    /// for a period.
    pub fn until(self, now: Millis) -> Option<Millis> {
        match self {
            UniqueScope::For(period) => Some(now.saturating_add(period.as_millis() as i64)),
            _ => None,
        }
    }

    /// Whether a hold of scope `code` (see [`code`](Self::code)) still stands at `now`,
    /// given its holder's state and attempts charged (`None`: the holder is gone) and
    /// the hold's `until`. Every broker decides by this rule, in Rust or in SQL:
    /// - queued (0): the holder is pending and was never charged an attempt;
    /// - unfinished (1): the holder is pending or leased;
    /// - a period (2): `now` is before `until`.
    pub fn holds(
        code: i16,
        holder: Option<(JobState, u32)>,
        until: Option<Millis>,
        now: Millis,
    ) -> bool {
        match code {
            0 => matches!(holder, Some((JobState::Pending, 0))),
            1 => matches!(holder, Some((JobState::Pending | JobState::Leased, _))),
            _ => until.is_some_and(|u| now < u),
        }
    }
}

/// A job's unique key and how long it holds it ([`NewJob::unique_key`]). Keys are per
/// queue: the same key on two queues is two keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueKey {
    /// The key: 1 to [`MAX_UNIQUE_KEY`] bytes, no NUL.
    pub key: String,
    /// How long the job holds it.
    pub scope: UniqueScope,
}

impl UniqueKey {
    /// Checks the key and the period, naming the setting.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.key.is_empty() || self.key.len() > MAX_UNIQUE_KEY || self.key.contains('\0') {
            let allowed = format!("1 to {MAX_UNIQUE_KEY} bytes, no NUL");
            return Err(ConfigError::new("unique_key", self.key.escape_debug(), allowed).into());
        }
        if let UniqueScope::For(period) = self.scope {
            if period.is_zero() || period > MAX_DELAY {
                let allowed = format!(
                    "more than 0 and at most {} days",
                    MAX_DELAY.as_secs() / 86_400
                );
                let value = format!("{period:?}");
                return Err(ConfigError::new("unique period", value, allowed).into());
            }
        }
        Ok(())
    }
}

/// What an enqueue did with one job ([`Broker::enqueue_reported`](crate::Broker::enqueue_reported)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enqueued {
    /// The stored job's id; for a duplicate, the id of the job holding its key, which
    /// under a period ([`UniqueScope::For`]) may have finished and be gone.
    pub id: JobId,
    /// The job was not stored: a job holding its unique key was already there.
    pub existing: bool,
}

impl Enqueued {
    /// A job stored under `id`.
    pub fn stored(id: JobId) -> Self {
        Enqueued {
            id,
            existing: false,
        }
    }

    /// A duplicate of the job `id`, which holds the key.
    pub fn existing(id: JobId) -> Self {
        Enqueued { id, existing: true }
    }
}

/// For each job of a batch, the index of an earlier job of the same batch with the same
/// queue and unique key, if any: that one stands for it, and it is not stored. Brokers
/// store only the first job of each key and answer the rest with its outcome.
pub fn earlier_with_key(jobs: &[NewJob]) -> Vec<Option<usize>> {
    let mut first = std::collections::HashMap::new();
    jobs.iter()
        .enumerate()
        .map(|(i, job)| {
            let unique = job.unique.as_ref()?;
            let key = (job.queue.as_str(), unique.key.as_str());
            match first.entry(key) {
                std::collections::hash_map::Entry::Occupied(e) => Some(*e.get()),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(i);
                    None
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_follow_the_scope() {
        let pending = Some((JobState::Pending, 0));
        let retrying = Some((JobState::Pending, 1));
        let leased = Some((JobState::Leased, 1));
        let done = Some((JobState::Completed, 1));
        let verdicts = |code| {
            [pending, retrying, leased, done, None]
                .map(|holder| UniqueScope::holds(code, holder, None, 0))
        };
        assert_eq!(verdicts(0), [true, false, false, false, false]);
        assert_eq!(verdicts(1), [true, true, true, false, false]);
        assert_eq!(
            verdicts(2),
            [false; 5],
            "a period without an end holds nothing"
        );
        assert!(UniqueScope::holds(2, None, Some(10), 9));
        assert!(!UniqueScope::holds(2, pending, Some(10), 10));
    }

    #[test]
    fn a_batch_stores_the_first_job_of_each_key() {
        let job = |q: &str, k: Option<&str>| {
            let j = NewJob::new(q, b"x".to_vec());
            match k {
                Some(k) => j.unique_key(k),
                None => j,
            }
        };
        let jobs = [
            job("a", Some("k")),
            job("a", None),
            job("b", Some("k")),
            job("a", Some("k")),
            job("b", Some("k")),
            job("a", Some("j")),
        ];
        assert_eq!(
            earlier_with_key(&jobs),
            [None, None, None, Some(0), Some(2), None]
        );
    }

    #[test]
    fn bad_keys_and_periods_are_refused_by_name() {
        let refused = |j: NewJob| match j.validate() {
            Err(Error::Config(c)) => c.setting,
            other => panic!("not refused: {other:?}"),
        };
        let job = || NewJob::new("q", b"x".to_vec());
        assert_eq!(refused(job().unique_key("")), "unique_key");
        assert_eq!(refused(job().unique_key("a\0b")), "unique_key");
        assert_eq!(refused(job().unique_key("k".repeat(256))), "unique_key");
        let zero = UniqueScope::For(Duration::ZERO);
        assert_eq!(refused(job().unique("k", zero)), "unique period");
        let long = UniqueScope::For(MAX_DELAY + Duration::from_secs(1));
        assert_eq!(refused(job().unique("k", long)), "unique period");
        job().unique_key("k".repeat(255)).validate().unwrap();
    }
}
