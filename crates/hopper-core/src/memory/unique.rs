//! Unique keys on the memory broker ([`crate::job::UniqueScope`]): each key's holder, and
//! the jobs holding keys that have not left the broker, by which a holder is known to be
//! still pending. Every hook below costs one emptiness test while no job has a key.
//!
//! What a holder is when it is held or finished, the broker's state says; the calls here
//! take it as `status`.

use std::collections::HashMap;

use crate::job::JobState;
use crate::job::{IdMap, JobId, Millis, UniqueKey, UniqueScope};

/// The job holding a key, with its scope's code and, for a period, its end.
#[derive(Debug)]
struct Hold {
    job: JobId,
    code: i16,
    until: Option<Millis>,
}

/// Keys by queue and key, and the jobs holding them.
#[derive(Debug, Default)]
pub(super) struct Holds {
    by_key: HashMap<(String, String), Hold>,
    /// Jobs that took a key and are still in the broker, never yet taken by a worker when
    /// their scope is `Queued`: with the scope's code.
    waiting: IdMap<JobId, i16>,
    /// How many keys the last pruning left: the next runs once there are twice as many.
    kept: usize,
    /// The key each job still in the broker was enqueued with, for its record.
    keys: IdMap<JobId, String>,
}

impl Holds {
    /// The job holding `key` in `queue` at `now`, if its hold still stands. `status` says
    /// what a job held or finished is, and its attempts; `None` for any other job.
    pub(super) fn holder(
        &self,
        queue: &str,
        key: &str,
        now: Millis,
        status: impl Fn(JobId) -> Option<(JobState, u32)>,
    ) -> Option<JobId> {
        let hold = self.by_key.get(&(queue.to_owned(), key.to_owned()))?;
        self.stands(hold, now, &status).then_some(hold.job)
    }

    fn stands(
        &self,
        hold: &Hold,
        now: Millis,
        status: &impl Fn(JobId) -> Option<(JobState, u32)>,
    ) -> bool {
        // Not held nor finished but still here: pending. A queued-scope holder leaves
        // `waiting` when first taken, so one found here was never charged.
        let state = status(hold.job).or_else(|| {
            self.waiting
                .contains_key(&hold.job)
                .then_some((JobState::Pending, if hold.code == 0 { 0 } else { 1 }))
        });
        UniqueScope::holds(hold.code, state, hold.until, now)
    }

    /// Records `job` as the holder of `unique` in `queue`, taken at `now`; prunes the
    /// keys whose holds ended once they have doubled since the last pruning.
    pub(super) fn hold(
        &mut self,
        queue: &str,
        unique: UniqueKey,
        job: JobId,
        now: Millis,
        status: impl Fn(JobId) -> Option<(JobState, u32)>,
    ) {
        let code = unique.scope.code();
        let until = unique.scope.until(now);
        self.keys.insert(job, unique.key.clone());
        self.by_key
            .insert((queue.to_owned(), unique.key), Hold { job, code, until });
        self.waiting.insert(job, code);
        if self.by_key.len() > (2 * self.kept).max(1024) {
            self.prune(now, &status);
            self.kept = self.by_key.len();
        }
    }

    /// A worker took `job`: a queued-scope hold ends.
    pub(super) fn taken(&mut self, job: JobId) {
        if !self.waiting.is_empty() && self.waiting.get(&job) == Some(&0) {
            self.waiting.remove(&job);
        }
    }

    /// `job` left the broker (acknowledged, discarded): its hold ends.
    pub(super) fn gone(&mut self, job: JobId) {
        if !self.keys.is_empty() {
            self.waiting.remove(&job);
            self.keys.remove(&job);
        }
    }

    /// The key `job` was enqueued with, while it is in the broker.
    pub(super) fn key_of(&self, job: JobId) -> Option<String> {
        match self.keys.is_empty() {
            true => None,
            false => self.keys.get(&job).cloned(),
        }
    }

    /// `queue` was purged: its jobs' holds end, but not holds for a period, which outlive
    /// their jobs.
    pub(super) fn purged(&mut self, queue: &str) {
        if self.by_key.is_empty() {
            return;
        }
        let (waiting, keys) = (&mut self.waiting, &mut self.keys);
        self.by_key.retain(|(q, _), hold| {
            if q == queue {
                keys.remove(&hold.job);
            }
            let keep = q != queue || hold.code == 2;
            if !keep {
                waiting.remove(&hold.job);
            }
            keep
        });
    }

    /// Drops the keys whose hold can no longer stand, so that keys used once do not stay
    /// forever.
    fn prune(&mut self, now: Millis, status: &impl Fn(JobId) -> Option<(JobState, u32)>) {
        let stale: Vec<((String, String), JobId)> = self
            .by_key
            .iter()
            .filter(|(_, hold)| !self.stands(hold, now, status))
            .map(|(key, hold)| (key.clone(), hold.job))
            .collect();
        for (key, job) in stale {
            self.by_key.remove(&key);
            if status(job).is_none() {
                self.waiting.remove(&job);
            }
        }
    }
}
