//! The elastic pool: tasks that run hand-offs and report back to the event loop.
//!
//! A hand-off is a small batch of one queue's jobs given to one task, which runs them one
//! after another. Jobs wait in the hand-off's own deque until their turn, so they are still
//! pending: the event loop can take a waiting job back out to cancel or release it.
//!
//! The same work runs on the event loop's own task when it is one brief job ([`run_work`]),
//! each handler poll timed into its queue's [`PollGauge`].

use std::collections::VecDeque;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::Either;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

use super::expired::Expired;
use super::handler::{
    ErasedBatchHandler, ErrorKind, JobResult, OneHandler, panic_message, run_caught,
};
use crate::broker::Outcome;
use crate::job::{Job, JobId, LeaseId};
use crate::retry::RetryPolicy;

/// Jobs handed to one task, shared with the event loop until each starts.
///
/// The event loop keeps a finished hand-off, its deque and the results buffer its task
/// filled, for the next one ([`Handoff::refill`]): making them anew took an allocation
/// each per hand-off, the results' freed on another thread than the one that made them.
#[derive(Debug, Default)]
pub(crate) struct Handoff {
    pub(crate) queue: usize,
    state: Mutex<HandoffState>,
}

#[derive(Debug, Default)]
struct HandoffState {
    waiting: VecDeque<Job>,
    running: Option<Started>,
    /// An empty buffer for the task's results, kept from an earlier hand-off.
    done: Vec<Done>,
}

impl Handoff {
    /// Makes a finished hand-off, no longer shared, `queue`'s next with `jobs`; `done` is
    /// the results buffer its task returned, taken in and empty.
    pub(crate) fn refill(
        &mut self,
        queue: usize,
        jobs: impl Iterator<Item = Job>,
        done: Vec<Done>,
    ) {
        self.queue = queue;
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        debug_assert!(st.waiting.is_empty() && done.is_empty());
        st.waiting.extend(jobs);
        st.running = None;
        st.done = done;
    }

    fn state(&self) -> MutexGuard<'_, HandoffState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next job, now marked running in place of the one before, which has finished;
    /// `None` when the hand-off is done (and nothing runs). One lock per job, not one to
    /// start it and another to finish it.
    fn start_next(&self) -> Option<Job> {
        let mut st = self.state();
        let job = st.waiting.pop_front();
        st.running = job.as_ref().map(Started::of);
        job
    }

    /// Takes a job out if it is still waiting.
    pub(crate) fn take_waiting(&self, id: JobId) -> Option<Job> {
        let mut st = self.state();
        let at = st.waiting.iter().position(|j| j.id == id)?;
        st.waiting.remove(at)
    }

    /// Drops the waiting jobs held under `lease` (lost); returns how many.
    pub(crate) fn take_lease(&self, lease: LeaseId) -> usize {
        let mut st = self.state();
        let before = st.waiting.len();
        st.waiting.retain(|j| j.lease != lease);
        before - st.waiting.len()
    }

    /// Takes every waiting job out.
    pub(crate) fn take_all_waiting(&self) -> Vec<Job> {
        self.state().waiting.drain(..).collect()
    }

    /// The jobs to run and a buffer for their results, when the task begins.
    fn begin(&self) -> (usize, Vec<Done>) {
        let mut st = self.state();
        let jobs = st.waiting.len();
        let mut done = std::mem::take(&mut st.done);
        done.reserve(jobs);
        (jobs, done)
    }

    /// Jobs waiting, and whether one is running.
    pub(crate) fn load(&self) -> (usize, bool) {
        let st = self.state();
        (st.waiting.len(), st.running.is_some())
    }

    /// The job running now, if any.
    pub(crate) fn running(&self) -> Option<Started> {
        self.state().running
    }
}

/// A job whose handler has started: what settling it without its handler needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Started {
    pub(crate) id: JobId,
    pub(crate) lease: LeaseId,
    /// Its attempt and most attempts, as [`outcome_of`] takes them.
    pub(crate) attempts: (u32, u32),
}

impl Started {
    pub(crate) fn of(job: &Job) -> Self {
        Started {
            id: job.id,
            lease: job.lease,
            attempts: (job.attempt, job.max_attempts),
        }
    }
}

