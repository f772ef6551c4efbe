//! A memory queue: its due jobs in one FIFO per priority, and its delayed jobs by due time.

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};

use crate::job::{Job, JobId, Millis};

#[derive(Debug, Default)]
pub(super) struct MemQueue {
    /// This queue's place in [`State::names`].
    pub(super) index: u32,
    /// Due jobs: one FIFO per priority, highest priority first.
    pub(super) ready: BTreeMap<Reverse<i32>, VecDeque<Job>>,
    pub(super) ready_len: usize,
    /// Jobs not due yet, by `(run_at, id)`.
    pub(super) delayed: BTreeMap<(Millis, JobId), Job>,
    pub(super) dead: Vec<JobId>,
}

impl MemQueue {
    /// Puts a due job in its FIFO at its `(run_at, id)` place: at the back in the common case.
    pub(super) fn push_ready(&mut self, job: Job) {
        let fifo = self.ready.entry(Reverse(job.priority)).or_default();
        let key = (job.run_at, job.id);
        match fifo.back() {
            Some(last) if (last.run_at, last.id) > key => {
                let at = fifo.partition_point(|j| (j.run_at, j.id) < key);
                fifo.insert(at, job);
            }
            _ => fifo.push_back(job),
        }
        self.ready_len += 1;
    }

    pub(super) fn push(&mut self, job: Job, now: Millis) {
        if job.run_at > now {
            self.delayed.insert((job.run_at, job.id), job);
        } else {
            self.push_ready(job);
        }
    }

    pub(super) fn promote_due(&mut self, now: Millis) {
        while let Some(entry) = self.delayed.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let job = entry.remove();
            self.push_ready(job);
        }
    }

    /// The next due job. A priority level it empties goes to `emptied`, for the caller to
    /// free once the broker's lock is released: after a deep backlog its buffer is large
    /// (120 MiB for a million jobs), and unmapping it took 20 ms, during which no producer
    /// could enqueue.
    pub(super) fn pop(&mut self, emptied: &mut Vec<VecDeque<Job>>) -> Option<Job> {
        let mut entry = self.ready.first_entry()?;
        let job = entry.get_mut().pop_front();
        if entry.get().is_empty() {
            emptied.push(entry.remove());
        }
        if job.is_some() {
            self.ready_len -= 1;
        }
        job
    }

    pub(super) fn remove_pending(&mut self, id: JobId) -> Option<Job> {
        if let Some(key) = self.delayed.keys().find(|k| k.1 == id).copied() {
            return self.delayed.remove(&key);
        }
        for (prio, fifo) in self.ready.iter_mut() {
            if let Some(at) = fifo.iter().position(|j| j.id == id) {
                let job = fifo.remove(at);
                let prio = *prio;
                if fifo.is_empty() {
                    self.ready.remove(&prio);
                }
                self.ready_len -= 1;
                return job;
            }
        }
        None
    }

    pub(super) fn find_pending(&self, id: JobId) -> Option<&Job> {
        self.ready
            .values()
            .flat_map(|f| f.iter())
            .chain(self.delayed.values())
            .find(|j| j.id == id)
    }
}
