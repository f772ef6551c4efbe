//! Dispatch: handing buffered jobs to pool tasks while a slot is free, one job, several
//! (a hand-off) or a batch at a time, and taking back what the tasks report
//! (docs/design.md, "In-process hand-offs").

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::EventLoop;
use super::queue::{QueueState, queue_stats};
use super::tasks::TaskWork;
use crate::broker::Outcome;
use crate::job::Job;
use crate::worker::HANDOFF_MAX;
use crate::worker::pool::{Done, Started, Work};
use crate::worker::stats::{WorkerStats, push_size};

/// Hand-offs are sized to arrive about this far apart.
const HANDOFF_SPACING: Duration = Duration::from_micros(32);
/// A one-job hand-off runs on the event loop's own task once its queue's handlers are
/// known to hold the thread less than this per poll (the longest recent poll, see
/// [`PollGauge`](crate::worker::pool::PollGauge)): waking a pool task for it would cost
/// about as much as the job, and on a runtime with a second thread it wakes that thread
/// too. Until a poll was timed, and once one took longer, a pool task runs it, so a handler
/// that computes between its awaits does not hold the loop up. (One that computes in many
/// polls shorter than this runs on the loop's thread, one poll at a time.)
const INLINE_POLL_LIMIT: Duration = HANDOFF_SPACING;

/// The dispatcher's own state.
#[derive(Default)]
pub(super) struct Dispatcher {
    /// Time per job of the last timed hand-off.
    pub(super) job_time: Option<Duration>,
    /// The queue dispatch starts from on the next pass, so no queue always goes first.
    rotate: usize,
}

/// The most jobs a hand-off carries by time at concurrency `c`: enough to keep hand-offs
/// about 32 µs apart, at most 32; until a batch was timed, 1 (32 at concurrency 1). It
/// also sizes an in-process queue's default window, two hand-offs per slot: jobs of a few
/// microseconds get a deep buffer, so hand-offs stay full between fetches, and jobs of
/// 32 µs or more two per slot, so a worker never hoards what another could run.
pub(super) fn by_time(job_time: Option<Duration>, c: usize) -> usize {
    match job_time {
        None if c == 1 => HANDOFF_MAX,
        None => 1,
        Some(t) if t.is_zero() => HANDOFF_MAX,
        Some(t) => ((HANDOFF_SPACING.as_nanos() / t.as_nanos()) as usize).clamp(1, HANDOFF_MAX),
    }
}

impl EventLoop {
    pub(super) fn dispatch(&mut self, now: Instant, st: &mut WorkerStats) {
        if self.stopping.is_some() {
            return;
        }
        let n = self.queues.len();
        self.dispatch.rotate = (self.dispatch.rotate + 1) % n;
        // Read once a pass, and only when a recorder will take the start delays.
        let wall = self.meters.per_job.then(|| self.wall.at(now));
        for i in 0..n {
            let qi = (self.dispatch.rotate + i) % n;
            loop {
                let q = &self.queues[qi];
                if q.paused || q.buffer.is_empty() || q.busy >= q.opts.concurrency {
                    break;
                }
                if !self.tasks.available() {
                    return;
                }
                let (work, record, k) = match q.opts.batch {
                    Some((size, wait)) => {
                        let close = size.min(self.window(q));
                        let due = q.batch_since.is_some_and(|t| t + wait <= now);
                        if q.buffer.len() < close && !due {
                            break;
                        }
                        let take = close.min(q.buffer.len());
                        let q = &mut self.queues[qi];
                        if let Some(wall) = wall {
                            q.meters.started(q.buffer.iter().take(take), wall);
                        }
                        let jobs: Vec<Job> = q.buffer.drain(..take).collect();
                        q.batch_since = (!q.buffer.is_empty()).then_some(now);
                        push_size(&mut queue_stats(st, &q.name).batch_sizes, take);
                        let held = jobs.iter().map(Started::of).collect();
                        (
                            Work::Batch { queue: qi, jobs },
                            TaskWork::Batch { queue: qi, held },
                            take,
                        )
                    }
                    None => {
                        let k = self.handoff_size(q);
                        if let Some(wall) = wall {
                            q.meters.started(q.buffer.iter().take(k), wall);
                        }
                        let (mut h, done) = self.tasks.spare();
                        Arc::get_mut(&mut h)
                            .expect("a spare hand-off is not shared")
                            .refill(qi, self.queues[qi].buffer.drain(..k), done);
                        (Work::Jobs(h.clone()), TaskWork::Jobs(h), k)
                    }
                };
                let inline = matches!(work, Work::Jobs(_))
                    && k == 1
                    && self.tasks.ctx.polls[qi]
                        .longest()
                        .is_some_and(|poll| poll < INLINE_POLL_LIMIT);
                push_size(&mut st.handoff_sizes, k);
                st.handoffs += 1;
                if self.intake.pushed() {
                    // Pushed deliveries have no fetch: what a handler gets at once is one.
                    let (calls, size) = match &work {
                        Work::Batch { .. } => (1, k),
                        Work::Jobs(_) => (k, 1),
                    };
                    st.fetches += calls as u64;
                    st.fetched_jobs += k as u64;
                    for _ in 0..calls {
                        push_size(&mut st.batch_sizes, size);
                    }
                }
                let q = &mut self.queues[qi];
                q.busy += 1;
                q.in_handoffs += k;
                if inline {
                    st.inline_handoffs += 1;
                }
                self.tasks.give(work, record, inline);
            }
        }
    }

