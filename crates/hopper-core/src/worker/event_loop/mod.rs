//! The event loop: one task that owns every queue's buffer and window, and decides what to
//! fetch, what to hand to the pool, what to settle and which leases to renew
//! (docs/design.md, "How a worker takes work").
//!
//! Nothing in here waits on the broker: fetches, settlements and renewals run as spawned
//! tasks that report back as [`Event`]s, so the loop keeps handing out work while a round
//! trip is in flight, and free slots accumulate into the next fetch instead of each making
//! a round trip of its own.
//!
//! # Layout
//! Each file owns its part of the loop's state:
//! - this file: the loop itself, [`run`](EventLoop::run) and one pass
//!   ([`step`](EventLoop::step)), and the routing of events;
//! - `queue`: one queue's buffer, counters and flags;
//! - `intake`: pulled, pushed or in-process; windows, fetch sizes, top-ups, fetching;
//! - `subscriptions`: a pushed broker's subscription per queue and its window;
//! - `dispatch`: hand-offs and batches to pool tasks, and what they report back;
//! - `tasks`: the pool's tasks as the loop sees them (spawn, idle, shrink, abandon);
//! - `settle`: settlements, grouped into batches;
//! - `leases`: renewal and lost leases;
//! - `shutdown`: the stop, its grace period, releasing what did not start;
//! - `control`: pause, resume, cancel, counts and reports from the running worker.

mod control;
mod dispatch;
mod intake;
mod leases;
mod queue;
mod settle;
mod shutdown;
mod subscriptions;
mod tasks;

pub(crate) use control::without_queues;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep_until};

use self::dispatch::Dispatcher;
use self::intake::{Asked, Intake, Mode};
use self::leases::Leases;
use self::queue::QueueState;
use self::settle::Settler;
use self::shutdown::Stopping;
use self::tasks::{InlineRan, Tasks};
use super::pool::{PoolContext, TaskReport};
use super::stats::{QueueStats, WorkerStats};
use super::{QueueSpec, WorkerConfig};
use crate::broker::{Broker, Fetched, SettleReport, Settlement};
use crate::error::Result;
use crate::job::{JobId, LeaseId};
use crate::worker::metrics::{WallClock, WorkerMeters};

/// How long the loop sleeps at most when nothing is due.
const IDLE_HORIZON: Duration = Duration::from_secs(3600);

/// A request from the running [`Worker`](super::Worker), each with where to answer.
pub(crate) enum Command {
    Pause(String, oneshot::Sender<Result<()>>),
    Resume(String, oneshot::Sender<Result<()>>),
    Cancel(JobId, oneshot::Sender<bool>),
    Counts(String, oneshot::Sender<Result<(u64, u64)>>),
    /// What the worker's heartbeat reports of each queue.
    Report(oneshot::Sender<Vec<crate::registry::QueueBeat>>),
    Shutdown(Option<Duration>, oneshot::Sender<()>),
}

/// What wakes the loop: a command, or a round trip or a task that finished.
pub(crate) enum Event {
    Command(Command),
    Fetched {
        result: Result<Fetched>,
        asked: Asked,
        /// When the fetch was sent, to time its round trip, and its number.
        sent: intake::Sent,
    },
    TaskDone(TaskReport),
    Settled {
        result: Result<SettleReport>,
        batch: Vec<Settlement>,
        /// The queue of each settlement, where known.
        queues: Vec<Option<usize>>,
    },
    Renewed(Result<Vec<LeaseId>>),
    /// A pushed broker's `subscribe` or `unsubscribe` for this queue returned.
    Subscribed {
        queue: usize,
        result: Result<()>,
    },
}

pub(crate) struct EventLoop {
    broker: Arc<dyn Broker>,
    cfg: WorkerConfig,
    queues: Vec<QueueState>,
    by_name: HashMap<String, usize>,
    events: mpsc::UnboundedSender<Event>,
    rx: mpsc::UnboundedReceiver<Event>,
    stats: Arc<Mutex<WorkerStats>>,
    intake: Intake,
    dispatch: Dispatcher,
    tasks: Tasks,
    settler: Settler,
    leases: Leases,
    stopping: Option<Stopping>,
    meters: WorkerMeters,
    wall: WallClock,
    /// Something this pass did (a fetch taken in at once) calls for another pass before
    /// the loop waits.
    step_again: bool,
}

enum Woke {
    Event(Option<Event>),
    Inline(InlineRan),
    Timer,
    Signal,
}

