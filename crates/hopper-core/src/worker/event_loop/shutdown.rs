//! Stopping: no more fetches; buffered and waiting jobs are handed back at once; running
//! handlers get the grace period, after which their jobs are released and their tasks
//! stopped; the loop ends once everything is settled, or [`STOP_SETTLE_LIMIT`] after the
//! grace period if the broker cannot be reached (docs/design.md, "Shutdown and release").

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::EventLoop;
use super::tasks::TaskWork;
use crate::broker::Outcome;
use crate::job::Job;
use crate::worker::STOP_SETTLE_LIMIT;
use crate::worker::pool::{Started, outcome_of};
use crate::worker::stats::WorkerStats;

pub(super) struct Stopping {
    /// The end of the grace period.
    pub(super) deadline: Instant,
    /// The grace period is over and the running jobs were released.
    pub(super) abandoned: bool,
    replies: Vec<oneshot::Sender<()>>,
}

impl Stopping {
    /// The grace period plus [`STOP_SETTLE_LIMIT`]: the loop stops then, whatever it has
    /// not been able to settle.
    pub(super) fn give_up_at(&self) -> Instant {
        self.deadline + STOP_SETTLE_LIMIT
    }

    /// Tells everyone who asked for the stop that it is done.
    pub(super) fn reply(self) {
        for r in self.replies {
            let _ = r.send(());
        }
    }
}

impl EventLoop {
    /// A shutdown was asked for, with its own grace period or the worker's.
    pub(super) fn begin_stop(
        &mut self,
        grace: Option<Duration>,
        reply: oneshot::Sender<()>,
        st: &mut WorkerStats,
    ) {
        let grace = grace.unwrap_or(self.cfg.grace);
        match self.stopping.as_mut() {
            Some(s) => s.replies.push(reply),
            None => {
                self.stopping = Some(Stopping {
                    deadline: Instant::now() + grace,
                    abandoned: false,
                    replies: vec![reply],
                });
            }
        }
        self.release_unstarted(None, st);
    }

    /// Ends the grace period once it is over.
    pub(super) fn check_grace(&mut self, now: Instant, st: &mut WorkerStats) {
        if let Some(stopping) = self.stopping.as_mut() {
            if !stopping.abandoned && stopping.deadline <= now {
                stopping.abandoned = true;
                self.abandon_running(st);
            }
        }
    }

    /// Stopping, with every task idle and nothing left to fetch or settle.
    pub(super) fn finished(&self) -> bool {
        self.stopping.is_some()
            && self.tasks.all_idle()
            && self.intake.in_flight == 0
            && self.settler.idle()
    }

    /// Past the grace period and [`STOP_SETTLE_LIMIT`] with settlements still undelivered
    /// (or a fetch still out): the broker is unreachable, and the worker stops without them.
    pub(super) fn give_up(&self, now: Instant, st: &mut WorkerStats) -> bool {
        if self.stopping.as_ref().is_none_or(|s| now < s.give_up_at()) {
            return false;
        }
        let (undelivered, in_flight) = self.settler.undelivered();
        st.settlements_undelivered += undelivered as u64;
        if undelivered > 0 {
            tracing::warn!(
                undelivered,
                in_flight,
                "stopping with settlements the broker has not confirmed; their jobs come back \
                 once their leases expire, as after a crash"
            );
        }
        if self.intake.in_flight > 0 {
            tracing::warn!(
                "stopping with a fetch the broker has not answered; what it claims comes \
                 back once its lease expires"
            );
        }
        true
    }

    /// Takes every job of `qi` (or all queues) out of buffers and hand-offs, unstarted.
    fn take_unstarted(&mut self, only: Option<usize>) -> Vec<Job> {
        let mut out = Vec::new();
        for (i, q) in self.queues.iter_mut().enumerate() {
            if only.is_none_or(|o| o == i) {
                out.extend(q.buffer.drain(..));
                q.batch_since = None;
            }
        }
        for work in self.tasks.working() {
            if let TaskWork::Jobs(h) = work {
                if only.is_none_or(|o| o == h.queue) {
                    let taken = h.take_all_waiting();
                    self.queues[h.queue].in_handoffs -= taken.len();
                    out.extend(taken);
                }
            }
        }
        out
    }

    /// Hands back every unstarted job of `qi` (or all queues), without charging an attempt.
    pub(super) fn release_unstarted(&mut self, only: Option<usize>, st: &mut WorkerStats) {
        for job in self.take_unstarted(only) {
            let qi = self.queue_of(&job.queue);
            self.settle_and_count(job.id, job.lease, Outcome::Release, qi, st);
        }
    }

    /// At the end of the grace period: stop the tasks still running, and fail the attempts
    /// of their jobs. Those jobs did start, so the attempt is charged: they are retried
    /// with backoff, or dead-lettered after the last, and a job that always hangs cannot
    /// come back forever.
    fn abandon_running(&mut self, st: &mut WorkerStats) {
        self.release_unstarted(None, st);
        let retry = self.cfg.retry;
        for work in self.tasks.abandon() {
            let held: Vec<Started> = match &work {
                TaskWork::Jobs(h) => h.running().into_iter().collect(),
                TaskWork::Batch { held, .. } => held.clone(),
            };
            let qi = work.queue();
            let q = &mut self.queues[qi];
            let holds_key = q.opts.retries_hold_key;
            q.busy -= 1;
            q.in_handoffs -= held.len().min(q.in_handoffs);
            for job in held {
                tracing::warn!(id = %job.id, "grace period over: stopping a handler that did not finish");
                let error = "stopped at shutdown: the handler was still running when the grace period ended";
                let outcome = outcome_of(job.attempts, Err(error.to_owned()), &retry, holds_key);
                self.settle_and_count(job.id, job.lease, outcome, Some(qi), st);
            }
        }
    }
}
