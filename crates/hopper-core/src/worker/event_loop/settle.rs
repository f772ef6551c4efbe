//! Settlements: each finished job's outcome is queued, and the queue goes to the broker as
//! one batch once it is full, a few milliseconds old, or a pushed window starves on it;
//! one batch in flight at a time, and a failed batch is sent again
//! (docs/design.md, "Settlements").

use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

use super::intake::Mode;
use super::queue::queue_stats;
use super::{Event, EventLoop};
use crate::broker::{Outcome, SettleReport, Settlement};
use crate::error::Result;
use crate::job::{JobId, LeaseId};
use crate::worker::stats::WorkerStats;

/// Settlements waiting to go, and the batch in flight.
#[derive(Default)]
pub(super) struct Settler {
    pending: Vec<Settlement>,
    /// The queue of each settlement of `pending`, where known.
    queues: Vec<Option<usize>>,
    /// When the oldest pending settlement was queued.
    since: Option<Instant>,
    /// The number of settlements in the batch in flight, if one is.
    in_flight: Option<usize>,
    retry_at: Option<Instant>,
}

impl Settler {
    /// Nothing waits and nothing is in flight.
    #[inline]
    pub(super) fn idle(&self) -> bool {
        self.pending.is_empty() && self.in_flight.is_none()
    }

    /// Settlements not yet confirmed by the broker: waiting, and in flight.
    pub(super) fn undelivered(&self) -> (usize, usize) {
        let in_flight = self.in_flight.unwrap_or(0);
        (self.pending.len() + in_flight, in_flight)
    }

    /// When the pending batch is due by age, or may be tried again.
    pub(super) fn next_deadline(&self, delay: Duration) -> [Option<Instant>; 2] {
        if self.pending.is_empty() || self.in_flight.is_some() {
            return [None, None];
        }
        [self.since.map(|s| s + delay), self.retry_at]
    }
}

impl EventLoop {
    pub(super) fn maybe_settle(&mut self, now: Instant, st: &mut WorkerStats) {
        let s = &self.settler;
        if s.pending.is_empty() || s.in_flight.is_some() || s.retry_at.is_some_and(|t| t > now) {
            return;
        }
        // A batch that failed goes again once its retry time comes, however few it holds.
        let due = s.pending.len() >= self.cfg.settle_batch
            || s.retry_at.is_some()
            || self.stopping.is_some()
            || s.since.is_some_and(|t| t + self.cfg.settle_delay <= now)
            || self.window_starved();
        if !due {
            return;
        }
        let s = &mut self.settler;
        s.retry_at = None;
        s.since = None;
        s.in_flight = Some(s.pending.len());
        let batch = std::mem::take(&mut s.pending);
        let queues = std::mem::take(&mut s.queues);
        let broker = self.broker.clone();
        let sent = batch.clone();
        let mut settle = Box::pin(async move { broker.settle(sent).await });
        if self.intake.mode != Mode::Pulled {
            // As with fetches, an in-process settlement completes on its first poll; so
            // does a pushed broker's acknowledgement, which only queues its frames. Taking
            // the result here spares a task and a wake-up of the loop per settlement, and at
            // a small window the server waits on each of them.
            let mut cx = Context::from_waker(Waker::noop());
            if let Poll::Ready(result) = settle.as_mut().poll(&mut cx) {
                self.settled(result, batch, queues, st);
                return;
            }
        }
        let events = self.events.clone();
        tokio::spawn(async move {
            let result = settle.await;
            let _ = events.send(Event::Settled {
                result,
                batch,
                queues,
            });
        });
    }