/// Work for a pool task.
pub(crate) enum Work {
    Jobs(Arc<Handoff>),
    Batch { queue: usize, jobs: Vec<Job> },
}

/// One finished job, as the event loop settles it.
#[derive(Debug)]
pub(crate) struct Done {
    pub(crate) id: JobId,
    pub(crate) lease: LeaseId,
    pub(crate) outcome: Outcome,
    /// From hand-off (or the previous job's end) to this job's end; zero when the queue
    /// does not time its jobs ([`PoolContext::timed`]).
    pub(crate) took: Duration,
}

/// How long one queue's one-job handlers hold the thread in one poll, in nanoseconds: the
/// longest poll of recent jobs. A poll longer than the figure raises it at once; each job
/// that finishes then lowers it to the larger of its own longest poll and 70% of the
/// figure, so one long poll counts in full for its job and fades over the next dozen
/// jobs. None until a poll was timed. Written by whichever task polls, with plain loads
/// and stores: a raise that another task's write covers comes back when the next long
/// poll ends. The event loop reads it to decide where the next one-job hand-off runs.
#[derive(Debug)]
pub(crate) struct PollGauge(AtomicU64);

impl PollGauge {
    const UNTIMED: u64 = u64::MAX;

    /// The figure; `None` before the first poll.
    pub(crate) fn longest(&self) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            Self::UNTIMED => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }

    fn nanos(d: Duration) -> u64 {
        u64::try_from(d.as_nanos()).map_or(Self::UNTIMED - 1, |n| n.min(Self::UNTIMED - 1))
    }

    /// A poll just ended.
    fn polled(&self, poll: Duration) {
        let poll = Self::nanos(poll);
        let old = self.0.load(Ordering::Relaxed);
        if old == Self::UNTIMED || poll > old {
            self.0.store(poll, Ordering::Relaxed);
        }
    }

    /// A job finished, its longest poll `longest`.
    fn finished(&self, longest: Duration) {
        let longest = Self::nanos(longest);
        let new = match self.0.load(Ordering::Relaxed) {
            Self::UNTIMED => longest,
            old => longest.max(old / 10 * 7),
        };
        self.0.store(new, Ordering::Relaxed);
    }
}

impl Default for PollGauge {
    fn default() -> Self {
        PollGauge(AtomicU64::new(Self::UNTIMED))
    }
}

/// A handler's future, each poll timed into its queue's [`PollGauge`] with tokio's clock
/// (the system's, except under a paused test clock, where a handler's `advance` is what
/// its poll took). The first poll counts from `called`, so the handler's synchronous part
/// (its closure's body before the first `.await`) is timed with it.
struct Timed<'a, F> {
    fut: F,
    gauge: &'a PollGauge,
    called: Option<Instant>,
    longest: Duration,
}

impl<'a, F> Timed<'a, F> {
    fn new(fut: F, gauge: &'a PollGauge, called: Instant) -> Self {
        Timed {
            fut,
            gauge,
            called: Some(called),
            longest: Duration::ZERO,
        }
    }
}

impl<F: Future + Unpin> Future for Timed<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let started = self.called.take().unwrap_or_else(Instant::now);
        let polled = catch_unwind(AssertUnwindSafe(|| Pin::new(&mut self.fut).poll(cx)));
        let took = started.elapsed();
        // A poll that computed and then panicked counts too.
        self.gauge.polled(took);
        let out = polled.unwrap_or_else(|panic| resume_unwind(panic));
        self.longest = self.longest.max(took);
        if out.is_ready() {
            self.gauge.finished(self.longest);
        }
        out
    }
}

/// One job's handler with the payload type erased. It runs a whole hand-off: one boxed
/// future per hand-off, each job's own future kept inside it (a box per job was an
/// allocation and a free on every job).
pub(crate) trait ErasedHandler: Send + Sync {
    fn run<'a>(
        &'a self,
        ctx: &'a PoolContext,
        handoff: &'a Handoff,
        since: Instant,
    ) -> Pin<Box<dyn Future<Output = Vec<Done>> + Send + 'a>>;
}

