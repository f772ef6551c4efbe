//! The in-process broker (`memory://`): FIFO and priority queues, delayed jobs, leases, and
//! [topics](topic). Fastest of all brokers, and nothing survives the process.
//!
//! Each queue keeps its due jobs in one FIFO per priority level, ordered by `run_at` then
//! id, so the common case (every job at one priority, enqueued now) is a push and a pop on
//! a `VecDeque`. Delayed jobs wait in a map ordered by `run_at` and join their FIFO when
//! due. Held jobs stay here under their lease until settled, so an expired lease returns
//! them exactly as the durable brokers do.

mod admin;
mod groups;
mod ordering;
mod queue;
mod rate;
mod registry;
mod state;
pub mod topic;
mod unique;

use std::cmp::Reverse;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::admin::{JobPage, JobQuery, QueueStatus, Selection};
use crate::broker::{
    Broker, CancelOutcome, Capabilities, CheckedJobs, FetchRequest, Fetched, JobRecord, JobState,
    Outcome, QueueCounts, SettleReport, Settlement,
};
use crate::clock::Clock;
use crate::error::Result;
use crate::job::{
    Enqueued, Job, JobCopy, JobId, LeaseId, Millis, NewJob, earlier_with_key, is_blocked,
};
use crate::registry::{Bucket, WorkerBeat, WorkerInfo};
use groups::Ended;
use state::{Held, Lease, State, status};
pub use topic::{Subscription, Topic};

/// The in-process broker. Cheap to clone: clones share the same queues.
#[derive(Debug, Clone)]
pub struct MemoryBroker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    // A std mutex, not tokio's: no critical section awaits, and each is a few map
    // operations, far shorter than an async lock's own cost.
    state: Mutex<State>,
    wake: watch::Sender<u64>,
    clock: Clock,
    topics: Mutex<HashMap<String, Topic>>,
    registry: Mutex<registry::Registry>,
}

impl Default for MemoryBroker {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBroker {
    /// An empty broker on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Clock::System)
    }

    /// An empty broker reading time from `clock` (tests use [`Clock::tokio`]).
    pub fn with_clock(clock: Clock) -> Self {
        MemoryBroker {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    next_id: 1,
                    ..State::default()
                }),
                wake: watch::channel(0).0,
                clock,
                topics: Mutex::new(HashMap::new()),
                registry: Mutex::default(),
            }),
        }
    }

    /// The topic of this name, created on first use.
    pub fn topic(&self, name: &str) -> Result<Topic> {
        crate::job::validate_queue_name(name)?;
        let mut topics = self.inner.topics.lock().unwrap_or_else(|e| e.into_inner());
        Ok(topics
            .entry(name.to_owned())
            .or_insert_with(Topic::new)
            .clone())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // loses jobs (each operation moves a job in one step), so a poisoned lock is used.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wake(&self) {
        self.inner.wake.send_modify(|n| *n = n.wrapping_add(1));
    }
}

#[async_trait]
impl Broker for MemoryBroker {
    fn capabilities(&self) -> Capabilities {
        Capabilities::in_process("memory")
            .with_unique()
            .with_ordered()
            .with_rate_limits_per_key()
            .with_groups()
    }

    async fn enqueue_checked(&self, jobs: CheckedJobs) -> Result<Vec<Enqueued>> {
        let now = self.inner.clock.now_millis();
        let mut ids: Vec<Enqueued> = Vec::with_capacity(jobs.len());
        let earlier = match jobs.iter().any(|j| j.unique.is_some()) {
            true => earlier_with_key(&jobs),
            false => Vec::new(),
        };
        {
            let mut st = self.state();
            st.groups.check_open(&jobs)?;
            for (i, mut new) in jobs.into_iter().enumerate() {
                if let Some(&Some(first)) = earlier.get(i) {
                    ids.push(Enqueued::existing(ids[first].id));
                    continue;
                }
                let unique = new.unique.take();
                if let Some(u) = &unique {
                    let holder = st.holds.holder(&new.queue, &u.key, now, |id| st.status(id));
                    if let Some(holder) = holder {
                        ids.push(Enqueued::existing(holder));
                        continue;
                    }
                }
                let queue = unique.as_ref().map(|_| new.queue.clone());
                let id = st.store(new, now);
                if let (Some(u), Some(queue)) = (unique, queue) {
                    let st = &mut *st;
                    let (holds, leased, finished) = (&mut st.holds, &st.leased, &st.finished);
                    holds.hold(&queue, u, id, now, |id| status(leased, finished, id));
                }
                ids.push(Enqueued::stored(id));
            }
        }
        self.wake();
        Ok(ids)
    }

