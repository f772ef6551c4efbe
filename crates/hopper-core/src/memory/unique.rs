//! Unique keys on the memory broker ([`crate::job::UniqueScope`]): each key's holder, and
//! what the broker must know of the jobs that took keys to decide, as the SQL brokers do
//! from a job's row, whether a hold still stands. Every hook below costs one emptiness
//! test while no job has a key.
//!
//! What a holder is when it is held or finished, the broker's state says; the calls here
//! take it as `status`. A job that is neither is pending while it is in `keyed`, and
//! uncharged while it is in `uncharged`.

use std::collections::HashMap;

use crate::job::{IdMap, IdSet, JobId, JobState, Millis, UniqueKey, UniqueScope};

/// The job holding a key, with its scope's code and, for a period, its end.
#[derive(Debug)]
struct Hold {
    job: JobId,
    code: i16,
    until: Option<Millis>,
}

/// The key a job still in the broker was enqueued with, and its queue.
#[derive(Debug)]
struct Keyed {
    queue: String,
    key: String,
}

/// Keys by queue and key, and the jobs that took them.
#[derive(Debug, Default)]
pub(super) struct Holds {
    by_key: HashMap<(String, String), Hold>,
    /// Jobs that took a key and are still in the broker, by id.
    keyed: IdMap<JobId, Keyed>,
    /// Of those, the ones pending with no attempt charged: never taken yet, or handed back
    /// uncharged (released, snoozed, re-driven). A `Queued` hold stands while its job is
    /// here, as the SQL brokers read `state = pending AND attempt = 0`.
    uncharged: IdSet<JobId>,
    /// How many keys the last pruning left: the next runs once there are twice as many.
    kept: usize,
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
        let state = status(hold.job).or_else(|| {
            let attempt = if self.uncharged.contains(&hold.job) {
                0
            } else {
                1
            };
            self.keyed
                .contains_key(&hold.job)
                .then_some((JobState::Pending, attempt))
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
        let keyed = Keyed {
            queue: queue.to_owned(),
            key: unique.key.clone(),
        };
        self.keyed.insert(job, keyed);
        self.uncharged.insert(job);
        self.by_key
            .insert((queue.to_owned(), unique.key), Hold { job, code, until });
        if self.by_key.len() > (2 * self.kept).max(1024) {
            self.prune(now, &status);
            self.kept = self.by_key.len();
        }
    }

    /// A worker took `job`: an attempt is charged.
    pub(super) fn taken(&mut self, job: JobId) {
        if !self.uncharged.is_empty() {
            self.uncharged.remove(&job);
        }
    }

    /// `job` is pending again with no attempt charged (released, snoozed, re-driven).
    pub(super) fn uncharged(&mut self, job: JobId) {
        if !self.keyed.is_empty() && self.keyed.contains_key(&job) {
            self.uncharged.insert(job);
        }
    }

    /// `job` left the broker (acknowledged, discarded): its hold ends.
    pub(super) fn gone(&mut self, job: JobId) {
        if !self.keyed.is_empty() {
            self.keyed.remove(&job);
            self.uncharged.remove(&job);
        }
    }

    /// The key `job` was enqueued with, while it is in the broker.
    pub(super) fn key_of(&self, job: JobId) -> Option<String> {
        match self.keyed.is_empty() {
            true => None,
            false => self.keyed.get(&job).map(|k| k.key.clone()),
        }
    }

    /// `queue` was purged: its jobs are gone, and with them their holds, but not holds
    /// for a period, which outlive their jobs.
    pub(super) fn purged(&mut self, queue: &str) {
        if self.keyed.is_empty() && self.by_key.is_empty() {
            return;
        }
        let uncharged = &mut self.uncharged;
        self.keyed.retain(|job, k| {
            let keep = k.queue != queue;
            if !keep {
                uncharged.remove(job);
            }
            keep
        });
        self.by_key
            .retain(|(q, _), hold| q != queue || hold.code == 2);
    }

    /// Drops the keys whose hold can no longer stand, so that keys used once do not stay
    /// forever. The jobs stay known while they are in the broker: one handed back
    /// uncharged holds a `Queued` key again only while no other job took it meanwhile.
    fn prune(&mut self, now: Millis, status: &impl Fn(JobId) -> Option<(JobState, u32)>) {
        let stale: Vec<(String, String)> = self
            .by_key
            .iter()
            .filter(|(_, hold)| !self.stands(hold, now, status))
            .map(|(key, _)| key.clone())
            .collect();
        for key in stale {
            self.by_key.remove(&key);
        }
    }
}