impl<H: OneHandler> ErasedHandler for H {
    fn run<'a>(
        &'a self,
        ctx: &'a PoolContext,
        handoff: &'a Handoff,
        since: Instant,
    ) -> Pin<Box<dyn Future<Output = Vec<Done>> + Send + 'a>> {
        Box::pin(run_handoff(self, ctx, handoff, since))
    }
}

/// The handler of one queue.
#[derive(Clone)]
pub(crate) enum QueueHandler {
    One(Arc<dyn ErasedHandler>),
    Batch(Arc<dyn ErasedBatchHandler>),
}

pub(crate) struct PoolContext {
    pub(crate) handlers: Vec<QueueHandler>,
    /// Per queue: whether every job is timed (`Done::took`) even in a hand-off of several:
    /// the Auto rule needs it; other queues skip a clock read per job.
    pub(crate) timed: Vec<bool>,
    /// Per queue: how long its one-job handlers hold the thread per poll.
    pub(crate) polls: Vec<PollGauge>,
    /// Per queue: how long one attempt may run ([`QueueOptions::timeout`]).
    pub(crate) timeouts: Vec<Option<Duration>>,
    /// Per queue: whether a failed job keeps its ordering key while it waits
    /// ([`QueueOptions::retries_hold_key`]).
    pub(crate) holds_keys: Vec<bool>,
    /// Leases given up without a word from the broker, when the worker keeps them.
    pub(crate) expired: Option<Arc<Expired>>,
    pub(crate) retry: RetryPolicy,
    /// Where a pool task reports what it finished; `false` once nobody listens.
    pub(crate) report: Box<dyn Fn(TaskReport) -> bool + Send + Sync>,
}

/// What a pool task reports when it finishes a piece of work.
pub(crate) struct TaskReport {
    pub(crate) task: usize,
    pub(crate) done: Vec<Done>,
    /// From the hand-off to the end of the last job.
    pub(crate) elapsed: Duration,
}

/// Runs a handler's future to its end, a panic caught as its message; or, with a
/// `limit`, until then at most, when the future is dropped and the message says so; or
/// until this worker gives up one of `leases` ([`Expired`]). Each message is a failed
/// attempt ([`outcome_of`]).
async fn run_limited<F: Future>(
    fut: F,
    limit: Option<Duration>,
    leases: Option<(&Expired, &[LeaseId])>,
) -> Result<F::Output, String> {
    let run = async {
        let Some(limit) = limit else {
            return run_caught(fut).await;
        };
        tokio::time::timeout(limit, run_caught(fut))
            .await
            .unwrap_or_else(|_| Err(format!("timed out after {limit:?}")))
    };
    let Some((expired, leases)) = leases else {
        return run.await;
    };
    match futures_util::future::select(pin!(run), pin!(expired.any(leases))).await {
        futures_util::future::Either::Left((result, _)) => result,
        futures_util::future::Either::Right(((), _)) => Err(format!(
            "stopped: no lease renewal reached the broker within the lease ({:?}), so \
             another worker may hold the job",
            expired.ttl
        )),
    }
}

/// Turns a handler's result into the settlement the broker gets.
pub(crate) fn outcome_of(
    (attempt, max_attempts): (u32, u32),
    result: Result<JobResult, String>,
    retry: &RetryPolicy,
    holds_key: bool,
) -> Outcome {
    let (kind, message) = match result {
        Ok(Ok(())) => return Outcome::Ack,
        Ok(Err(e)) => (e.kind, e.message),
        Err(panic) => (ErrorKind::Retry(None), panic),
    };
    let last = attempt >= retry.max_attempts_for(max_attempts);
    match kind {
        ErrorKind::Snooze(delay) => Outcome::Snooze { delay },
        ErrorKind::Discard => Outcome::DeadLetter { error: message },
        ErrorKind::Retry(_) if last => Outcome::DeadLetter { error: message },
        ErrorKind::Retry(after) => Outcome::Retry {
            delay: after.unwrap_or_else(|| retry.delay(attempt)),
            error: message,
            step_aside: !holds_key,
        },
    }
}