    async fn fetch(&self, request: FetchRequest) -> Result<Fetched> {
        let now = self.inner.clock.now_millis();
        let lease = LeaseId::random();
        let mut jobs = Vec::with_capacity(request.total().min(1024));
        let mut next_due = None;
        // Declared before the guard, so dropped after it: freed outside the lock.
        let mut emptied = Vec::new();
        let mut guard = self.state();
        guard.reap(now);
        let st = &mut *guard;
        for budget in &request.budgets {
            if !st.paused.is_empty() && st.paused.contains(&budget.queue) {
                continue;
            }
            let Some(q) = st.queues.get_mut(&budget.queue) else {
                continue;
            };
            q.promote_due(now);
            let before = jobs.len();
            let mut window = match st.windows.is_empty() {
                true => None,
                false => st.windows.get_mut(&budget.queue),
            };
            let index = q.index;
            let mut take = |mut job: Job| {
                st.holds.taken(job.id);
                job.attempt += 1;
                job.lease = lease;
                let held = Held {
                    copy: JobCopy::new(&job),
                    queue: index,
                    started: now,
                };
                st.leased.insert(job.id, held);
                jobs.push(job);
            };
            match &mut window {
                Some(w) if w.limit().per_key => {
                    let keys = st.key_windows.entry(budget.queue.clone()).or_default();
                    let (limit, want) = (w.limit(), budget.limit);
                    rate::claim(q, keys, &st.rate_keys, limit, want, now, &mut emptied, take);
                }
                _ => {
                    let limit = match &mut window {
                        Some(w) => budget.limit.min(w.room(now)),
                        None => budget.limit,
                    };
                    for _ in 0..limit {
                        match q.pop(&mut emptied) {
                            Some(job) => take(job),
                            None => break,
                        }
                    }
                    if let Some(w) = window {
                        let took = jobs.len() - before;
                        w.started(took, now);
                        if let Some(at) = w.next_room().filter(|_| !q.ready.is_empty()) {
                            // Jobs are due but the window is full: due again when it has
                            // room.
                            next_due = Some(next_due.map_or(at, |n: Millis| n.min(at)));
                        }
                    }
                }
            }
            if jobs.len() - before < budget.limit {
                match q.delayed.first_key_value() {
                    Some(((at, _), _)) if !is_blocked(*at) => {
                        next_due = Some(next_due.map_or(*at, |n: Millis| n.min(*at)));
                    }
                    _ => {}
                }
            }
        }
        if request.budgets.len() > 1 {
            jobs.sort_by_key(|j| (Reverse(j.priority), j.run_at, j.id));
        }
        if !jobs.is_empty() {
            let ttl = request.lease_ttl.as_millis() as i64;
            st.leases.insert(
                lease,
                Lease {
                    expires: now + ttl,
                    jobs: jobs.iter().map(|j| j.id).collect(),
                    outstanding: jobs.len(),
                },
            );
        }
        Ok(Fetched {
            lease,
            jobs,
            next_due,
        })
    }

