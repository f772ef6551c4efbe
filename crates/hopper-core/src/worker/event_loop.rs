//! The event loop: one task that owns every queue's buffer and window, and decides what to
//! fetch, what to hand to the pool, what to settle and which leases to renew.
//!
//! Nothing in here waits on the broker: fetches, settlements and renewals run as spawned
//! tasks that report back as [`Event`]s, so the loop keeps handing out work while a round
//! trip is in flight, and free slots accumulate into the next fetch instead of each making
//! a round trip of its own.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime};

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use smallvec::SmallVec;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use super::pool::{self, Done, Handoff, PoolContext, Work};
use super::stats::{QueueStats, WorkerStats, push_size};
use super::{
    Command, HANDOFF_MAX, POOL_KEEP_ALIVE, QueueOptions, QueueSpec, STOP_SETTLE_LIMIT, WorkerConfig,
};
use crate::broker::{Broker, Budget, FetchRequest, Fetched, Outcome, SettleReport, Settlement};
use crate::error::{ConfigError, Error, Result};
use crate::job::{IdMap, IdSet, Job, JobId, LeaseId, to_millis};
use crate::prefetch::{AUTO_CEILING, AutoSizer, Prefetch};

/// Hand-offs are sized to arrive about this far apart (DESIGN.md §7).
const HANDOFF_SPACING: Duration = Duration::from_micros(32);
/// A one-job hand-off runs on the event loop's own task once its queue's handlers are
/// known to hold the thread less than this per poll (the longest recent poll, see
/// [`pool::PollGauge`]): waking a pool task for it would cost about as much as the job,
/// and on a runtime with a second thread it wakes that thread too. Until a poll was timed,
/// and once one took longer, a pool task runs it, so a handler that computes between its
/// awaits does not hold the loop up. (One that computes in many polls shorter than this
/// runs on the loop's thread, one poll at a time.)
const INLINE_POLL_LIMIT: Duration = HANDOFF_SPACING;
/// In process, with the default window, a queue holds this many hand-offs per slot.
const IN_PROCESS_HANDOFFS: usize = 2;
/// How long the loop sleeps at most when nothing is due.
const IDLE_HORIZON: Duration = Duration::from_secs(3600);

/// What one fetch asked for: (queue index, jobs) per queue.
type Asked = Vec<(usize, usize)>;
/// Work running on the event loop's own task ([`INLINE_POLL_LIMIT`]).
type InlineWork = Pin<Box<dyn Future<Output = InlineRan> + Send>>;

