//! Ordering keys in memory: each key's unfinished jobs, so that only the first of them
//! runs and the next is unblocked when it ends (see [`crate::job::ordering`]).

use std::collections::{BTreeMap, HashMap};

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
}

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

    /// Takes out a job that ended: the job to unblock, with the `run_at` it is stored
    /// with, when every job left of its key is blocked.
    pub(super) fn leave(&mut self, id: JobId) -> Option<(String, JobId, Millis)> {
        if self.keys.is_empty() {
            return None;
        }
        let line = self.keys.remove(&id)?;
        let jobs = self.lines.get_mut(&line)?;
        jobs.remove(&id);
        if jobs.values().any(|&at| !is_blocked(at)) {
            return None;
        }
        let Some((&next, at)) = jobs.iter_mut().next() else {
            self.lines.remove(&line);
            return None;
        };
        let stored = *at;
        *at = own_run_at(stored);
        Some((line.0, next, stored))
    }

    /// Forgets every key of a purged queue.
    pub(super) fn purged(&mut self, queue: &str) {
        if self.keys.is_empty() {
            return;
        }
        self.lines.retain(|(q, _), _| q != queue);
        self.keys.retain(|_, (q, _)| q != queue);
    }
}
