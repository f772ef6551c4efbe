//! The broker's state behind its lock: queues, held jobs and their leases, and the jobs
//! kept for inspection.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::groups::Ended;
use super::ordering::{Lines, Unblock};
use super::queue::MemQueue;
use crate::admin::{AttemptError, ERROR_HISTORY, bounded_error};
use crate::broker::{JobRecord, JobState};
use crate::job::{IdMap, Job, JobCopy, JobId, LeaseId, Millis, NewJob, is_blocked, own_run_at};

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) next_id: i64,
    pub(super) queues: HashMap<String, MemQueue>,
    /// Every queue name seen, for good: a held job names its queue by its place here,
    /// which survives a purge that drops the queue itself.
    pub(super) names: Vec<Arc<str>>,
    pub(super) leased: IdMap<JobId, Held>,
    pub(super) leases: IdMap<LeaseId, Lease>,
    /// Dead and cancelled jobs, kept for inspection.
    pub(super) finished: IdMap<JobId, JobRecord>,
    /// The errors of each job's failed attempts, latest last, while it has any.
    pub(super) errors: IdMap<JobId, Vec<AttemptError>>,
    /// Queues that hand out nothing until resumed.
    pub(super) paused: BTreeSet<String>,
    /// Unique keys and their holders.
    pub(super) holds: super::unique::Holds,
    /// Ordering keys and their unfinished jobs.
    pub(super) lines: Lines,
    /// Groups and their unsettled members.
    pub(super) groups: super::groups::Groups,
    /// The windows of rate-limited queues; for a limit per key, the limit only.
    pub(super) windows: HashMap<String, crate::rate::Window>,
    /// The windows of the keys of queues limited per key.
    pub(super) key_windows: HashMap<String, super::rate::KeyWindows>,
    /// The rate keys of unfinished and dead jobs that have one.
    pub(super) rate_keys: IdMap<JobId, String>,
    pub(super) next_reap: Millis,
}

/// The broker's copy of a job held under a lease, for when the lease expires or the job
/// goes back: a [`JobCopy`] (a small payload inline) and its queue's place among the
/// broker's names, so that holding a job allocates nothing. A place rather than the shared
/// name: its count, raised on every fetch and lowered on every settlement, took about 6%
/// of the event loop's thread in a profile of a memory drain.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) copy: JobCopy,
    pub(super) queue: u32,
    /// When it was claimed: its attempt's start.
    pub(super) started: Millis,
}

impl Held {
    pub(super) fn lease(&self) -> LeaseId {
        self.copy.lease()
    }
}

#[derive(Debug)]
pub(super) struct Lease {
    pub(super) expires: Millis,
    pub(super) jobs: Vec<JobId>,
    pub(super) outstanding: usize,
}

/// A position in [`State::names`] as a held job keeps it.
pub(super) fn place(index: usize) -> u32 {
    u32::try_from(index).expect("fewer than 2^32 queue names")
}

/// How often, at most, a fetch looks for expired leases.
pub(super) const REAP_EVERY_MS: Millis = 100;

impl State {
    /// The queue of this name, created on first use.
    pub(super) fn queue(&mut self, name: &str) -> &mut MemQueue {
        if !self.queues.contains_key(name) {
            let index = self.named(name).unwrap_or_else(|| {
                self.names.push(Arc::from(name));
                place(self.names.len() - 1)
            });
            let q = MemQueue {
                index,
                ..MemQueue::default()
            };
            self.queues.insert(name.to_owned(), q);
        }
        self.queues.get_mut(name).expect("just made sure")
    }

    /// The place of `name` in [`State::names`], if a queue of that name was ever made.
    pub(super) fn name_index(&self, name: &str) -> Option<u32> {
        match self.queues.get(name) {
            Some(q) => Some(q.index),
            None => self.named(name),
        }
    }

    /// The place of `name` in [`State::names`], looked up in the list itself.
    pub(super) fn named(&self, name: &str) -> Option<u32> {
        self.names.iter().position(|n| &**n == name).map(place)
    }

    /// The whole job `held` keeps, in its queue.
    pub(super) fn job_of(&self, held: Held) -> Job {
        held.copy.into_job(&self.names[held.queue as usize])
    }

    /// Takes `count` settled jobs off `lease`, dropping it once none is left.
    pub(super) fn release_lease_slots(&mut self, lease: LeaseId, count: usize) {
        if count == 0 {
            return;
        }
        if let Some(l) = self.leases.get_mut(&lease) {
            l.outstanding -= count;
            if l.outstanding == 0 {
                self.leases.remove(&lease);
            }
        }
    }