    async fn settle(&self, settlements: Vec<Settlement>) -> Result<SettleReport> {
        let now = self.inner.clock.now_millis();
        let mut report = SettleReport::default();
        let mut requeued = false;
        {
            let mut st = self.state();
            // A batch settles a fetch's jobs mostly side by side: each run of one lease
            // comes off that lease in one step, not one map lookup per job.
            let (mut run_lease, mut run) = (LeaseId(0), 0);
            for s in settlements {
                let held = match st.leased.entry(s.job) {
                    Entry::Occupied(e) if e.get().lease() == s.lease => e.remove(),
                    _ => {
                        report.fenced.push(s.job);
                        continue;
                    }
                };
                if s.lease != run_lease {
                    st.release_lease_slots(run_lease, run);
                    (run_lease, run) = (s.lease, 0);
                }
                run += 1;
                report.applied += 1;
                if let Outcome::Ack = s.outcome {
                    if !st.errors.is_empty() {
                        st.errors.remove(&s.job);
                    }
                    st.holds.gone(s.job);
                    if !st.rate_keys.is_empty() {
                        st.rate_keys.remove(&s.job);
                    }
                    requeued |= st.leave_line(s.job, now);
                    requeued |= st.end_member(s.job, Ended::Succeeded, now);
                    continue;
                }
                let mut job = st.job_of(held);
                job.lease = LeaseId(0);
                match s.outcome {
                    Outcome::Ack => unreachable!("settled above"),
                    Outcome::Retry {
                        delay,
                        error,
                        step_aside,
                    } => {
                        st.record_error(&job, &error, now);
                        job.run_at = now + delay.as_millis() as i64;
                        match step_aside {
                            true => st.step_aside(job, now),
                            false => st.queue(&job.queue).push(job, now),
                        }
                        requeued = true;
                    }
                    Outcome::DeadLetter { error } => requeued |= st.dead_letter(job, error, now),
                    Outcome::Release => {
                        job.attempt = job.attempt.saturating_sub(1);
                        if job.attempt == 0 {
                            st.holds.uncharged(job.id);
                        }
                        st.queue(&job.queue).push(job, now);
                        requeued = true;
                    }
                    Outcome::Snooze { delay } => {
                        job.attempt = job.attempt.saturating_sub(1);
                        if job.attempt == 0 {
                            st.holds.uncharged(job.id);
                        }
                        job.run_at = now + delay.as_millis() as i64;
                        st.queue(&job.queue).push(job, now);
                        requeued = true;
                    }
                    Outcome::Cancel => requeued |= st.finish(job, JobState::Cancelled, now),
                }
            }
            st.release_lease_slots(run_lease, run);
        }
        if requeued {
            self.wake();
        }
        Ok(report)
    }

    async fn renew(&self, leases: &[LeaseId], ttl: Duration) -> Result<Vec<LeaseId>> {
        let now = self.inner.clock.now_millis();
        let mut st = self.state();
        st.reap(now);
        let mut lost = Vec::new();
        for id in leases {
            match st.leases.get_mut(id) {
                Some(l) if l.expires > now => l.expires = now + ttl.as_millis() as i64,
                _ => lost.push(*id),
            }
        }
        Ok(lost)
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        let mut st = self.state();
        if let Some(job) = st.leased.get(&id) {
            return Ok(CancelOutcome::Held(job.lease()));
        }
        let found = st.queues.values_mut().find_map(|q| q.remove_pending(id));
        match found {
            Some(job) => {
                if st.finish(job, JobState::Cancelled, self.inner.clock.now_millis()) {
                    drop(st);
                    self.wake();
                }
                Ok(CancelOutcome::Cancelled)
            }
            None => Ok(CancelOutcome::NotFound),
        }
    }

    async fn job(&self, id: JobId) -> Result<Option<JobRecord>> {
        let st = self.state();
        if let Some(held) = st.leased.get(&id) {
            let job = held.copy.to_job(&st.names[held.queue as usize]);
            return Ok(Some(st.record_held(job, held.started)));
        }
        if let Some(rec) = st.finished.get(&id) {
            return Ok(Some(rec.clone()));
        }
        Ok(st
            .queues
            .values()
            .find_map(|q| q.find_pending(id))
            .map(|job| st.record(job.clone(), JobState::Pending, None)))
    }