impl EventLoop {
    pub(crate) fn new(
        broker: Arc<dyn Broker>,
        specs: Vec<QueueSpec>,
        cfg: WorkerConfig,
        events: mpsc::UnboundedSender<Event>,
        rx: mpsc::UnboundedReceiver<Event>,
        stats: Arc<Mutex<WorkerStats>>,
    ) -> Self {
        let caps = broker.capabilities();
        let mut handlers = Vec::new();
        let mut queues = Vec::new();
        let mut by_name = HashMap::new();
        for (i, spec) in specs.into_iter().enumerate() {
            by_name.insert(spec.name.clone(), i);
            handlers.push(spec.handler);
            queues.push(QueueState::new(spec.name, spec.options, caps.name));
        }
        {
            let mut st = stats.lock().unwrap_or_else(|e| e.into_inner());
            for q in &queues {
                st.queues.insert(q.name.clone(), QueueStats::default());
            }
        }
        let limit = cfg
            .max_concurrency
            .unwrap_or_else(|| queues.iter().map(|q| q.opts.concurrency).sum());
        let reports = events.clone();
        // A broker in this process cannot be cut off from its workers: only workers of
        // other brokers give leases up on their own.
        let leases = Leases::new(
            caps.leases,
            cfg.lease_renewal,
            cfg.lease_ttl,
            !caps.in_process,
        );
        let ctx = Arc::new(PoolContext {
            timeouts: queues.iter().map(|q| q.opts.timeout).collect(),
            holds_keys: queues.iter().map(|q| q.opts.retries_hold_key).collect(),
            timed: queues.iter().map(|q| q.sizer.is_some()).collect(),
            expired: leases.expired.clone(),
            polls: queues.iter().map(|_| Default::default()).collect(),
            handlers,
            retry: cfg.retry,
            report: Box::new(move |r| reports.send(Event::TaskDone(r)).is_ok()),
        });
        let wake = broker.wake_signal();
        let mut intake = Intake::new(Mode::of(&caps), wake);
        intake.limits_to_set = queues
            .iter()
            .filter_map(|q| Some((q.name.clone(), q.opts.rate_limit?)))
            .collect();
        EventLoop {
            intake,
            leases,
            dispatch: Dispatcher::default(),
            tasks: Tasks::new(ctx, limit),
            settler: Settler::default(),
            broker,
            cfg,
            queues,
            by_name,
            events,
            rx,
            stats,
            stopping: None,
            meters: WorkerMeters::new(caps.name),
            wall: WallClock::new(),
            step_again: false,
        }
    }

    pub(crate) async fn run(mut self) {
        self.warn_capped_batches();
        self.tasks.spawn();
        // One timer for the whole loop, moved only when the deadline moves: registering a
        // fresh one on every pass costs a timer-wheel lock and a clock read per event.
        let mut idle_until = Instant::now() + IDLE_HORIZON;
        let timer = sleep_until(idle_until);
        tokio::pin!(timer);
        loop {
            let now = {
                let stats = self.stats.clone();
                let mut st = stats.lock().unwrap_or_else(|e| e.into_inner());
                let now = self.step(&mut st);
                if self.finished() || self.give_up(now, &mut st) {
                    break;
                }
                now
            };
            self.tasks.drop_abandoned();
            if std::mem::take(&mut self.step_again) {
                continue;
            }
            // With nothing due, the loop still wakes within an hour; that horizon moves
            // forward once a second at most rather than on every pass.
            if idle_until < now + IDLE_HORIZON - Duration::from_secs(1) {
                idle_until = now + IDLE_HORIZON;
            }
            let deadline = self.next_deadline(idle_until);
            if timer.deadline() != deadline {
                timer.as_mut().reset(deadline);
            }
            let wake_wanted = self.queues.iter().any(|q| q.drained);
            let woke = {
                let rx = &mut self.rx;
                let wake = &mut self.intake.wake;
                let inline = &mut self.tasks.inline;
                let running_inline = !inline.is_empty();
                tokio::select! {
                    biased;
                    Some(ran) = inline.next(), if running_inline => Woke::Inline(ran),
                    ev = rx.recv() => Woke::Event(ev),
                    _ = &mut timer => Woke::Timer,
                    changed = async { wake.as_mut().expect("checked").changed().await },
                        if wake_wanted && wake.is_some() =>
                    {
                        if changed.is_err() {
                            *wake = None;
                        }
                        Woke::Signal
                    }
                }
            };
            // The hand-offs running on this task are polled without the stats lock, which
            // handler code may take to read the stats; each one that finishes is taken in
            // at once, before the next is polled, so that its settlement can go before the
            // rest of a burst runs (on a pushed broker, the ack the server waits on).
            let stats = self.stats.clone();
            let (mut first, woke) = match woke {
                Woke::Inline(first) => (Some(first), None),
                other => (None, Some(other)),
            };
            let mut ran_here = 0;
            while let Some(ran) = first
                .take()
                .or_else(|| self.tasks.inline.next().now_or_never().flatten())
            {
                ran_here += 1;
                let (task, (done, elapsed)) = ran;
                let mut st = stats.lock().unwrap_or_else(|e| e.into_inner());
                self.task_done(task, done, elapsed, &mut st);
            }
            {
                let mut st = stats.lock().unwrap_or_else(|e| e.into_inner());
                match woke {
                    Some(Woke::Event(None)) => break,
                    Some(Woke::Event(Some(ev))) => self.handle(ev, &mut st),
                    Some(Woke::Signal) => self.undrain(),
                    Some(Woke::Inline(_) | Woke::Timer) | None => {}
                }
                // The events waiting go in on every pass, whatever woke it: hand-offs that
                // finish on this task would otherwise win the biased select every time, and
                // commands (a stop, a pause) would wait for the backlog to run out.
                for _ in 0..1024 {
                    match self.rx.try_recv() {
                        Ok(ev) => self.handle(ev, &mut st),
                        Err(_) => break,
                    }
                }
            }
            // Each job run here counts against this task's cooperative budget, so a
            // backlog of brief jobs does not keep the runtime's other tasks from their turn.
            for _ in 0..ran_here {
                tokio::task::consume_budget().await;
            }
        }
        self.tasks.end_all();
        self.close_subscriptions().await;
        if let Some(stopping) = self.stopping.take() {
            stopping.reply();
        }
    }