    /// A settlement round trip came back.
    pub(super) fn settled(
        &mut self,
        result: Result<SettleReport>,
        batch: Vec<Settlement>,
        queues: Vec<Option<usize>>,
        st: &mut WorkerStats,
    ) {
        self.settler.in_flight = None;
        if result.is_ok() {
            for settlement in &batch {
                self.leases.applied(settlement.lease);
            }
        }
        let s = &mut self.settler;
        match result {
            Ok(report) => {
                st.settle_calls += 1;
                for &qi in queues.iter().flatten() {
                    let q = &mut self.queues[qi];
                    q.settling -= 1;
                    q.freed_since_take += 1;
                }
                // The next group fills the buffers this one used instead of growing fresh
                // ones by doubling (each growth past 1 kB is a large, slower allocation).
                if s.pending.is_empty() && s.pending.capacity() < batch.capacity() {
                    let (mut batch, mut queues) = (batch, queues);
                    batch.clear();
                    queues.clear();
                    s.pending = batch;
                    s.queues = queues;
                }
                if !report.fenced.is_empty() {
                    self.meters.fenced.increment(report.fenced.len() as u64);
                    tracing::debug!(
                        fenced = report.fenced.len(),
                        "settlements ignored: their leases had expired"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e.chain(), count = batch.len(), "settlement failed; retrying");
                let mut batch = batch;
                batch.append(&mut s.pending);
                s.pending = batch;
                let mut queues = queues;
                queues.append(&mut s.queues);
                s.queues = queues;
                s.retry_at = Some(Instant::now() + Duration::from_millis(200));
            }
        }
    }

    /// On a pushed broker, a settlement held back to be grouped also holds back the
    /// server: it pushes the next delivery only once an ack frees the window. So once half
    /// a queue's window waits on acknowledgements (all of a window of 1), they go at once.
    fn window_starved(&self) -> bool {
        self.intake.pushed()
            && self
                .queues
                .iter()
                .any(|q| q.settling > 0 && q.settling * 2 >= self.window(q))
    }

    /// Sends the settlements at once when half a pushed queue's window waits on them
    /// ([`Self::window_starved`]), between two completions rather than at the next pass:
    /// a pass can take in a whole window's completions at once (hand-offs that ran on the
    /// loop's own task finish together), and acknowledging all of it in one frame leaves
    /// the server nothing to push until that frame arrives.
    pub(super) fn settle_if_starved(&mut self, st: &mut WorkerStats) {
        if !self.intake.pushed() || !self.window_starved() {
            return;
        }
        self.maybe_settle(Instant::now(), st);
    }

    /// Queues a settlement for a job this worker held, first counting it in the stats: a
    /// release, a cancellation, or the failed attempt of a handler stopped at shutdown (a
    /// finished handler's outcomes are counted where they are taken in, by
    /// [`task_done`](Self::task_done)).
    pub(super) fn settle_and_count(
        &mut self,
        id: JobId,
        lease: LeaseId,
        outcome: Outcome,
        queue: Option<usize>,
        st: &mut WorkerStats,
    ) {
        let meters = queue.map(|qi| &self.queues[qi].meters);
        match outcome {
            Outcome::Release => st.released += 1,
            Outcome::Snooze { .. } => st.snoozed += 1,
            Outcome::Cancel => st.cancelled += 1,
            Outcome::Retry { .. } => st.retried += 1,
            Outcome::DeadLetter { .. } => st.dead += 1,
            Outcome::Ack => {}
        }
        if let Some(qi) = queue {
            let qs = queue_stats(st, &self.queues[qi].name);
            match outcome {
                Outcome::Retry { .. } => qs.retried += 1,
                Outcome::DeadLetter { .. } => qs.dead += 1,
                _ => {}
            }
        }
        if let Some(m) = meters {
            match outcome {
                Outcome::Release => m.released.increment(1),
                Outcome::Snooze { .. } => m.snoozed.increment(1),
                Outcome::Retry { .. } => m.retried.increment(1),
                Outcome::DeadLetter { .. } => m.dead.increment(1),
                Outcome::Ack | Outcome::Cancel => {}
            }
        }
        self.queue_settlement(id, lease, outcome, None);
    }

    /// Queues a settlement already counted in the stats. `queue` is the job's queue where
    /// known, so its window counts the settlement until the broker applied it. A job whose
    /// lease was lost is not settled: the broker already took it back.
    pub(super) fn queue_settlement(
        &mut self,
        id: JobId,
        lease: LeaseId,
        outcome: Outcome,
        queue: Option<usize>,
    ) {
        if !self.leases.keeps(lease) {
            return;
        }
        let s = &mut self.settler;
        if s.pending.is_empty() {
            s.since = Some(Instant::now());
        }
        s.pending.push(Settlement {
            job: id,
            lease,
            outcome,
        });
        s.queues.push(queue);
        if let Some(qi) = queue {
            self.queues[qi].settling += 1;
        }
    }
}
