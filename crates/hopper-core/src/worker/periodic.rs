//! The worker's periodic jobs: a task beside the event loop that enqueues each slot of
//! each [`Schedule`] when it comes. Every worker with the schedule does the same, and the
//! broker keeps one job per slot (the slot is the job's unique key), so the slot runs once
//! while any worker is up. Each slot costs each worker one enqueue.
//!
//! An enqueue that fails is retried with backoff until the next slot comes; then the slot
//! is given up, logged as missed, and the schedule goes on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::stats::WorkerStats;
use crate::broker::Broker;
use crate::clock::Clock;
use crate::job::Millis;
use crate::registry::ScheduleBeat;
use crate::schedule::{Missed, Schedule};

/// First wait after a failed enqueue of a slot; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// The schedules of one worker and what they need.
pub(super) struct Periodic {
    pub(super) broker: Arc<dyn Broker>,
    pub(super) schedules: Vec<Schedule>,
    pub(super) clock: Clock,
    pub(super) stats: Arc<Mutex<WorkerStats>>,
    /// Each schedule's next and latest slot, for the worker's reports.
    pub(super) beats: Arc<Mutex<Vec<ScheduleBeat>>>,
}

/// What the worker reports of `schedules` before their first slot.
pub(super) fn first_beats(schedules: &[Schedule]) -> Vec<ScheduleBeat> {
    schedules
        .iter()
        .map(|s| ScheduleBeat {
            name: s.name().to_owned(),
            queue: s.queue().to_owned(),
            spec: s.spec().to_owned(),
            next_at: None,
            last_at: None,
        })
        .collect()
}

impl Periodic {
    /// Runs every schedule until `ended` turns true (the worker is stopping).
    pub(super) async fn run(self, ended: watch::Receiver<bool>) {
        let runs = self
            .schedules
            .into_iter()
            .enumerate()
            .map(|(index, schedule)| {
                let one = One {
                    broker: self.broker.clone(),
                    schedule,
                    clock: self.clock,
                    stats: self.stats.clone(),
                    ended: ended.clone(),
                    beats: self.beats.clone(),
                    index,
                };
                one.run()
            });
        futures_util::future::join_all(runs).await;
    }
}

/// One schedule's loop.
struct One {
    broker: Arc<dyn Broker>,
    schedule: Schedule,
    clock: Clock,
    stats: Arc<Mutex<WorkerStats>>,
    ended: watch::Receiver<bool>,
    beats: Arc<Mutex<Vec<ScheduleBeat>>>,
    /// This schedule's place in `beats`.
    index: usize,
}

impl One {
    async fn run(mut self) {
        let now = self.clock.now_millis();
        let mut slot = match self.schedule.missed_policy() {
            Missed::RunOnce => self.schedule.latest_at(now),
            Missed::Skip => self.schedule.next_after(now),
        };
        while let Some(at) = slot {
            self.beat(|b| b.next_at = Some(at));
            if !self.until(at).await {
                return;
            }
            let next = self.schedule.next_after(at);
            if !self.enqueue(at, next).await {
                return;
            }
            slot = next;
        }
        self.beat(|b| b.next_at = None);
    }

    /// Updates what the worker reports of this schedule.
    fn beat(&self, change: impl FnOnce(&mut ScheduleBeat)) {
        let mut beats = self.beats.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = beats.get_mut(self.index) {
            change(b);
        }
    }

    /// Waits until the clock reads `at`; false if the worker stopped first.
    async fn until(&mut self, at: Millis) -> bool {
        loop {
            if *self.ended.borrow() {
                return false;
            }
            let now = self.clock.now_millis();
            if now >= at {
                return true;
            }
            let wait = Duration::from_millis((at - now) as u64);
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = self.ended.changed() => {}
            }
        }
    }

    /// Enqueues `slot`, retrying until `next` comes; false if the worker stopped first.
    async fn enqueue(&mut self, slot: Millis, next: Option<Millis>) -> bool {
        let name = self.schedule.name().to_owned();
        let mut wait = RETRY_FIRST;
        loop {
            let job = self.schedule.slot_job(slot);
            match self.broker.enqueue_reported(vec![job]).await {
                Ok(done) => {
                    self.beat(|b| b.last_at = Some(slot));
                    let mut st = self.stats.lock().unwrap_or_else(|e| e.into_inner());
                    match done.first() {
                        Some(e) if e.existing => st.slots_taken_elsewhere += 1,
                        _ => st.slots_enqueued += 1,
                    }
                    return true;
                }
                Err(e) => {
                    let now = self.clock.now_millis();
                    let retry_at = now.saturating_add(wait.as_millis() as Millis);
                    if next.is_some_and(|n| retry_at >= n) {
                        tracing::error!(
                            schedule = %name, slot, error = %e.chain(),
                            "periodic job missed: the slot could not be enqueued before the next"
                        );
                        self.stats
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .slots_missed += 1;
                        return true;
                    }
                    tracing::warn!(
                        schedule = %name, slot, error = %e.chain(),
                        "enqueueing a periodic job failed; retrying in {wait:?}"
                    );
                    if !self.until(retry_at).await {
                        return false;
                    }
                    wait = (wait * 2).min(RETRY_MAX);
                }
            }
        }
    }
}
