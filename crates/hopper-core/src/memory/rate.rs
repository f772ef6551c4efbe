//! Rate limits per key on the memory broker ([`RateLimit::per_key`]): a window for each
//! rate key of a queue's jobs ([`NewJob::rate_key`](crate::NewJob::rate_key); jobs without
//! one share the window of the empty key), kept under the broker's lock.
//!
//! A claim takes the queue's due jobs in order. A job whose key has room starts; one whose
//! key's window is full goes back among the delayed jobs at the time that window will have
//! room for it ([`Window::defer`]), so later claims do not read it again until then, and a
//! key's backlog is spread over the times it may start.

use std::collections::{HashMap, VecDeque};

use super::queue::MemQueue;
use crate::RateLimit;
use crate::job::{IdMap, Job, JobId, Millis};
use crate::rate::Window;

/// The most jobs one claim moves back: it bounds the time the claim holds the lock when
/// a key has a deep backlog. The next claim goes on where it stopped.
const DEFER_PER_CLAIM: usize = 4096;

/// A queue's windows, one per rate key seen within the last period.
#[derive(Debug, Default)]
pub(super) struct KeyWindows {
    windows: HashMap<String, Window>,
    /// When idle windows were last dropped.
    swept: Millis,
}

impl KeyWindows {
    /// How many keys have a window.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.windows.len()
    }
}

/// Takes up to `want` due jobs of `q` whose keys' windows under `limit` have room, handing
/// each to `take`; moves back, to their keys' next room, the jobs met whose windows are
/// full. Returns how many it took.
#[allow(clippy::too_many_arguments)]
pub(super) fn claim(
    q: &mut MemQueue,
    keys: &mut KeyWindows,
    rate_keys: &IdMap<JobId, String>,
    limit: RateLimit,
    want: usize,
    now: Millis,
    emptied: &mut Vec<VecDeque<Job>>,
    mut take: impl FnMut(Job),
) -> usize {
    let per = limit.per_ms();
    if now.saturating_sub(keys.swept) >= per {
        keys.windows.retain(|_, w| !w.idle(now));
        keys.swept = now;
    }
    let (mut taken, mut deferred) = (0, 0);
    // Each claim spreads the jobs it holds back afresh (see `Window::defer`).
    let mut touched: std::collections::HashSet<String> = std::collections::HashSet::new();
    while taken < want && deferred < DEFER_PER_CLAIM {
        let Some(mut job) = q.pop(emptied) else {
            break;
        };
        let key = rate_keys.get(&job.id).map_or("", String::as_str);
        let window = match keys.windows.get_mut(key) {
            Some(w) => w,
            None => keys
                .windows
                .entry(key.to_owned())
                .or_insert_with(|| Window::new(limit)),
        };
        if window.limit() != limit {
            window.set_limit(limit);
        }
        if !touched.contains(key) {
            touched.insert(key.to_owned());
            window.set_booked(None);
        }
        if window.room(now) > 0 {
            window.started(1, now);
            take(job);
            taken += 1;
        } else {
            job.run_at = window.defer(now);
            q.push(job, now);
            deferred += 1;
        }
    }
    taken
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::job::LeaseId;

    fn job(id: i64) -> Job {
        Job {
            id: JobId(id),
            queue: "q".into(),
            payload: Vec::new(),
            priority: 0,
            run_at: 0,
            attempt: 0,
            max_attempts: 1,
            headers: BTreeMap::new(),
            created_at: 0,
            lease: LeaseId(0),
        }
    }

    /// Each key's window counts its own starts; one held back moves to its key's next
    /// room; a key's window is dropped once a period has passed with nothing in it.
    #[test]
    fn keys_count_apart_and_idle_windows_are_dropped() {
        let limit = RateLimit::new(1, Duration::from_millis(100))
            .unwrap()
            .per_key();
        let mut q = MemQueue::default();
        let mut rate_keys = IdMap::default();
        for (id, key) in [(1, "a"), (2, "a"), (3, "b")] {
            q.push(job(id), 0);
            rate_keys.insert(JobId(id), key.to_owned());
        }
        let mut keys = KeyWindows::default();
        let mut took = Vec::new();
        let n = claim(
            &mut q,
            &mut keys,
            &rate_keys,
            limit,
            10,
            1_000,
            &mut Vec::new(),
            |j| took.push(j.id.0),
        );
        assert_eq!((n, took.as_slice()), (2, &[1, 3][..]));
        assert_eq!(keys.len(), 2);
        let moved: Vec<_> = q.delayed.keys().copied().collect();
        assert_eq!(moved, [(1_100, JobId(2))], "a's second at a's next room");
        q.promote_due(1_100);
        let n = claim(
            &mut q,
            &mut keys,
            &rate_keys,
            limit,
            10,
            1_100,
            &mut Vec::new(),
            |_| {},
        );
        assert_eq!((n, keys.len()), (1, 1), "b's window was idle and dropped");
        claim(
            &mut q,
            &mut keys,
            &rate_keys,
            limit,
            10,
            1_300,
            &mut Vec::new(),
            |_| {},
        );
        assert_eq!(keys.len(), 0);
    }
}