    /// The earliest moment something is due: a settlement batch, a batch handler's wait, a
    /// poll, a scheduled job, an idle task's end, a held-back top-up, a renewal, a lease to
    /// give up, the end of the grace period.
    fn next_deadline(&self, idle_until: Instant) -> Instant {
        let mut at = idle_until;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                at = at.min(t);
            }
        };
        for t in self.settler.next_deadline(self.cfg.settle_delay) {
            consider(t);
        }
        // A deadline counts only while its action can run when it comes; one that is past
        // and blocked (a batch due with every slot busy) would spin the loop.
        let can_hand_off = self.tasks.available();
        for q in &self.queues {
            if let (Some(since), Some((_, wait))) = (q.batch_since, q.opts.batch) {
                if !q.buffer.is_empty() && can_hand_off && q.busy < q.opts.concurrency && !q.paused
                {
                    consider(Some(since + wait));
                }
            }
        }
        consider(self.intake.next_poll);
        consider(self.intake.next_due);
        consider(self.tasks.next_expiry());
        if self.intake.in_flight == 0 {
            consider(self.intake.retry_at);
            let hold = self.intake.hold();
            for q in &self.queues {
                consider(q.top_up_since.map(|since| since + hold));
            }
        }
        consider(self.leases.next_deadline());
        consider(self.leases.next_give_up());
        consider(
            self.stopping
                .as_ref()
                .filter(|s| !s.abandoned)
                .map(|s| s.deadline),
        );
        consider(self.stopping.as_ref().map(Stopping::give_up_at));
        at
    }

    /// One pass: timers, hand-offs, subscriptions, fetch, settlements, renewals, pool
    /// size. Returns the time the pass started.
    fn step(&mut self, st: &mut WorkerStats) -> Instant {
        let now = Instant::now();
        if self.intake.next_poll.is_some_and(|t| t <= now)
            || self.intake.next_due.is_some_and(|t| t <= now)
        {
            self.undrain();
        }
        self.check_grace(now, st);
        self.give_up_leases(now, st);
        self.dispatch(now, st);
        self.maybe_subscribe(st);
        self.maybe_fetch(now, st);
        if let Some((result, asked, sent)) = self.intake.fetched_now.take() {
            self.fetched(result, asked, sent, st);
            self.step_again = true;
        }
        self.maybe_settle(now, st);
        self.maybe_renew(now);
        self.tasks.shrink(now);
        if self.intake.next_poll.is_none() && self.queues.iter().any(|q| q.drained) {
            self.intake.next_poll = Some(now + self.cfg.poll_interval);
        }
        self.tasks.record(st);
        st.buffered = self.queues.iter().map(QueueState::waiting).sum();
        now
    }

    fn handle(&mut self, ev: Event, st: &mut WorkerStats) {
        match ev {
            Event::Command(cmd) => self.command(cmd, st),
            Event::Fetched {
                result,
                asked,
                sent,
            } => self.fetched(result, asked, sent, st),
            Event::TaskDone(TaskReport {
                task,
                done,
                elapsed,
            }) => self.task_done(task, done, elapsed, st),
            Event::Settled {
                result,
                batch,
                queues,
            } => self.settled(result, batch, queues, st),
            Event::Subscribed { queue, result } => self.subscribed(queue, result),
            Event::Renewed(result) => self.renewed(result, st),
        }
    }

    /// The index of the queue named `name`, if this worker works it.
    fn queue_of(&self, name: &str) -> Option<usize> {
        match self.queues.as_slice() {
            [only] => (only.name == name).then_some(0),
            _ => self.by_name.get(name).copied(),
        }
    }
}

impl std::fmt::Debug for EventLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLoop")
            .field("queues", &self.queues.len())
            .finish()
    }
}