    /// Jobs in the next hand-off of a one-job queue: an even split of the buffer over the
    /// slots, at most [`by_time`]; one when the worker has several queues or the queue has
    /// priorities, so order holds.
    fn handoff_size(&self, q: &QueueState) -> usize {
        if self.queues.len() > 1 || q.seen_priority {
            return 1;
        }
        let c = q.opts.concurrency.min(self.tasks.limit).max(1);
        let even = (q.buffer.len() / c).max(1);
        even.min(by_time(self.dispatch.job_time, c))
            .min(q.buffer.len())
    }

    /// A pool task (or a hand-off on the loop's own task) finished its work: queue the
    /// settlements, feed the Auto rule its job times, and count the outcomes.
    pub(super) fn task_done(
        &mut self,
        task: usize,
        mut done: Vec<Done>,
        elapsed: Duration,
        st: &mut WorkerStats,
    ) {
        let Some(work) = self.tasks.finish(task) else {
            return;
        };
        let qi = work.queue();
        let handoff = match work {
            TaskWork::Jobs(h) => {
                if !done.is_empty() {
                    self.dispatch.job_time = Some(elapsed / done.len() as u32);
                }
                Some(h)
            }
            TaskWork::Batch { .. } => None,
        };
        let q = &mut self.queues[qi];
        q.busy -= 1;
        q.in_handoffs -= done.len();
        let mut acked = 0;
        // Jobs of a hand-off of several, untimed, are recorded at its mean.
        let mean = elapsed / done.len().max(1) as u32;
        for d in done.drain(..) {
            let q = &mut self.queues[qi];
            if let Some(sizer) = q.sizer.as_mut() {
                sizer.record(d.took);
            }
            if self.meters.per_job {
                let took = if d.took.is_zero() { mean } else { d.took };
                q.meters.duration.record(took.as_secs_f64());
            }
            match &d.outcome {
                Outcome::Ack => acked += 1,
                Outcome::Retry { .. } => {
                    st.retried += 1;
                    q.meters.retried.increment(1);
                    queue_stats(st, &q.name).retried += 1;
                }
                Outcome::DeadLetter { .. } => {
                    st.dead += 1;
                    q.meters.dead.increment(1);
                    queue_stats(st, &q.name).dead += 1;
                }
                Outcome::Release => {
                    st.released += 1;
                    q.meters.released.increment(1);
                }
                Outcome::Snooze { .. } => {
                    st.snoozed += 1;
                    q.meters.snoozed.increment(1);
                }
                Outcome::Cancel => st.cancelled += 1,
            }
            self.queue_settlement(d.id, d.lease, d.outcome, Some(qi));
        }
        // The task dropped its share of the hand-off before reporting, so it comes back.
        if let Some(h) = handoff {
            self.tasks.keep_spare(h, done);
        }
        if acked > 0 {
            self.queues[qi].meters.completed.increment(acked);
            st.completed += acked;
            queue_stats(st, &self.queues[qi].name).completed += acked;
        }
        self.settle_if_starved(st);
    }
}
