//! Ordering keys in memory: each key's unfinished jobs, so that only one of them runs and
//! the next is unblocked when it ends or steps aside (see [`crate::job::ordering`]).

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::id::IdMap;
use crate::job::{JobId, Millis, is_blocked, ordering, own_run_at};

/// A key of one queue.
type Line = (String, String);

#[derive(Debug, Default)]
pub(super) struct Lines {
    /// Each key's unfinished jobs by id, with the `run_at` each is stored with: blocked
    /// ones sit past [`ordering::BLOCKED`] in their queue's delayed jobs.
    lines: HashMap<Line, BTreeMap<JobId, Millis>>,
    /// The key of each unfinished job that has one.
    keys: IdMap<JobId, Line>,
    /// The blocked jobs that stepped aside for their retry ([`Lines::step_aside`]).
    aside: HashSet<JobId>,
}

/// A job to unblock: its queue, its id and the `run_at` it is stored with.
pub(super) type Unblock = (String, JobId, Millis);

impl Lines {
    /// Takes in a job of `key` stored at `run_at`: the `run_at` to store it with, blocked
    /// when another job of the key is unfinished.
    pub(super) fn enter(&mut self, queue: &str, key: String, id: JobId, run_at: Millis) -> Millis {
        let line = (queue.to_owned(), key);
        let jobs = self.lines.entry(line.clone()).or_default();
        let stored = match jobs.is_empty() {
            true => run_at,
            false => ordering::blocked(run_at),
        };
        jobs.insert(id, stored);
        self.keys.insert(id, line);
        stored
    }

    /// The ordering key of an unfinished job.
    pub(super) fn key_of(&self, id: JobId) -> Option<&str> {
        self.keys.get(&id).map(|(_, key)| key.as_str())
    }

    /// Takes out a job that ended: the job to unblock when every job left of its key is
    /// blocked ([`Lines::next`]).
    pub(super) fn leave(&mut self, id: JobId, now: Millis) -> Option<Unblock> {
        if self.keys.is_empty() {
            return None;
        }
        let line = self.keys.remove(&id)?;
        if !self.aside.is_empty() {
            self.aside.remove(&id);
        }
        let jobs = self.lines.get_mut(&line)?;
        jobs.remove(&id);
        if jobs.is_empty() {
            self.lines.remove(&line);
            return None;
        }
        if jobs.values().any(|&at| !is_blocked(at)) {
            return None;
        }
        self.next(line, now)
    }

    /// A job of a key that failed and waits for its retry at `run_at` steps aside, when
    /// other jobs of its key wait: it is blocked, and the key's next job is chosen as when
    /// a job ends. Returns the `run_at` to store it with and the job to unblock, which may
    /// be itself; `None` when it keeps its key as it is.
    pub(super) fn step_aside(
        &mut self,
        id: JobId,
        run_at: Millis,
        now: Millis,
    ) -> Option<(Millis, Option<Unblock>)> {
        let line = self.keys.get(&id)?.clone();
        let jobs = self.lines.get_mut(&line)?;
        if jobs.len() < 2 {
            return None;
        }
        let stored = ordering::blocked(run_at);
        jobs.insert(id, stored);
        self.aside.insert(id);
        Some((stored, self.next(line, now)))
    }

    /// Unblocks the next job of `line`, all of whose jobs are blocked: the first by id,
    /// passing over those that stepped aside and whose time has not come; when every job
    /// is such, the one whose time comes first.
    fn next(&mut self, line: Line, now: Millis) -> Option<Unblock> {
        let jobs = self.lines.get_mut(&line)?;
        let aside = &self.aside;
        let waits = |id: &JobId, at: &Millis| aside.contains(id) && own_run_at(*at) > now;
        let next = match jobs.iter().find(|(id, at)| !waits(id, at)) {
            Some((&id, _)) => id,
            None => {
                *jobs
                    .iter()
                    .min_by_key(|(id, at)| (own_run_at(**at), **id))?
                    .0
            }
        };
        let at = jobs.get_mut(&next)?;
        let stored = *at;
        *at = own_run_at(stored);
        self.aside.remove(&next);
        Some((line.0, next, stored))
    }

    /// Forgets every key of a purged queue.
    pub(super) fn purged(&mut self, queue: &str) {
        if self.keys.is_empty() {
            return;
        }
        self.lines.retain(|(q, _), _| q != queue);
        let aside = &mut self.aside;
        self.keys.retain(|id, (q, _)| {
            let keep = q != queue;
            if !keep {
                aside.remove(id);
            }
            keep
        });
    }
}