    pub(super) fn reap(&mut self, now: Millis) {
        if now < self.next_reap {
            return;
        }
        self.next_reap = now + REAP_EVERY_MS;
        let expired: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|(_, l)| l.expires <= now)
            .map(|(id, _)| *id)
            .collect();
        for lease_id in expired {
            let Some(lease) = self.leases.remove(&lease_id) else {
                continue;
            };
            for id in lease.jobs {
                let held_here = self.leased.get(&id).is_some_and(|h| h.lease() == lease_id);
                if !held_here {
                    continue;
                }
                let held = self.leased.remove(&id).expect("checked above");
                let mut job = self.job_of(held);
                job.lease = LeaseId(0);
                if job.is_last_attempt() {
                    self.dead_letter(job, "lease expired on the final attempt".into(), now);
                } else {
                    self.queue(&job.queue).push(job, now);
                }
            }
        }
    }

    /// Adds the error of `job`'s current attempt to its history.
    pub(super) fn record_error(&mut self, job: &Job, error: &str, now: Millis) {
        let history = self.errors.entry(job.id).or_default();
        if history.len() >= ERROR_HISTORY {
            history.remove(0);
        }
        history.push(AttemptError {
            attempt: job.attempt,
            at: now,
            error: bounded_error(error).to_owned(),
        });
    }

    /// A record of `job` in `state`, with its error history.
    pub(super) fn record(
        &self,
        mut job: Job,
        state: JobState,
        finished_at: Option<Millis>,
    ) -> JobRecord {
        let errors = self.errors.get(&job.id).cloned().unwrap_or_default();
        let id = job.id;
        let blocked = state == JobState::Pending && is_blocked(job.run_at);
        job.run_at = own_run_at(job.run_at);
        JobRecord {
            job,
            state,
            last_error: errors.last().map(|e| e.error.clone()),
            errors,
            started_at: None,
            finished_at,
            unique_key: self.holds.key_of(id),
            ordering_key: self.lines.key_of(id).map(str::to_owned),
            rate_key: self.rate_keys.get(&id).cloned(),
            blocked,
        }
    }

    /// A record of a leased `job`, claimed at `started`.
    pub(super) fn record_held(&self, job: Job, started: Millis) -> JobRecord {
        let mut record = self.record(job, JobState::Leased, None);
        record.started_at = Some(started);
        record
    }

    /// Keeps `job` as finished in `state` (dead or cancelled), for inspection, and
    /// unblocks the next job of its ordering key: whether one was.
    pub(super) fn finish(&mut self, job: Job, state: JobState, now: Millis) -> bool {
        if state == JobState::Dead {
            self.queue(&job.queue).dead.push(job.id);
        }
        let id = job.id;
        let record = self.record(job, state, Some(now));
        if state == JobState::Cancelled {
            self.errors.remove(&id);
            self.rate_keys.remove(&id);
        }
        self.finished.insert(id, record);
        let next = self.leave_line(id, now);
        let how = match state {
            JobState::Dead => Ended::Dead,
            _ => Ended::Cancelled,
        };
        self.end_member(id, how, now) | next
    }

    /// Stores a new job (its unique key, if any, is the caller's to hold): its id.
    pub(super) fn store(&mut self, mut new: NewJob, now: Millis) -> JobId {
        let id = JobId(self.next_id);
        self.next_id += 1;
        let mut run_at = new.run_at_millis(now);
        if let Some(key) = new.ordering_key.take() {
            run_at = self.lines.enter(&new.queue, key, id, run_at);
        }
        if let Some(group) = new.group.take() {
            self.groups.join(&group, id);
        }
        if let Some(key) = new.rate_key.take() {
            self.rate_keys.insert(id, key);
        }
        let job = Job {
            id,
            queue: new.queue,
            payload: new.payload,
            priority: new.priority,
            run_at,
            attempt: 0,
            max_attempts: new.max_attempts,
            headers: new.headers,
            created_at: now,
            lease: LeaseId(0),
        };
        match self.queues.get_mut(&job.queue) {
            Some(q) => q.push(job, now),
            None => self.queue(&job.queue).push(job, now),
        }
        id
    }

    /// Counts a member of a group as settled, and enqueues the group's completion job when
    /// it was the last: whether it did.
    pub(super) fn end_member(&mut self, id: JobId, how: Ended, now: Millis) -> bool {
        let Some((group, completion)) = self.groups.ended(id, how) else {
            return false;
        };
        let id = self.store(completion, now);
        self.groups.fired(group, id);
        true
    }

    /// Takes a job that completed, died, was cancelled or purged off its key, and unblocks
    /// the key's next job: whether one was.
    pub(super) fn leave_line(&mut self, id: JobId, now: Millis) -> bool {
        match self.lines.leave(id, now) {
            Some(next) => self.unblock(next, now),
            None => false,
        }
    }

    /// Puts back a job that failed and waits for its retry at its `run_at`, stepping
    /// aside for the next jobs of its ordering key ([`Lines::step_aside`]).
    pub(super) fn step_aside(&mut self, mut job: Job, now: Millis) {
        let Some((stored, next)) = self.lines.step_aside(job.id, job.run_at, now) else {
            self.queue(&job.queue).push(job, now);
            return;
        };
        job.run_at = stored;
        self.queue(&job.queue).push(job, now);
        if let Some(next) = next {
            self.unblock(next, now);
        }
    }

    /// Moves a blocked job of a queue back to its own time: whether it was there.
    fn unblock(&mut self, (queue, next, stored): Unblock, now: Millis) -> bool {
        let Some(q) = self.queues.get_mut(&queue) else {
            return false;
        };
        match q.delayed.remove(&(stored, next)) {
            Some(mut job) => {
                job.run_at = own_run_at(stored);
                q.push(job, now);
                true
            }
            None => false,
        }
    }

    /// What `id` is when held or finished, with its attempts: `None` for any other job.
    pub(super) fn status(&self, id: JobId) -> Option<(JobState, u32)> {
        status(&self.leased, &self.finished, id)
    }

    /// Dead-letters `job`: whether the next job of its ordering key was unblocked.
    pub(super) fn dead_letter(&mut self, job: Job, error: String, now: Millis) -> bool {
        self.record_error(&job, &error, now);
        self.finish(job, JobState::Dead, now)
    }
}

/// [`State::status`], from the two maps alone, for a caller that holds the rest of the
/// state mutably.
pub(super) fn status(
    leased: &IdMap<JobId, Held>,
    finished: &IdMap<JobId, JobRecord>,
    id: JobId,
) -> Option<(JobState, u32)> {
    if let Some(held) = leased.get(&id) {
        return Some((JobState::Leased, held.copy.attempt()));
    }
    finished.get(&id).map(|rec| (rec.state, rec.job.attempt))
}
