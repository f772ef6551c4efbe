//! Unique keys on the memory broker ([`crate::job::UniqueScope`]): each key's holder, and
//! the jobs holding keys that have not left the broker, by which a holder is known to be
//! still pending. Every hook below costs one emptiness test while no job has a key.

use std::collections::HashMap;

use super::state::State;
use crate::broker::JobState;
use crate::job::{IdMap, JobId, Millis, UniqueKey, UniqueScope};

/// The job holding a key, with its scope's code and, for a period, its end.
#[derive(Debug)]
pub(super) struct Hold {
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
}

impl Holds {
    /// A worker took `job`: a queued-scope hold ends.
    pub(super) fn taken(&mut self, job: JobId) {
        if !self.waiting.is_empty() && self.waiting.get(&job) == Some(&0) {
            self.waiting.remove(&job);
        }
    }
}

impl State {
    /// The job holding `key` in `queue` at `now`, if its hold still stands.
    pub(super) fn holder(&self, queue: &str, key: &str, now: Millis) -> Option<JobId> {
        let hold = self.holds.by_key.get(&(queue.to_owned(), key.to_owned()))?;
        let state = if let Some(held) = self.leased.get(&hold.job) {
            Some((JobState::Leased, held.copy.attempt()))
        } else if let Some(rec) = self.finished.get(&hold.job) {
            Some((rec.state, rec.job.attempt))
        } else {
            // Still here and not held nor finished: pending. A queued-scope holder leaves
            // `waiting` when first taken, so one found here was never charged.
            self.holds
                .waiting
                .contains_key(&hold.job)
                .then_some((JobState::Pending, if hold.code == 0 { 0 } else { 1 }))
        };
        UniqueScope::holds(hold.code, state, hold.until, now).then_some(hold.job)
    }

    /// Records `job` as the holder of `unique` in `queue`, taken at `now`.
    pub(super) fn hold(&mut self, queue: &str, unique: UniqueKey, job: JobId, now: Millis) {
        let code = unique.scope.code();
        let until = unique.scope.until(now);
        self.holds
            .by_key
            .insert((queue.to_owned(), unique.key), Hold { job, code, until });
        self.holds.waiting.insert(job, code);
        if self.holds.by_key.len() > (2 * self.holds.kept).max(1024) {
            self.prune_holds(now);
            self.holds.kept = self.holds.by_key.len();
        }
    }

    /// `queue` was purged: its jobs' holds end, but not holds for a period, which outlive
    /// their jobs.
    pub(super) fn unique_purged(&mut self, queue: &str) {
        if self.holds.by_key.is_empty() {
            return;
        }
        let waiting = &mut self.holds.waiting;
        self.holds.by_key.retain(|(q, _), hold| {
            let keep = q != queue || hold.code == 2;
            if !keep {
                waiting.remove(&hold.job);
            }
            keep
        });
    }

    /// `job` left the broker (acknowledged, discarded, purged): its hold ends.
    pub(super) fn unique_gone(&mut self, job: JobId) {
        if !self.holds.waiting.is_empty() {
            self.holds.waiting.remove(&job);
        }
    }

    /// Drops the holds of keys whose hold can no longer stand, so that keys used once do
    /// not stay forever: those of jobs gone, finished or past their period.
    pub(super) fn prune_holds(&mut self, now: Millis) {
        if self.holds.by_key.is_empty() {
            return;
        }
        let stale: Vec<(String, String)> = self
            .holds
            .by_key
            .iter()
            .filter(|((q, k), _)| self.holder(q, k, now).is_none())
            .map(|(key, _)| key.clone())
            .collect();
        for key in stale {
            if let Some(hold) = self.holds.by_key.remove(&key) {
                if !self.leased.contains_key(&hold.job) && !self.finished.contains_key(&hold.job) {
                    self.holds.waiting.remove(&hold.job);
                }
            }
        }
    }
}