/// The body of one pool task: run work until the event loop drops this task's sender.
pub(crate) async fn run_task(
    task: usize,
    ctx: Arc<PoolContext>,
    mut rx: mpsc::UnboundedReceiver<Work>,
) {
    while let Some(work) = rx.recv().await {
        let (done, elapsed) = run_work(&ctx, work).await;
        if !(ctx.report)(TaskReport {
            task,
            done,
            elapsed,
        }) {
            return;
        }
    }
}

/// Runs one piece of work, on a pool task or on the event loop's own task; returns what
/// finished and how long it all took from the hand-off.
pub(crate) async fn run_work(ctx: &PoolContext, work: Work) -> (Vec<Done>, Duration) {
    let handed_at = Instant::now();
    let done = match work {
        Work::Jobs(handoff) => {
            let QueueHandler::One(handler) = &ctx.handlers[handoff.queue] else {
                unreachable!("hand-offs of single jobs go to queues with a one-job handler")
            };
            handler.run(ctx, &handoff, handed_at).await
        }
        Work::Batch { queue, jobs } => run_batch(ctx, queue, jobs, handed_at).await,
    };
    (done, handed_at.elapsed())
}

/// Runs a hand-off's jobs one after another: generic over the handler, so each job's
/// future lives inside this one (see [`ErasedHandler`]).
pub(crate) async fn run_handoff<H: OneHandler>(
    handler: &H,
    ctx: &PoolContext,
    handoff: &Handoff,
    mut since: Instant,
) -> Vec<Done> {
    let (jobs, mut done) = handoff.begin();
    // Only a hand-off of one job times its polls: only those can run on the event loop,
    // and a queue whose hand-offs carry several jobs skips two clock reads per poll.
    let gauge = (jobs == 1).then(|| &ctx.polls[handoff.queue]);
    // A job alone in its hand-off is timed (jobs run alone unless they take microseconds);
    // the jobs of a hand-off of several are timed only for the Auto rule, and are
    // otherwise recorded at their hand-off's mean (see `task_done`).
    let timed = jobs == 1 || ctx.timed[handoff.queue];
    // Asked once a hand-off: with no subscriber wanting job spans, a job pays nothing.
    let spans = tracing::enabled!(target: "hopper::job", tracing::Level::INFO);
    while let Some(job) = handoff.start_next() {
        let (id, lease, attempts) = (job.id, job.lease, (job.attempt, job.max_attempts));
        let span = spans.then(|| process_span(&job));
        let timing = gauge.map(|gauge| (gauge, Instant::now()));
        let outcome = match catch_unwind(AssertUnwindSafe(|| handler.call(job))) {
            Ok(Ok(fut)) => {
                let fut = pin!(match span {
                    Some(span) => Either::Left(fut.instrument(span)),
                    None => Either::Right(fut),
                });
                let limit = ctx.timeouts[handoff.queue];
                let leases = [lease];
                let watch = ctx.expired.as_deref().map(|e| (e, &leases[..]));
                let result = match timing {
                    Some((gauge, called)) => {
                        run_limited(Timed::new(fut, gauge, called), limit, watch).await
                    }
                    None => run_limited(fut, limit, watch).await,
                };
                outcome_of(attempts, result, &ctx.retry, ctx.holds_keys[handoff.queue])
            }
            Ok(Err(error)) => Outcome::DeadLetter { error },
            Err(panic) => {
                // The closure's body panicked before its future existed: a failed attempt,
                // and a poll as long as the body ran.
                if let Some((gauge, called)) = timing {
                    let ran = called.elapsed();
                    gauge.polled(ran);
                    gauge.finished(ran);
                }
                outcome_of(
                    attempts,
                    Err(panic_message(panic)),
                    &ctx.retry,
                    ctx.holds_keys[handoff.queue],
                )
            }
        };
        let took = if timed {
            let now = Instant::now();
            let took = now - since;
            since = now;
            took
        } else {
            Duration::ZERO
        };
        done.push(Done {
            id,
            lease,
            outcome,
            took,
        });
    }
    done
}

