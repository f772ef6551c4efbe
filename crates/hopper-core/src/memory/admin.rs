//! The operator calls of the memory broker: listings, re-drives, pauses and statistics.
//!
//! A listing walks the queue's jobs of one state under the lock and keeps the page's worth
//! after the cursor (a selection, not a sort of the whole state), so a page costs one pass.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use super::MemoryBroker;
use super::state::State;
use crate::admin::{Cursor, JobPage, JobQuery, ListState, QueueStatus, Selection, lag_since};
use crate::broker::{JobRecord, JobState, QueueCounts};
use crate::job::{Job, JobId, LeaseId, Millis};
use crate::registry::windows;

/// A job of the listed state, borrowed from the broker's state.
enum Found<'a> {
    Waiting(&'a Job),
    Held(Job, Millis),
    Done(&'a JobRecord),
}

/// The order a listing walks, oldest first: waiting jobs by priority (highest first), then
/// `run_at`; the others by their cursor key. The id breaks ties.
fn ascending(state: ListState, c: &Cursor) -> (i64, i64, i64) {
    match state {
        ListState::Pending | ListState::Scheduled => (-c.key, c.sub, c.id.0),
        _ => (c.key, c.sub, c.id.0),
    }
}

fn waiting_cursor(job: &Job) -> Cursor {
    Cursor {
        key: i64::from(job.priority),
        sub: job.run_at,
        id: job.id,
    }
}

fn finished_cursor(rec: &JobRecord) -> Cursor {
    Cursor {
        key: rec.finished_at.unwrap_or(0),
        sub: 0,
        id: rec.job.id,
    }
}

impl MemoryBroker {
    pub(super) fn list(&self, query: &JobQuery) -> JobPage {
        let now = self.inner.clock.now_millis();
        let mut guard = self.state();
        if let Some(q) = guard.queues.get_mut(&query.queue) {
            q.promote_due(now);
        }
        let st = &*guard;
        let mut found: Vec<(Cursor, Found<'_>)> = Vec::new();
        let q = st.queues.get(&query.queue);
        match query.state {
            ListState::Pending => {
                let jobs = q.into_iter().flat_map(|q| q.ready.values().flatten());
                found.extend(jobs.map(|j| (waiting_cursor(j), Found::Waiting(j))));
            }
            ListState::Scheduled => {
                let jobs = q.into_iter().flat_map(|q| q.delayed.values());
                found.extend(jobs.map(|j| (waiting_cursor(j), Found::Waiting(j))));
            }
            ListState::Leased => {
                if let Some(index) = st.name_index(&query.queue) {
                    for held in st.leased.values().filter(|h| h.queue == index) {
                        let expires = st.leases.get(&held.lease()).map_or(0, |l| l.expires);
                        let job = held.copy.to_job(&st.names[held.queue as usize]);
                        let cursor = Cursor {
                            key: expires,
                            sub: 0,
                            id: job.id,
                        };
                        found.push((cursor, Found::Held(job, held.started)));
                    }
                }
            }
            ListState::Dead => {
                let dead = q.into_iter().flat_map(|q| q.dead.iter());
                let records = dead.filter_map(|id| st.finished.get(id));
                found.extend(records.map(|r| (finished_cursor(r), Found::Done(r))));
            }
            ListState::Cancelled => {
                let records = st
                    .finished
                    .values()
                    .filter(|r| r.state == JobState::Cancelled && r.job.queue == query.queue);
                found.extend(records.map(|r| (finished_cursor(r), Found::Done(r))));
            }
            // Acknowledged jobs leave the memory broker at once.
            ListState::Completed => {}
        }
        let state = query.state;
        let order = |a: &Cursor, b: &Cursor| {
            let o = ascending(state, a).cmp(&ascending(state, b));
            if query.newest_first { o.reverse() } else { o }
        };
        if let Some(after) = &query.after {
            found.retain(|(c, _)| order(c, after) == Ordering::Greater);
        }
        if found.len() > query.limit {
            found.select_nth_unstable_by(query.limit, |a, b| order(&a.0, &b.0));
            found.truncate(query.limit);
        }
        found.sort_unstable_by(|a, b| order(&a.0, &b.0));
        let next = (found.len() == query.limit)
            .then(|| found.last().map(|f| f.0))
            .flatten();
        let jobs = found
            .into_iter()
            .map(|(_, f)| match f {
                Found::Waiting(job) => st.record(job.clone(), JobState::Pending, None),
                Found::Held(job, started) => st.record_held(job, started),
                Found::Done(rec) => rec.clone(),
            })
            .collect();
        JobPage { jobs, next }
    }

    pub(super) fn redrive(&self, which: &Selection, retry: bool) -> u64 {
        let now = self.inner.clock.now_millis();
        let mut done = 0;
        {
            let mut st = self.state();
            let ids: Vec<JobId> = match which {
                Selection::Jobs(ids) => ids.clone(),
                Selection::Queue { queue, at_most } => st
                    .queues
                    .get(queue)
                    .map(|q| q.dead.iter().take(*at_most).copied().collect())
                    .unwrap_or_default(),
            };
            let mut taken = BTreeSet::new();
            let mut touched = BTreeSet::new();
            for id in ids {
                let is_dead = st
                    .finished
                    .get(&id)
                    .is_some_and(|r| r.state == JobState::Dead);
                if !is_dead || !taken.insert(id) {
                    continue;
                }
                let record = st.finished.remove(&id).expect("checked above");
                let mut job = record.job;
                done += 1;
                touched.insert(job.queue.clone());
                if retry {
                    st.holds.uncharged(id);
                    job.attempt = 0;
                    job.run_at = now;
                    job.lease = LeaseId(0);
                    if let Some(key) = record.ordering_key {
                        job.run_at = st.lines.enter(&job.queue, key, id, now);
                    }
                    st.queue(&job.queue).push(job, now);
                } else {
                    st.errors.remove(&id);
                    st.holds.gone(id);
                    st.rate_keys.remove(&id);
                }
            }
            for name in touched {
                st.queue(&name).dead.retain(|id| !taken.contains(id));
            }
        }
        if retry && done > 0 {
            self.wake();
        }
        done
    }

    pub(super) fn pause(&self, queue: &str, paused: bool) -> bool {
        let changed = {
            let mut st = self.state();
            if paused {
                st.paused.insert(queue.to_owned())
            } else {
                st.paused.remove(queue)
            }
        };
        if changed && !paused {
            self.wake();
        }
        changed
    }

    pub(super) fn queue_names(&self) -> Vec<String> {
        let st = self.state();
        let mut names: BTreeSet<String> = st
            .queues
            .iter()
            .filter(|(_, q)| q.ready_len + q.delayed.len() + q.dead.len() > 0)
            .map(|(name, _)| name.clone())
            .collect();
        names.extend(
            st.leased
                .values()
                .map(|h| st.names[h.queue as usize].to_string()),
        );
        names.extend(st.paused.iter().cloned());
        names.extend(st.windows.keys().cloned());
        names.into_iter().collect()
    }

    pub(super) fn stats(&self, queue: &str) -> QueueStatus {
        let now = self.inner.clock.now_millis();
        let (last_minute, last_hour) = windows(&self.buckets(queue), now);
        let st = self.state();
        let oldest_due = st.queues.get(queue).and_then(|q| {
            let ready = q.ready.values().filter_map(|f| f.front()).map(|j| j.run_at);
            let promoted = q.delayed.keys().map(|k| k.0).take_while(|at| *at <= now);
            ready.chain(promoted).min()
        });
        QueueStatus {
            queue: queue.to_owned(),
            counts: counts_of(&st, queue, now),
            paused: st.paused.contains(queue),
            lag: lag_since(oldest_due, now),
            last_minute: Some(last_minute),
            last_hour: Some(last_hour),
            bound: None,
            consumers: None,
            rate_limit: st.windows.get(queue).map(|w| w.limit()),
        }
    }
}

/// A queue's jobs by state.
pub(super) fn counts_of(st: &State, queue: &str, now: Millis) -> QueueCounts {
    let leased = match st.name_index(queue) {
        Some(index) => st.leased.values().filter(|h| h.queue == index).count(),
        None => 0,
    };
    let mut counts = QueueCounts {
        leased: leased as u64,
        ..QueueCounts::default()
    };
    if let Some(q) = st.queues.get(queue) {
        let due = q.delayed.keys().take_while(|k| k.0 <= now).count() as u64;
        counts.pending = q.ready_len as u64 + due;
        counts.scheduled = q.delayed.len() as u64 - due;
        counts.dead = q.dead.len() as u64;
    }
    counts
}