pub(crate) enum Event {
    Command(Command),
    Fetched {
        result: Result<Fetched>,
        asked: Vec<(usize, usize)>,
    },
    TaskDone {
        task: usize,
        done: Vec<Done>,
        elapsed: Duration,
    },
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

/// The largest window a queue's options can lead to; used to check lease renewal.
pub(crate) fn max_window(o: &QueueOptions, in_process: bool) -> usize {
    let per_slot = o.batch.map_or(1, |(size, _)| size);
    match o.prefetch {
        None if in_process => o.concurrency * per_slot.max(IN_PROCESS_HANDOFFS * HANDOFF_MAX),
        None | Some(Prefetch::Slots) => o.concurrency * per_slot,
        Some(Prefetch::Fixed(n)) => n.max(o.concurrency),
        Some(Prefetch::Auto) => o.concurrency * AUTO_CEILING,
    }
}

struct QState {
    name: String,
    opts: QueueOptions,
    buffer: VecDeque<Job>,
    /// Pool tasks working on this queue.
    busy: usize,
    /// Jobs handed to tasks and not reported back (waiting or running).
    in_handoffs: usize,
    sizer: Option<AutoSizer>,
    paused: bool,
    /// The last fetch came back short: wait for a wake-up, a due job or the poll.
    drained: bool,
    seen_priority: bool,
    /// When the batch now collecting got its first job.
    batch_since: Option<Instant>,
    /// Since when a top-up of this queue (see [`EventLoop::top_up`]) has been held back.
    top_up_since: Option<Instant>,
    /// Pushed brokers: the window last asked for with `subscribe` (`Some(None)`: the
    /// broker's default), or `None` while there is no subscription.
    window_sent: Option<Option<u32>>,
    /// Pushed brokers: a `subscribe` or `unsubscribe` is in flight.
    subscribing: bool,
    /// Pushed brokers: the subscription has been opened (its first `subscribe` returned).
    /// No fetch before: a fetch would open one itself, under the broker's default window.
    subscribed: bool,
    /// Settlements of this queue's jobs not yet applied by the broker. On a pushed broker
    /// they still count against the window, so the Auto rule needs them to tell a full
    /// window from a short one.
    settling: usize,
}

enum TaskWork {
    Jobs(Arc<Handoff>),
    Batch {
        queue: usize,
        held: Vec<(JobId, LeaseId)>,
    },
}

/// A pool task: it runs one piece of work at a time, given to it over `tx`, or, for one
/// brief job ([`INLINE_POLL_LIMIT`]), lends its slot to that job run on the event loop's
/// own task.
struct Task {
    tx: mpsc::UnboundedSender<Work>,
    join: JoinHandle<()>,
    work: Option<TaskWork>,
}

struct Stopping {
    deadline: Instant,
    /// The grace period is over and the running jobs were released.
    abandoned: bool,
    replies: Vec<oneshot::Sender<()>>,
}

impl Stopping {
    /// The grace period plus [`STOP_SETTLE_LIMIT`]: the loop stops then, whatever it has
    /// not been able to settle.
    fn give_up_at(&self) -> Instant {
        self.deadline + STOP_SETTLE_LIMIT
    }
}

pub(crate) struct EventLoop {
    broker: Arc<dyn Broker>,
    in_process: bool,
    /// The broker pushes deliveries under a window (DESIGN.md §5): subscribe per queue,
    /// and count each hand-off to a handler as a fetch in the stats.
    pushed: bool,
    /// The broker has leases to renew; brokers without (RabbitMQ) are never asked.
    leases_on: bool,
    cfg: WorkerConfig,
    queues: Vec<QState>,
    by_name: HashMap<String, usize>,
    events: mpsc::UnboundedSender<Event>,
    rx: mpsc::UnboundedReceiver<Event>,
    stats: Arc<Mutex<WorkerStats>>,
    ctx: Arc<PoolContext>,
    tasks: Vec<Option<Task>>,
    /// Idle tasks and since when, the longest idle first; the last one idle is given work
    /// first, so the others can reach [`POOL_KEEP_ALIVE`] and end.
    idle: Vec<(usize, Instant)>,
    /// Pool tasks spawned since the start.
    tasks_started: u64,
    live: usize,
    limit: usize,
    fetch_in_flight: bool,
    /// When the fetch in flight was sent.
    fetch_sent: Instant,
    /// Fetch round trips, as a moving average in which the newest weighs 30%: how long a
    /// top-up is held back at most.
    fetch_rtt: Option<Duration>,
    fetch_retry_at: Option<Instant>,
    fetch_backoff: Duration,
    settles: Vec<Settlement>,
    /// The queue of each settlement of `settles`, where known.
    settle_queues: Vec<Option<usize>>,
    settle_since: Option<Instant>,
    /// The number of settlements in the batch in flight, if one is.
    settle_in_flight: Option<usize>,
    settle_retry_at: Option<Instant>,
    leases: IdMap<LeaseId, usize>,
    lost: IdSet<LeaseId>,
    renew_in_flight: bool,
    next_renew: Instant,
    wake: Option<watch::Receiver<u64>>,
    next_poll: Option<Instant>,
    next_due: Option<Instant>,
    /// Time per job of the last timed hand-off.
    job_time: Option<Duration>,
    rotate: usize,
    stopping: Option<Stopping>,
    /// A fetch that completed as it was sent (an in-process broker), not yet taken in.
    fetched_now: Option<(Result<Fetched>, Asked)>,
    /// Something this pass did (a fetch taken in at once) calls for another pass before
    /// the loop waits.
    step_again: bool,
    /// Hand-offs running on this task ([`INLINE_POLL_LIMIT`]).
    inline: FuturesUnordered<InlineWork>,
    /// The hand-offs that were running on this task when the grace period ended, to drop
    /// once the stats lock is released (a handler's drop may read the stats).
    abandoned_inline: FuturesUnordered<InlineWork>,
    /// Finished hand-offs and their results buffers, for the next hand-offs to reuse.
    spare: Vec<(Arc<Handoff>, Vec<Done>)>,
}

/// Finished hand-offs kept for reuse, at most: one per task of a large pool.
const SPARE_HANDOFFS: usize = 64;

/// What an inline hand-off returns: the pool task whose slot it ran in, what finished and
/// how long it took.
type InlineRan = (usize, (Vec<Done>, Duration));

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
            queues.push(QState {
                sizer: (spec.options.prefetch == Some(Prefetch::Auto)).then(AutoSizer::default),
                name: spec.name,
                opts: spec.options,
                buffer: VecDeque::new(),
                busy: 0,
                in_handoffs: 0,
                paused: false,
                drained: false,
                seen_priority: false,
                batch_since: None,
                top_up_since: None,
                window_sent: None,
                subscribing: false,
                subscribed: false,
                settling: 0,
            });
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
        let ctx = Arc::new(PoolContext {
            timed: queues.iter().map(|q| q.sizer.is_some()).collect(),
            polls: queues.iter().map(|_| Default::default()).collect(),
            handlers,
            retry: cfg.retry,
            events: events.clone(),
        });
        let wake = broker.wake_signal();
        EventLoop {
            in_process: caps.in_process,
            pushed: caps.pushed,
            leases_on: caps.leases,
            next_renew: Instant::now() + cfg.lease_ttl / 3,
            broker,
            cfg,
            queues,
            by_name,
            events,
            rx,
            stats,
            ctx,
            tasks: Vec::new(),
            idle: Vec::new(),
            tasks_started: 0,
            live: 0,
            limit,
            fetch_in_flight: false,
            fetch_sent: Instant::now(),
            fetch_rtt: None,
            fetch_retry_at: None,
            fetch_backoff: Duration::from_millis(50),
            settles: Vec::new(),
            settle_queues: Vec::new(),
            settle_since: None,
            settle_in_flight: None,
            settle_retry_at: None,
            leases: IdMap::default(),
            lost: IdSet::default(),
            renew_in_flight: false,
            wake,
            next_poll: None,
            next_due: None,
            job_time: None,
            rotate: 0,
            stopping: None,
            fetched_now: None,
            step_again: false,
            inline: FuturesUnordered::new(),
            abandoned_inline: FuturesUnordered::new(),
            spare: Vec::new(),
        }
    }

    pub(crate) async fn run(mut self) {
        self.warn_capped_batches();
        self.spawn_task();
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
            if !self.abandoned_inline.is_empty() {
                self.abandoned_inline = FuturesUnordered::new();
            }
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
                let wake = &mut self.wake;
                let inline = &mut self.inline;
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
                .or_else(|| self.inline.next().now_or_never().flatten())
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
        // Dropping a task's sender ends it.
        self.tasks.clear();
        // Only now, with every settlement applied: closing a subscription earlier would
        // hand back jobs whose handlers are still finishing in the grace period, and their
        // acknowledgements would then be refused.
        if self.pushed {
            // One limit for every queue together, so a hung connection holds the stop up
            // once, not once per queue.
            let closed_by = Instant::now() + STOP_SETTLE_LIMIT;
            for q in &self.queues {
                let closing = self.broker.unsubscribe(&q.name);
                match tokio::time::timeout_at(closed_by, closing).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(queue = %q.name, error = %e.chain(), "closing the subscription failed");
                    }
                    Err(_) => {
                        tracing::warn!(queue = %q.name, waited = ?STOP_SETTLE_LIMIT, "closing the subscription did not finish; leaving it");
                    }
                }
            }
        }
        if let Some(stopping) = self.stopping.take() {
            for r in stopping.replies {
                let _ = r.send(());
            }
        }
    }

    /// Past the grace period and [`STOP_SETTLE_LIMIT`] with settlements still undelivered
    /// (or a fetch still out): the broker is unreachable, and the worker stops without them.
    fn give_up(&self, now: Instant, st: &mut WorkerStats) -> bool {
        if self.stopping.as_ref().is_none_or(|s| now < s.give_up_at()) {
            return false;
        }
        let in_flight = self.settle_in_flight.unwrap_or(0);
        let undelivered = self.settles.len() + in_flight;
        st.settlements_undelivered += undelivered as u64;
        if undelivered > 0 {
            tracing::warn!(
                undelivered,
                in_flight,
                "stopping with settlements the broker has not confirmed; their jobs come back \
                 once their leases expire, as after a crash"
            );
        }
        if self.fetch_in_flight {
            tracing::warn!(
                "stopping with a fetch the broker has not answered; what it claims comes \
                 back once its lease expires"
            );
        }
        true
    }

    fn finished(&self) -> bool {
        self.stopping.is_some()
            && self.idle.len() == self.live
            && !self.fetch_in_flight
            && self.settles.is_empty()
            && self.settle_in_flight.is_none()
    }

    fn undrain(&mut self) {
        for q in &mut self.queues {
            q.drained = false;
        }
        self.next_poll = None;
        self.next_due = None;
    }

    fn next_deadline(&self, idle_until: Instant) -> Instant {
        let mut at = idle_until;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                at = at.min(t);
            }
        };
        if !self.settles.is_empty() && self.settle_in_flight.is_none() {
            consider(self.settle_since.map(|s| s + self.cfg.settle_delay));
            consider(self.settle_retry_at);
        }
        // A deadline counts only while its action can run when it comes; one that is past
        // and blocked (a batch due with every slot busy) would spin the loop.
        let can_hand_off = self.task_available();
        for q in &self.queues {
            if let (Some(since), Some((_, wait))) = (q.batch_since, q.opts.batch) {
                if !q.buffer.is_empty() && can_hand_off && q.busy < q.opts.concurrency && !q.paused
                {
                    consider(Some(since + wait));
                }
            }
        }
        consider(self.next_poll);
        consider(self.next_due);
        if let [(_, longest), _, ..] = self.idle.as_slice() {
            consider(Some(*longest + POOL_KEEP_ALIVE));
        }
        if !self.fetch_in_flight {
            consider(self.fetch_retry_at);
            let hold = self.top_up_hold();
            for q in &self.queues {
                consider(q.top_up_since.map(|since| since + hold));
            }
        }
        if self.leases_on
            && self.cfg.lease_renewal
            && !self.leases.is_empty()
            && !self.renew_in_flight
        {
            consider(Some(self.next_renew));
        }
        consider(
            self.stopping
                .as_ref()
                .filter(|s| !s.abandoned)
                .map(|s| s.deadline),
        );
        consider(self.stopping.as_ref().map(Stopping::give_up_at));
        at
    }

    // ---- one pass: timers, hand-offs, fetch, settlements, renewals, pool size ----

    /// Returns the time the pass started.
    fn step(&mut self, st: &mut WorkerStats) -> Instant {
        let now = Instant::now();
        if self.next_poll.is_some_and(|t| t <= now) || self.next_due.is_some_and(|t| t <= now) {
            self.undrain();
        }
        if let Some(stopping) = self.stopping.as_mut() {
            if !stopping.abandoned && stopping.deadline <= now {
                stopping.abandoned = true;
                self.abandon_running(st);
            }
        }
        self.dispatch(now, st);
        self.maybe_subscribe(st);
        self.maybe_fetch(now);
        if let Some((result, asked)) = self.fetched_now.take() {
            self.fetched(result, asked, st);
            self.step_again = true;
        }
        self.maybe_settle(now, st);
        self.maybe_renew(now);
        self.shrink_pool(now);
        if self.next_poll.is_none() && self.queues.iter().any(|q| q.drained) {
            self.next_poll = Some(now + self.cfg.poll_interval);
        }
        // Every live task is idle or working.
        st.running = self.live - self.idle.len();
        st.buffered = self
            .queues
            .iter()
            .map(|q| q.buffer.len() + q.in_handoffs - q.busy.min(q.in_handoffs))
            .sum();
        st.pool_tasks = self.live;
        st.idle_tasks = self.idle.len();
        st.peak_pool_tasks = st.peak_pool_tasks.max(self.live);
        st.pool_tasks_started = self.tasks_started;
        now
    }

    fn window(&self, q: &QState) -> usize {
        let c = q.opts.concurrency;
        let per_slot = q.opts.batch.map_or(1, |(size, _)| size);
        match q.opts.prefetch {
            None if self.in_process => c * per_slot.max(IN_PROCESS_HANDOFFS * self.by_time(c)),
            None | Some(Prefetch::Slots) => c * per_slot,
            // The server holds a pushed subscription to exactly `n`.
            Some(Prefetch::Fixed(n)) if self.pushed => n,
            Some(Prefetch::Fixed(n)) => n.max(c),
            Some(Prefetch::Auto) => c * q.sizer.as_ref().map_or(1, AutoSizer::size),
        }
    }

    /// The window a pushed broker's subscription gets: the queue's `prefetch`, else `None`
    /// for the broker's own default (DESIGN.md §5).
    fn pushed_window(q: &QState) -> Option<u32> {
        let per_slot = q.opts.batch.map_or(1, |(size, _)| size);
        let n = match q.opts.prefetch? {
            Prefetch::Fixed(n) => n,
            Prefetch::Slots => q.opts.concurrency * per_slot,
            Prefetch::Auto => q.opts.concurrency * q.sizer.as_ref().map_or(1, AutoSizer::size),
        };
        Some(u32::try_from(n).unwrap_or(u32::MAX))
    }

    /// Says at start which batch queues can never fill a batch: a batch closes at the
    /// window when the window is smaller (the server pushes no more than it).
    fn warn_capped_batches(&self) {
        for q in &self.queues {
            let Some((size, wait)) = q.opts.batch else {
                continue;
            };
            if q.opts.prefetch == Some(Prefetch::Auto) {
                continue; // the window grows with the job times; a warning would be noise
            }
            let window = if self.pushed {
                Self::pushed_window(q).map(|w| w as usize)
            } else {
                Some(self.window(q))
            };
            if let Some(window) = window.filter(|&w| w < size) {
                tracing::warn!(
                    queue = %q.name,
                    window,
                    batch_size = size,
                    "the window caps the batch: batches of this queue close at {window} jobs \
                     (or {wait:?} after their first), never at {size}; raise prefetch to at \
                     least the batch size to fill them"
                );
            }
        }
    }

    /// Opens each queue's subscription on a pushed broker, and re-sends the window when it
    /// changed (the Auto rule resizing it). One call per queue at a time, so windows reach
    /// the broker in the order they were decided.
    fn maybe_subscribe(&mut self, st: &mut WorkerStats) {
        if !self.pushed || self.stopping.is_some() {
            return;
        }
        for qi in 0..self.queues.len() {
            let q = &self.queues[qi];
            if q.paused || q.subscribing {
                continue;
            }
            let window = Self::pushed_window(q);
            if q.window_sent == Some(window) {
                continue;
            }
            let q = &mut self.queues[qi];
            q.window_sent = Some(window);
            q.subscribing = true;
            if let Some(w) = window {
                let qs = st.queues.entry(q.name.clone()).or_default();
                push_size(&mut qs.windows, w as usize);
            }
            let (broker, events, name) = (self.broker.clone(), self.events.clone(), q.name.clone());
            tokio::spawn(async move {
                let result = broker.subscribe(&name, window).await;
                let _ = events.send(Event::Subscribed { queue: qi, result });
            });
        }
    }

    /// Closes a paused queue's subscription, so the server gives its deliveries to others.
    fn unsubscribe_paused(&mut self, qi: usize) {
        let q = &mut self.queues[qi];
        if !self.pushed || q.window_sent.is_none() {
            return;
        }
        q.window_sent = None;
        q.subscribing = true;
        q.subscribed = false;
        let (broker, events, name) = (self.broker.clone(), self.events.clone(), q.name.clone());
        tokio::spawn(async move {
            let result = broker.unsubscribe(&name).await;
            let _ = events.send(Event::Subscribed { queue: qi, result });
        });
    }

    fn task_available(&self) -> bool {
        !self.idle.is_empty() || self.live < self.limit
    }

    fn dispatch(&mut self, now: Instant, st: &mut WorkerStats) {
        if self.stopping.is_some() {
            return;
        }
        let n = self.queues.len();
        self.rotate = (self.rotate + 1) % n;
        for i in 0..n {
            let qi = (self.rotate + i) % n;
            loop {
                let q = &self.queues[qi];
                if q.paused || q.buffer.is_empty() || q.busy >= q.opts.concurrency {
                    break;
                }
                if !self.task_available() {
                    return;
                }
                let work = match q.opts.batch {
                    Some((size, wait)) => {
                        let close = size.min(self.window(q));
                        let due = q.batch_since.is_some_and(|t| t + wait <= now);
                        if q.buffer.len() < close && !due {
                            break;
                        }
                        let take = close.min(q.buffer.len());
                        let q = &mut self.queues[qi];
                        let jobs: Vec<Job> = q.buffer.drain(..take).collect();
                        q.batch_since = (!q.buffer.is_empty()).then_some(now);
                        push_size(
                            &mut st.queues.entry(q.name.clone()).or_default().batch_sizes,
                            take,
                        );
                        let held = jobs.iter().map(|j| (j.id, j.lease)).collect();
                        (
                            Work::Batch { queue: qi, jobs },
                            TaskWork::Batch { queue: qi, held },
                            take,
                        )
                    }
                    None => {
                        let k = self.handoff_size(q);
                        let (mut h, done) = self.spare.pop().unwrap_or_default();
                        Arc::get_mut(&mut h)
                            .expect("a spare hand-off is not shared")
                            .refill(qi, self.queues[qi].buffer.drain(..k), done);
                        (Work::Jobs(h.clone()), TaskWork::Jobs(h), k)
                    }
                };
                let (work, record, k) = work;
                let inline = matches!(work, Work::Jobs(_))
                    && k == 1
                    && self.ctx.polls[qi]
                        .longest()
                        .is_some_and(|poll| poll < INLINE_POLL_LIMIT);
                push_size(&mut st.handoff_sizes, k);
                st.handoffs += 1;
                if self.pushed {
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
                self.give(work, record, inline);
            }
        }
    }

    /// Jobs in the next hand-off of a one-job queue (DESIGN.md §7).
    fn handoff_size(&self, q: &QState) -> usize {
        if self.queues.len() > 1 || q.seen_priority {
            return 1;
        }
        let c = q.opts.concurrency.min(self.limit).max(1);
        let even = (q.buffer.len() / c).max(1);
        even.min(self.by_time(c)).min(q.buffer.len())
    }

    /// The most jobs a hand-off carries by time at concurrency `c`: enough to keep
    /// hand-offs about 32 µs apart, at most 32; until a batch was timed, 1 (32 at
    /// concurrency 1). It also sizes an in-process queue's default window, two hand-offs
    /// per slot: jobs of a few microseconds get a deep buffer, so hand-offs stay full
    /// between fetches, and jobs of 32 µs or more two per slot, so a worker never hoards
    /// what another could run.
    fn by_time(&self, c: usize) -> usize {
        match self.job_time {
            None if c == 1 => HANDOFF_MAX,
            None => 1,
            Some(t) if t.is_zero() => HANDOFF_MAX,
            Some(t) => ((HANDOFF_SPACING.as_nanos() / t.as_nanos()) as usize).clamp(1, HANDOFF_MAX),
        }
    }

    fn spawn_task(&mut self) -> usize {
        let (tx, rx) = mpsc::unbounded_channel();
        let index = match self.tasks.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.tasks.push(None);
                self.tasks.len() - 1
            }
        };
        let join = tokio::spawn(pool::run_task(index, self.ctx.clone(), rx));
        self.tasks[index] = Some(Task {
            tx,
            join,
            work: None,
        });
        self.live += 1;
        self.tasks_started += 1;
        self.idle.push((index, Instant::now()));
        index
    }

    /// Gives `work` to an idle task (a new one if none is idle), to run on the event
    /// loop's own task in that task's slot if `inline`.
    fn give(&mut self, work: Work, record: TaskWork, inline: bool) {
        let index = match self.idle.pop() {
            Some((i, _)) => i,
            None => self.spawn_task_busy(),
        };
        let task = self.tasks[index].as_mut().expect("idle tasks are alive");
        task.work = Some(record);
        if inline {
            let ctx = self.ctx.clone();
            self.inline.push(Box::pin(async move {
                (index, pool::run_work(&ctx, work).await)
            }));
            return;
        }
        // A send fails only if the task died, which it does only when aborted at shutdown.
        let _ = task.tx.send(work);
    }

    /// A new task for work given at once: spawned, and taken straight off the idle list.
    fn spawn_task_busy(&mut self) -> usize {
        let index = self.spawn_task();
        self.idle.pop();
        index
    }

    /// Ends the tasks idle for [`POOL_KEEP_ALIVE`], keeping one idle task.
    fn shrink_pool(&mut self, now: Instant) {
        let expired = self
            .idle
            .iter()
            .take_while(|(_, since)| *since + POOL_KEEP_ALIVE <= now)
            .count()
            .min(self.idle.len().saturating_sub(1));
        for (index, _) in self.idle.drain(..expired) {
            self.tasks[index] = None;
            self.live -= 1;
        }
    }

    fn fetch_want(&self, q: &QState) -> usize {
        if q.paused || q.drained || (self.pushed && !q.subscribed) {
            return 0;
        }
        let window = self.window(q);
        // In process, with the in-process default window (DESIGN.md §7), the buffer is kept
        // topped up to the window, a free slot or not: a fetch is a mutex, not a round
        // trip, and only a deep buffer lets hand-offs reach their size. Fetching only once
        // the buffer ran dry would split each fetch of `max_batch` ever thinner over the
        // slots (50 over 8: hand-offs of 6, 5, 4, … 1) and cost the loop a pass per job or
        // two.
        let keep_full = self.in_process
            && q.opts.prefetch.is_none()
            && q.opts.batch.is_none()
            && !q.opts.pop_ahead;
        let low_water = match q.opts.batch {
            Some((size, _)) => size.min(window),
            None if keep_full => window,
            None => 1,
        };
        if q.buffer.len() >= low_water {
            return 0;
        }
        let slot_free = q.busy < q.opts.concurrency;
        if q.opts.batch.is_none() && !slot_free && !q.opts.pop_ahead && !keep_full {
            return 0;
        }
        let mut held = q.buffer.len() + q.in_handoffs;
        if q.opts.pop_ahead {
            held -= q.busy.min(q.in_handoffs);
        }
        let room = window.saturating_sub(held);
        let policy = match (&q.sizer, q.opts.prefetch) {
            (Some(sizer), _) => sizer.size(),
            _ => room,
        };
        policy.min(room).min(q.opts.max_batch)
    }

    /// Whether a fetch of `want` for `q` would be a top-up worth holding back: part of the
    /// window is free while the rest is still held. Claiming each freed slot at once makes
    /// fetches alternate between nearly the whole window and one job (50 1 49 1 …), which
    /// doubles the round trips per job. So a broker with a round trip waits up to one fetch
    /// round trip for the rest of the window to free up (short jobs free it all within
    /// that time; a slot of a long job idles at most one round trip more), and an
    /// in-process broker waits until half a fetch is free, or an eighth of the window if
    /// that is less. `Prefetch::Auto` sizes
    /// fetches by its own rule; batch and `pop_ahead` queues keep theirs; a pushed broker's
    /// fetch only takes what already arrived.
    fn top_up(&self, q: &QState, want: usize) -> bool {
        if self.pushed || q.sizer.is_some() || q.opts.batch.is_some() || q.opts.pop_ahead {
            return false;
        }
        let window = self.window(q);
        let full = window.min(q.opts.max_batch);
        let held = q.buffer.len() + q.in_handoffs;
        if self.in_process {
            // Half a fetch, but no more than an eighth of the window: fetches as large as
            // the window would otherwise let the buffer run half empty between them.
            held > 0 && want < full.div_ceil(2).min(window.div_ceil(8))
        } else {
            held > 0 && want < full
        }
    }

    /// How long a top-up is held back: one fetch round trip, at most 50 ms; nothing until
    /// a fetch was timed.
    fn top_up_hold(&self) -> Duration {
        self.fetch_rtt
            .unwrap_or(Duration::ZERO)
            .min(Duration::from_millis(50))
    }

    fn maybe_fetch(&mut self, now: Instant) {
        if self.fetch_in_flight
            || self.stopping.is_some()
            || self.fetch_retry_at.is_some_and(|t| t > now)
        {
            return;
        }
        self.fetch_retry_at = None;
        let hold = self.top_up_hold();
        // Allocated only once a queue asks: most passes ask for nothing.
        let mut asked: Vec<(usize, usize)> = Vec::new();
        for i in 0..self.queues.len() {
            let want = self.fetch_want(&self.queues[i]);
            let top_up = want > 0 && self.top_up(&self.queues[i], want);
            let q = &mut self.queues[i];
            if !top_up {
                q.top_up_since = None;
                if want > 0 {
                    asked.push((i, want));
                }
                continue;
            }
            if self.in_process {
                // Fetching is free, so there is no round trip to wait out; but a sliver of
                // the window per fetch would cost a pass of the loop per few jobs.
                continue;
            }
            let since = *q.top_up_since.get_or_insert(now);
            if now >= since + hold {
                q.top_up_since = None;
                asked.push((i, want));
            }
        }
        if asked.is_empty() {
            return;
        }
        self.fetch_sent = now;
        if let Some(w) = self.wake.as_mut() {
            // Anything enqueued from here on wakes a queue this fetch may find drained.
            w.borrow_and_update();
        }
        let request = FetchRequest {
            budgets: asked
                .iter()
                .map(|&(i, n)| Budget {
                    queue: self.queues[i].name.clone(),
                    limit: n,
                })
                .collect(),
            lease_ttl: self.cfg.lease_ttl,
        };
        self.fetch_in_flight = true;
        let broker = self.broker.clone();
        let mut fetch = Box::pin(async move { broker.fetch(request).await });
        if self.in_process || self.pushed {
            // An in-process fetch is a few map operations under a lock and returns on its
            // first poll, and so does a pushed broker's, which takes from what the server
            // already pushed: taking its result here spares a task, two wake-ups and a pass
            // of the loop per fetch, during which the slots would drain (and, at a small
            // window, the server would wait on the acknowledgements that follow).
            let mut cx = Context::from_waker(Waker::noop());
            if let Poll::Ready(result) = fetch.as_mut().poll(&mut cx) {
                self.fetched_now = Some((result, asked));
                return;
            }
        }
        let events = self.events.clone();
        tokio::spawn(async move {
            let result = fetch.await;
            let _ = events.send(Event::Fetched { result, asked });
        });
    }

    fn maybe_settle(&mut self, now: Instant, st: &mut WorkerStats) {
        if self.settles.is_empty()
            || self.settle_in_flight.is_some()
            || self.settle_retry_at.is_some_and(|t| t > now)
        {
            return;
        }
        let due = self.settles.len() >= self.cfg.settle_batch
            || self.stopping.is_some()
            || self
                .settle_since
                .is_some_and(|s| s + self.cfg.settle_delay <= now)
            || self.window_starved();
        if !due {
            return;
        }
        self.settle_retry_at = None;
        self.settle_since = None;
        self.settle_in_flight = Some(self.settles.len());
        let batch = std::mem::take(&mut self.settles);
        let queues = std::mem::take(&mut self.settle_queues);
        let broker = self.broker.clone();
        let sent = batch.clone();
        let mut settle = Box::pin(async move { broker.settle(sent).await });
        if self.in_process || self.pushed {
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
    fn settled(
        &mut self,
        result: Result<SettleReport>,
        batch: Vec<Settlement>,
        queues: Vec<Option<usize>>,
        st: &mut WorkerStats,
    ) {
        self.settle_in_flight = None;
        match result {
            Ok(report) => {
                st.settle_calls += 1;
                for &qi in queues.iter().flatten() {
                    self.queues[qi].settling -= 1;
                }
                // The next group fills the buffers this one used instead of growing fresh
                // ones by doubling (each growth past 1 kB is a large, slower allocation).
                if self.settles.is_empty() && self.settles.capacity() < batch.capacity() {
                    let (mut batch, mut queues) = (batch, queues);
                    batch.clear();
                    queues.clear();
                    self.settles = batch;
                    self.settle_queues = queues;
                }
                if !report.fenced.is_empty() {
                    tracing::debug!(
                        fenced = report.fenced.len(),
                        "settlements ignored: their leases had expired"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e.chain(), count = batch.len(), "settlement failed; retrying");
                let mut batch = batch;
                batch.append(&mut self.settles);
                self.settles = batch;
                let mut queues = queues;
                queues.append(&mut self.settle_queues);
                self.settle_queues = queues;
                self.settle_retry_at = Some(Instant::now() + Duration::from_millis(200));
            }
        }
    }

    /// On a pushed broker, a settlement held back to be grouped also holds back the
    /// server: it pushes the next delivery only once an ack frees the window. So once half
    /// a queue's window waits on acknowledgements (all of a window of 1), they go at once.
    fn window_starved(&self) -> bool {
        self.pushed
            && self
                .queues
                .iter()
                .any(|q| q.settling > 0 && q.settling * 2 >= self.window(q))
    }

    fn maybe_renew(&mut self, now: Instant) {
        if !self.leases_on
            || !self.cfg.lease_renewal
            || self.renew_in_flight
            || now < self.next_renew
        {
            return;
        }
        self.next_renew = now + self.cfg.lease_ttl / 3;
        if self.leases.is_empty() {
            return;
        }
        self.renew_in_flight = true;
        debug_assert!(self.leases_on, "renewing on a broker without leases");
        let leases: Vec<LeaseId> = self.leases.keys().copied().collect();
        let (broker, events, ttl) = (self.broker.clone(), self.events.clone(), self.cfg.lease_ttl);
        tokio::spawn(async move {
            let result = broker.renew(&leases, ttl).await;
            let _ = events.send(Event::Renewed(result));
        });
    }

    // ---- events ----

    fn handle(&mut self, ev: Event, st: &mut WorkerStats) {
        match ev {
            Event::Command(cmd) => self.command(cmd, st),
            Event::Fetched { result, asked } => self.fetched(result, asked, st),
            Event::TaskDone {
                task,
                done,
                elapsed,
            } => self.task_done(task, done, elapsed, st),
            Event::Settled {
                result,
                batch,
                queues,
            } => self.settled(result, batch, queues, st),
            Event::Subscribed { queue, result } => {
                let q = &mut self.queues[queue];
                q.subscribing = false;
                q.subscribed = q.window_sent.is_some();
                if let Err(e) = result {
                    tracing::error!(queue = %q.name, error = %e.chain(), "subscribing failed");
                }
            }
            Event::Renewed(result) => {
                self.renew_in_flight = false;
                match result {
                    Ok(lost) => {
                        for lease in lost {
                            // A lease whose last job finished while the renewal was on its
                            // way, settled before the renewal ran, is not lost: the broker
                            // just holds nothing under it any more.
                            if self.leases.contains_key(&lease) {
                                st.leases_lost += 1;
                                self.lease_lost(lease);
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e.chain(), "lease renewal failed; retrying"),
                }
            }
        }
    }

    fn fetched(
        &mut self,
        result: Result<Fetched>,
        asked: Vec<(usize, usize)>,
        st: &mut WorkerStats,
    ) {
        self.fetch_in_flight = false;
        let rtt = self.fetch_sent.elapsed();
        self.fetch_rtt = Some(match self.fetch_rtt {
            None => rtt,
            Some(avg) => avg.mul_f64(0.7) + rtt.mul_f64(0.3),
        });
        let fetched = match result {
            Ok(f) => {
                self.fetch_backoff = Duration::from_millis(50);
                f
            }
            Err(e) => {
                tracing::warn!(error = %e.chain(), retry_in = ?self.fetch_backoff, "fetch failed");
                self.fetch_retry_at = Some(Instant::now() + self.fetch_backoff);
                self.fetch_backoff = (self.fetch_backoff * 2).min(Duration::from_secs(5));
                return;
            }
        };
        let now = Instant::now();
        // A fetch of one queue returns only that queue's jobs (the broker's contract), so
        // their names are not read: each is a heap string of its own, cold by the time a
        // deep backlog is fetched, and comparing them cost a memory drain 6–10%.
        let only = match asked.as_slice() {
            [(qi, _)] => Some(*qi),
            _ => None,
        };
        // Jobs per queue; most workers serve a few queues, so this costs no allocation.
        let mut got: SmallVec<[usize; 8]> = smallvec::smallvec![0; self.queues.len()];
        match only {
            Some(qi) => got[qi] = fetched.jobs.len(),
            None => {
                for job in &fetched.jobs {
                    if let Some(qi) = self.queue_of(&job.queue) {
                        got[qi] += 1;
                    }
                }
            }
        }
        for &(qi, n) in &asked {
            let q = &mut self.queues[qi];
            if let Some(sizer) = q.sizer.as_mut().filter(|_| !self.pushed) {
                sizer.fetched(n, got[qi]);
            }
            if got[qi] < n {
                q.drained = true;
            }
        }
        if let Some(due) = fetched.next_due {
            let wait = (due - to_millis(SystemTime::now())).clamp(0, i64::MAX) as u64;
            let wait = Duration::from_millis(wait).min(self.cfg.poll_interval);
            let at = now + wait;
            self.next_due = Some(self.next_due.map_or(at, |d| d.min(at)));
        }
        if fetched.jobs.is_empty() {
            st.empty_fetches += 1;
            return;
        }
        if !self.pushed {
            st.fetches += 1;
            st.fetched_jobs += fetched.jobs.len() as u64;
            push_size(&mut st.batch_sizes, fetched.jobs.len());
        }
        if self.leases_on {
            self.leases.insert(fetched.lease, fetched.jobs.len());
        }
        let mut jobs = fetched.jobs;
        if let Some(qi) = only.filter(|&qi| !self.queues[qi].paused && self.stopping.is_none()) {
            // One queue's fetch, to be kept: appended in one move, not job by job.
            let q = &mut self.queues[qi];
            q.seen_priority |= jobs.iter().any(|j| j.priority != 0);
            if q.buffer.is_empty() {
                q.batch_since = Some(now);
            }
            q.buffer.append(&mut VecDeque::from(jobs));
            jobs = Vec::new();
        }
        for job in jobs {
            let Some(qi) = only.or_else(|| self.queue_of(&job.queue)) else {
                tracing::warn!(queue = %job.queue, id = %job.id, "fetch returned a job of a queue not asked for; releasing it");
                self.settle(job.id, job.lease, Outcome::Release, st);
                continue;
            };
            let q = &mut self.queues[qi];
            if q.paused || self.stopping.is_some() {
                self.settle(job.id, job.lease, Outcome::Release, st);
                continue;
            }
            if job.priority != 0 {
                q.seen_priority = true;
            }
            if q.buffer.is_empty() {
                q.batch_since = Some(now);
            }
            q.buffer.push_back(job);
        }
        if self.pushed {
            self.size_pushed_windows(&asked, &got);
        }
        // Only a fetch adds to what a queue holds, so only the queues it served can have
        // reached a new peak.
        for (q, &got) in self.queues.iter().zip(&got) {
            if got == 0 {
                continue;
            }
            let held = q.buffer.len() + q.in_handoffs;
            let qs = queue_stats(st, &q.name);
            push_size(&mut qs.fetch_sizes, got);
            qs.peak_held = qs.peak_held.max(held);
        }
    }

    /// The Auto rule on a pushed broker, where taking from what arrived costs nothing and
    /// says little. A take is *full* when the subscription's whole window is out with this
    /// worker (buffered, handed off, or settled and not yet applied): the server would push
    /// more if the window let it, so that counts as a full fetch and the window grows after
    /// two. Any other take is no evidence either way (after each acknowledgement the next
    /// delivery is still on the wire), so it leaves the size alone; the job times still
    /// shrink it at once through `wanted`.
    fn size_pushed_windows(&mut self, asked: &[(usize, usize)], got: &[usize]) {
        for &(qi, n) in asked {
            let window = self.window(&self.queues[qi]);
            let q = &mut self.queues[qi];
            let out = q.buffer.len() + q.in_handoffs + q.settling;
            if let Some(sizer) = q.sizer.as_mut() {
                if got[qi] > 0 && out >= window {
                    sizer.fetched(n, n);
                }
            }
        }
    }

    fn task_done(
        &mut self,
        task: usize,
        mut done: Vec<Done>,
        elapsed: Duration,
        st: &mut WorkerStats,
    ) {
        let Some(slot) = self.tasks.get_mut(task).and_then(Option::as_mut) else {
            return; // abandoned at the end of the grace period; its jobs were released
        };
        let Some(work) = slot.work.take() else {
            return;
        };
        self.idle.push((task, Instant::now()));
        let (qi, handoff) = match work {
            TaskWork::Jobs(h) => {
                if !done.is_empty() {
                    self.job_time = Some(elapsed / done.len() as u32);
                }
                (h.queue, Some(h))
            }
            TaskWork::Batch { queue, .. } => (queue, None),
        };
        let q = &mut self.queues[qi];
        q.busy -= 1;
        q.in_handoffs -= done.len();
        let mut acked = 0;
        for d in done.drain(..) {
            let q = &mut self.queues[qi];
            if let Some(sizer) = q.sizer.as_mut() {
                sizer.record(d.took);
            }
            match &d.outcome {
                Outcome::Ack => acked += 1,
                Outcome::Retry { .. } => st.retried += 1,
                Outcome::DeadLetter { .. } => st.dead += 1,
                Outcome::Release => st.released += 1,
                Outcome::Cancel => st.cancelled += 1,
            }
            self.settle_counted(d.id, d.lease, d.outcome, Some(qi));
        }
        // The task dropped its share of the hand-off before reporting, so it comes back.
        if let Some(mut h) = handoff.filter(|_| self.spare.len() < SPARE_HANDOFFS) {
            if Arc::get_mut(&mut h).is_some() {
                self.spare.push((h, done));
            }
        }
        if acked > 0 {
            st.completed += acked;
            queue_stats(st, &self.queues[qi].name).completed += acked;
        }
        self.settle_if_starved(st);
    }

    /// Sends the settlements at once when half a pushed queue's window waits on them
    /// ([`Self::window_starved`]), between two completions rather than at the next pass:
    /// a pass can take in a whole window's completions at once (hand-offs that ran on the
    /// loop's own task finish together), and acknowledging all of it in one frame leaves
    /// the server nothing to push until that frame arrives.
    fn settle_if_starved(&mut self, st: &mut WorkerStats) {
        if !self.pushed || !self.window_starved() {
            return;
        }
        self.maybe_settle(Instant::now(), st);
    }

    /// The index of the queue named `name`, if this worker works it.
    fn queue_of(&self, name: &str) -> Option<usize> {
        match self.queues.as_slice() {
            [only] => (only.name == name).then_some(0),
            _ => self.by_name.get(name).copied(),
        }
    }

    /// Queues a settlement for a job this worker held, counting it in the stats.
    fn settle(&mut self, id: JobId, lease: LeaseId, outcome: Outcome, st: &mut WorkerStats) {
        match outcome {
            Outcome::Release => st.released += 1,
            Outcome::Cancel => st.cancelled += 1,
            _ => {}
        }
        self.settle_counted(id, lease, outcome, None);
    }

    fn settle_counted(
        &mut self,
        id: JobId,
        lease: LeaseId,
        outcome: Outcome,
        queue: Option<usize>,
    ) {
        if let Some(n) = self.leases.get_mut(&lease) {
            *n -= 1;
            if *n == 0 {
                self.leases.remove(&lease);
            }
        }
        if self.lost.contains(&lease) {
            return;
        }
        if self.settles.is_empty() {
            self.settle_since = Some(Instant::now());
        }
        self.settles.push(Settlement {
            job: id,
            lease,
            outcome,
        });
        self.settle_queues.push(queue);
        if let Some(qi) = queue {
            self.queues[qi].settling += 1;
        }
    }

    fn lease_lost(&mut self, lease: LeaseId) {
        tracing::warn!(%lease, "lease lost: its jobs went back to their queues; dropping the ones not started");
        self.leases.remove(&lease);
        self.lost.insert(lease);
        for q in &mut self.queues {
            q.buffer.retain(|j| j.lease != lease);
        }
        for task in self.tasks.iter().flatten() {
            if let Some(TaskWork::Jobs(h)) = &task.work {
                let dropped = h.take_lease(lease);
                self.queues[h.queue].in_handoffs -= dropped;
            }
        }
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
        for task in self.tasks.iter().flatten() {
            if let Some(TaskWork::Jobs(h)) = &task.work {
                if only.is_none_or(|o| o == h.queue) {
                    let taken = h.take_all_waiting();
                    self.queues[h.queue].in_handoffs -= taken.len();
                    out.extend(taken);
                }
            }
        }
        out
    }

    fn release_unstarted(&mut self, only: Option<usize>, st: &mut WorkerStats) {
        for job in self.take_unstarted(only) {
            self.settle(job.id, job.lease, Outcome::Release, st);
        }
    }

    /// At the end of the grace period: stop the tasks still running and release their jobs.
    fn abandon_running(&mut self, st: &mut WorkerStats) {
        self.release_unstarted(None, st);
        // Every hand-off on this task belongs to a task abandoned below: each stops here,
        // its handler's future dropped (after this pass, without the stats lock).
        self.abandoned_inline = std::mem::take(&mut self.inline);
        for index in 0..self.tasks.len() {
            let Some(task) = self.tasks[index].as_mut() else {
                continue;
            };
            let Some(work) = task.work.take() else {
                continue;
            };
            task.join.abort();
            let held: Vec<(JobId, LeaseId)> = match &work {
                TaskWork::Jobs(h) => h.running().into_iter().collect(),
                TaskWork::Batch { held, .. } => held.clone(),
            };
            let qi = match &work {
                TaskWork::Jobs(h) => h.queue,
                TaskWork::Batch { queue, .. } => *queue,
            };
            self.tasks[index] = None;
            self.live -= 1;
            let q = &mut self.queues[qi];
            q.busy -= 1;
            q.in_handoffs -= held.len().min(q.in_handoffs);
            for (id, lease) in held {
                tracing::warn!(%id, "grace period over: releasing a job whose handler did not finish");
                self.settle(id, lease, Outcome::Release, st);
            }
        }
    }

    fn queue_index(&self, name: &str) -> Result<usize> {
        self.by_name.get(name).copied().ok_or_else(|| {
            Error::Config(ConfigError::new(
                "queue",
                name,
                format!(
                    "one of the queues this worker works: {}",
                    self.queues
                        .iter()
                        .map(|q| q.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ))
        })
    }

    fn command(&mut self, cmd: Command, st: &mut WorkerStats) {
        match cmd {
            Command::Pause(name, reply) => {
                let r = self.queue_index(&name).map(|qi| {
                    self.queues[qi].paused = true;
                    self.release_unstarted(Some(qi), st);
                    self.unsubscribe_paused(qi);
                });
                let _ = reply.send(r);
            }
            Command::Resume(name, reply) => {
                let r = self.queue_index(&name).map(|qi| {
                    let q = &mut self.queues[qi];
                    q.paused = false;
                    q.drained = false;
                });
                let _ = reply.send(r);
            }
            Command::Cancel(id, reply) => {
                let mut found = None;
                for q in &mut self.queues {
                    if let Some(at) = q.buffer.iter().position(|j| j.id == id) {
                        found = q.buffer.remove(at);
                        break;
                    }
                }
                if found.is_none() {
                    for task in self.tasks.iter().flatten() {
                        if let Some(TaskWork::Jobs(h)) = &task.work {
                            if let Some(job) = h.take_waiting(id) {
                                self.queues[h.queue].in_handoffs -= 1;
                                found = Some(job);
                                break;
                            }
                        }
                    }
                }
                let cancelled = found.is_some();
                if let Some(job) = found {
                    self.settle(job.id, job.lease, Outcome::Cancel, st);
                }
                let _ = reply.send(cancelled);
            }
            Command::Counts(name, reply) => {
                let r = self.queue_index(&name).map(|qi| {
                    let mut pending = self.queues[qi].buffer.len() as u64;
                    let mut processing = 0u64;
                    for task in self.tasks.iter().flatten() {
                        match &task.work {
                            Some(TaskWork::Jobs(h)) if h.queue == qi => {
                                let (waiting, running) = h.load();
                                pending += waiting as u64;
                                processing += running as u64;
                            }
                            Some(TaskWork::Batch { queue, held }) if *queue == qi => {
                                processing += held.len() as u64;
                            }
                            _ => {}
                        }
                    }
                    (pending, processing)
                });
                let _ = reply.send(r);
            }
            Command::Shutdown(grace, reply) => {
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
        }
    }
}

/// The figures of queue `name`, created on first use; the name is copied only then.
fn queue_stats<'a>(st: &'a mut WorkerStats, name: &str) -> &'a mut QueueStats {
    if !st.queues.contains_key(name) {
        st.queues.insert(name.to_owned(), QueueStats::default());
    }
    st.queues.get_mut(name).expect("inserted above")
}

impl std::fmt::Debug for EventLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLoop")
            .field("queues", &self.queues.len())
            .finish()
    }
}