/// A job's span, named as OpenTelemetry's messaging conventions name a consumer's
/// processing (`process QUEUE`), so `tracing-opentelemetry` exports it as such. Its fields
/// are formatted only when a subscriber enables it (level `info`, target `hopper::job`).
fn process_span(job: &Job) -> tracing::Span {
    tracing::info_span!(
        target: "hopper::job",
        "process",
        "otel.name" = %format_args!("process {}", job.queue),
        "otel.kind" = "consumer",
        "messaging.system" = "hopper",
        "messaging.operation.type" = "process",
        "messaging.destination.name" = %job.queue,
        "messaging.message.id" = %job.id,
        "hopper.attempt" = job.attempt,
        "hopper.lease" = %job.lease,
    )
}

async fn run_batch(ctx: &PoolContext, queue: usize, jobs: Vec<Job>, since: Instant) -> Vec<Done> {
    let QueueHandler::Batch(handler) = &ctx.handlers[queue] else {
        unreachable!("batches go to queues with a batch handler")
    };
    let (fut, kept, bad) = handler.call(jobs);
    let mut done = Vec::with_capacity(kept.len() + bad.len());
    for (job, error) in bad {
        done.push(Done {
            id: job.id,
            lease: job.lease,
            outcome: Outcome::DeadLetter { error },
            took: Duration::ZERO,
        });
    }
    let leases: Vec<LeaseId> = match &ctx.expired {
        Some(_) => kept.iter().map(|j| j.lease).collect(),
        None => Vec::new(),
    };
    let watch = ctx.expired.as_deref().map(|e| (e, &leases[..]));
    let results = run_limited(fut, ctx.timeouts[queue], watch).await;
    let took = since.elapsed() / (kept.len().max(1) as u32);
    match results {
        Ok(results) if results.len() == kept.len() => {
            for (job, r) in kept.iter().zip(results) {
                done.push(Done {
                    id: job.id,
                    lease: job.lease,
                    outcome: outcome_of(
                        (job.attempt, job.max_attempts),
                        Ok(r),
                        &ctx.retry,
                        ctx.holds_keys[queue],
                    ),
                    took,
                });
            }
        }
        other => {
            let error = match other {
                Ok(results) => format!(
                    "batch handler returned {} results for {} jobs",
                    results.len(),
                    kept.len()
                ),
                Err(panic) => panic,
            };
            for job in &kept {
                done.push(Done {
                    id: job.id,
                    lease: job.lease,
                    outcome: outcome_of(
                        (job.attempt, job.max_attempts),
                        Err(error.clone()),
                        &ctx.retry,
                        ctx.holds_keys[queue],
                    ),
                    took,
                });
            }
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: i64) -> Job {
        Job {
            id: JobId(id),
            queue: "q".into(),
            payload: b"[1]".to_vec(),
            priority: 0,
            run_at: 0,
            attempt: 1,
            max_attempts: 3,
            headers: Default::default(),
            created_at: 0,
            lease: LeaseId(9),
        }
    }

    /// A hand-off refilled after it ran carries the new jobs only, in order, on the deque
    /// and results buffer of the last one.
    #[test]
    fn a_refilled_handoff_runs_its_new_jobs_on_the_old_buffers() {
        let mut h = Handoff::default();
        h.refill(0, (1..=3).map(job), Vec::new());
        let (jobs, mut done) = h.begin();
        assert_eq!(jobs, 3);
        let ran: Vec<i64> = std::iter::from_fn(|| h.start_next())
            .map(|j| j.id.0)
            .collect();
        assert_eq!((ran, h.load()), (vec![1, 2, 3], (0, false)));
        done.extend((1..=3).map(|id| Done {
            id: JobId(id),
            lease: LeaseId(9),
            outcome: Outcome::Ack,
            took: Duration::ZERO,
        }));
        let kept = done.capacity();
        done.clear();

        h.refill(2, (4..=5).map(job), done);
        assert_eq!((h.queue, h.load()), (2, (2, false)));
        let (jobs, done) = h.begin();
        assert_eq!((jobs, done.len(), done.capacity()), (2, 0, kept));
        assert_eq!(h.start_next().map(|j| j.id), Some(JobId(4)));
        let running = h.running().map(|s| (s.id, s.lease));
        assert_eq!(running, Some((JobId(4), LeaseId(9))));
    }
}