    async fn counts(&self, queue: &str) -> Result<QueueCounts> {
        let now = self.inner.clock.now_millis();
        Ok(admin::counts_of(&self.state(), queue, now))
    }

    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<JobRecord>> {
        let st = self.state();
        let Some(q) = st.queues.get(queue) else {
            return Ok(Vec::new());
        };
        Ok(q.dead
            .iter()
            .filter_map(|id| st.finished.get(id))
            .filter(|r| r.state == JobState::Dead)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn purge(&self, queue: &str) -> Result<u64> {
        let mut st = self.state();
        let mut gone = 0u64;
        let index = st.name_index(queue);
        st.holds.purged(queue);
        st.lines.purged(queue);
        let mut purged = Vec::new();
        if let Some(q) = st.queues.remove(queue) {
            gone += (q.ready_len + q.delayed.len() + q.dead.len()) as u64;
            for id in q.dead {
                st.finished.remove(&id);
                st.rate_keys.remove(&id);
            }
            let waiting = q.ready.values().flatten().chain(q.delayed.values());
            purged.extend(waiting.map(|j| j.id));
        }
        let held: Vec<JobId> = st
            .leased
            .values()
            .filter(|h| Some(h.queue) == index)
            .map(|h| h.copy.id())
            .collect();
        for id in held {
            if let Some(job) = st.leased.remove(&id) {
                st.release_lease_slots(job.lease(), 1);
                purged.push(id);
                gone += 1;
            }
        }
        // Purged members count as cancelled: their groups may complete.
        let now = self.inner.clock.now_millis();
        let mut fired = false;
        for id in purged {
            st.rate_keys.remove(&id);
            fired |= st.end_member(id, Ended::Cancelled, now);
        }
        drop(st);
        if fired {
            self.wake();
        }
        Ok(gone)
    }

    async fn list_jobs(&self, query: &JobQuery) -> Result<JobPage> {
        query.validate()?;
        Ok(self.list(query))
    }

    async fn retry_dead(&self, which: &Selection) -> Result<u64> {
        Ok(self.redrive(which, true))
    }

    async fn discard_dead(&self, which: &Selection) -> Result<u64> {
        Ok(self.redrive(which, false))
    }

    async fn set_paused(&self, queue: &str, paused: bool) -> Result<bool> {
        crate::job::validate_queue_name(queue)?;
        Ok(self.pause(queue, paused))
    }

    async fn seal_group(
        &self,
        group: &str,
        completion: NewJob,
    ) -> Result<crate::group::GroupStatus> {
        crate::group::validate_completion(group, &completion)?;
        let now = self.inner.clock.now_millis();
        let mut st = self.state();
        let fired = match st.groups.seal(group, completion)? {
            Some((place, job)) => {
                let id = st.store(job, now);
                st.groups.fired(place, id);
                true
            }
            None => false,
        };
        let status = st.groups.status(group).expect("sealed above");
        drop(st);
        if fired {
            self.wake();
        }
        Ok(status)
    }

    async fn group(&self, group: &str) -> Result<Option<crate::group::GroupStatus>> {
        crate::group::validate_group(group)?;
        Ok(self.state().groups.status(group))
    }

    async fn set_rate_limit(&self, queue: &str, limit: Option<crate::RateLimit>) -> Result<()> {
        crate::job::validate_queue_name(queue)?;
        let mut st = self.state();
        match limit {
            // A limit set again, or changed, keeps its window: setting one must not allow
            // a burst.
            Some(limit) => {
                st.windows
                    .entry(queue.to_owned())
                    .and_modify(|w| w.set_limit(limit))
                    .or_insert_with(|| crate::rate::Window::new(limit));
            }
            None => {
                st.windows.remove(queue);
                st.key_windows.remove(queue);
            }
        }
        drop(st);
        self.wake();
        Ok(())
    }

    async fn queues(&self) -> Result<Vec<String>> {
        Ok(self.queue_names())
    }

    async fn queue_stats(&self, queue: &str) -> Result<QueueStatus> {
        Ok(self.stats(queue))
    }

    async fn heartbeat(&self, beat: &WorkerBeat) -> Result<()> {
        beat.validate()?;
        self.beat(beat);
        Ok(())
    }

    async fn deregister(&self, worker: &str) -> Result<bool> {
        Ok(self.forget(worker))
    }

    async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        Ok(self.live_workers())
    }

    async fn throughput(&self, queue: &str) -> Result<Vec<Bucket>> {
        crate::job::validate_queue_name(queue)?;
        Ok(self.buckets(queue))
    }

    fn wake_signal(&self) -> Option<watch::Receiver<u64>> {
        Some(self.inner.wake.subscribe())
    }
}
