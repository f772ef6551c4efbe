//! The worker runtime: one event loop that decides what runs next, and an elastic pool of
//! tasks that run handlers (DESIGN.md, "How a worker takes work").
//!
//! - [`Worker`] builds a worker: queues, their handlers and options, leases, retries.
//! - [`WorkerHandle`] steers a running one: pause, resume, cancel, counts, stats, shutdown.
//! - `event_loop` holds the per-queue buffers and windows and issues fetches, hand-offs,
//!   settlements and lease renewals; `pool` runs hand-offs on pool tasks.
//! - A hand-off of one job whose queue's handlers were timed holding the thread under
//!   32 µs per poll runs on the event loop's own task, in an idle pool task's slot, so no
//!   other task, and no other runtime thread, is woken for a job that costs less than the
//!   wake-up. The first hand-offs of a queue, and any after a longer poll, go to the pool
//!   task itself.

mod event_loop;
mod handler;
mod pool;
mod stats;

use std::future::Future;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, oneshot};

use crate::broker::{Broker, CancelOutcome};
use crate::error::{ConfigError, Error, Result};
use crate::job::{JobId, validate_queue_name};
use crate::prefetch::Prefetch;
use crate::retry::RetryPolicy;

use handler::{FnHandler, QueueHandler};
pub use handler::{JobContext, JobError, JobResult};
pub use stats::{QueueStats, SIZES_KEPT, WorkerStats};

/// The most jobs one fetch may ask for, unless a queue sets its own `max_batch`.
pub const DEFAULT_MAX_BATCH: usize = 50;
/// The largest `max_batch` accepted.
pub const MAX_BATCH_LIMIT: usize = 1000;
/// Default `batch_wait` of a batch handler.
pub const DEFAULT_BATCH_WAIT: Duration = Duration::from_millis(50);
/// The most jobs one hand-off carries (DESIGN.md §7). An in-process broker's default
/// window holds two hand-offs per slot, so at most twice this.
pub const HANDOFF_MAX: usize = 32;
/// A pool task idle this long ends, unless it is the pool's last idle one. Until then it
/// takes the next hand-off: between two fetches of a busy queue the buffer runs dry for a
/// moment, and ending every idle task then spawned them all again a round trip later.
pub const POOL_KEEP_ALIVE: Duration = Duration::from_secs(1);
/// How long a stopping worker still tries to deliver its settlements after the grace
/// period (and waits on a fetch in flight) before it gives up on a broker it cannot reach
/// and stops anyway; closing its RabbitMQ subscriptions then gets as long again, for all
/// queues together. What was not confirmed is counted in
/// [`WorkerStats::settlements_undelivered`]. Those jobs come back as after a crash: once
/// their leases expire (on RabbitMQ, once the channel closes), with the attempt charged, so
/// one on its last attempt is dead-lettered.
pub const STOP_SETTLE_LIMIT: Duration = Duration::from_secs(5);

/// How one queue is worked.
#[derive(Debug, Clone)]
pub struct QueueOptions {
    pub(crate) concurrency: usize,
    pub(crate) prefetch: Option<Prefetch>,
    pub(crate) max_batch: usize,
    pub(crate) pop_ahead: bool,
    pub(crate) batch: Option<(usize, Duration)>,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            concurrency: 10,
            prefetch: None,
            max_batch: DEFAULT_MAX_BATCH,
            pop_ahead: false,
            batch: None,
        }
    }
}

impl QueueOptions {
    /// Defaults: concurrency 10, the broker's default prefetch (slots; on the in-process
    /// broker, two hand-offs per slot: up to 64 jobs for jobs of a few microseconds, 2 for
    /// jobs of 32 µs or more), `max_batch` 50, no pop-ahead.
    pub fn new() -> Self {
        Self::default()
    }

    /// The most handlers (or batches) of this queue running at once.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// The window policy.
    pub fn prefetch(mut self, p: Prefetch) -> Self {
        self.prefetch = Some(p);
        self
    }

    /// The most jobs one fetch may ask for, 1..=1000.
    pub fn max_batch(mut self, n: usize) -> Self {
        self.max_batch = n;
        self
    }

    /// Fetch the next batch while the last buffered job runs, instead of after it.
    pub fn pop_ahead(mut self, on: bool) -> Self {
        self.pop_ahead = on;
        self
    }

    /// For batch handlers: a batch closes at `size` jobs or `wait` after its first job.
    pub fn batch(mut self, size: usize, wait: Duration) -> Self {
        self.batch = Some((size, wait));
        self
    }
}

/// Settings of a whole worker.
#[derive(Debug, Clone)]
pub(crate) struct WorkerConfig {
    pub(crate) lease_ttl: Duration,
    pub(crate) lease_renewal: bool,
    pub(crate) retry: RetryPolicy,
    pub(crate) max_concurrency: Option<usize>,
    pub(crate) poll_interval: Duration,
    pub(crate) settle_batch: usize,
    pub(crate) settle_delay: Duration,
    pub(crate) grace: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            lease_ttl: Duration::from_secs(30),
            lease_renewal: true,
            retry: RetryPolicy::default(),
            max_concurrency: None,
            poll_interval: Duration::from_secs(1),
            settle_batch: 256,
            settle_delay: Duration::from_millis(2),
            grace: Duration::from_secs(30),
        }
    }
}

pub(crate) struct QueueSpec {
    pub(crate) name: String,
    pub(crate) options: QueueOptions,
    pub(crate) handler: QueueHandler,
}

/// Builds a worker. Nothing runs until [`start`](Worker::start), which checks every setting
/// and refuses what cannot work, naming the setting and what it accepts.
pub struct Worker {
    broker: Arc<dyn Broker>,
    queues: Vec<QueueSpec>,
    config: WorkerConfig,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("broker", &self.broker)
            .field(
                "queues",
                &self.queues.iter().map(|q| &q.name).collect::<Vec<_>>(),
            )
            .field("config", &self.config)
            .finish()
    }
}

impl Worker {
    /// A worker over `broker` with no queues yet.
    pub fn builder(broker: Arc<dyn Broker>) -> Self {
        Worker {
            broker,
            queues: Vec::new(),
            config: WorkerConfig::default(),
        }
    }

    /// Works `queue` with a handler for one job at a time. The payload is decoded as JSON
    /// into `T`; a payload that does not decode is dead-lettered at once with the error.
    pub fn queue<T, F, Fut>(mut self, queue: impl Into<String>, options: QueueOptions, f: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(JobContext<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = JobResult> + Send + 'static,
    {
        self.queues.push(QueueSpec {
            name: queue.into(),
            options,
            handler: QueueHandler::One(Arc::new(FnHandler { f, _t: PhantomData })),
        });
        self
    }

    /// Works `queue` with a batch handler, which returns one result per job, in order.
    /// Batches close at the size set by [`QueueOptions::batch`] (default 10) or after its
    /// wait (default 50 ms), whichever comes first; the window caps the size.
    pub fn batch_queue<T, F, Fut>(
        mut self,
        queue: impl Into<String>,
        mut options: QueueOptions,
        f: F,
    ) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(Vec<JobContext<T>>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<JobResult>> + Send + 'static,
    {
        if options.batch.is_none() {
            options.batch = Some((10, DEFAULT_BATCH_WAIT));
        }
        self.queues.push(QueueSpec {
            name: queue.into(),
            options,
            handler: QueueHandler::Batch(Arc::new(FnHandler { f, _t: PhantomData })),
        });
        self
    }

    /// How long a fetch's lease lasts between renewals (default 30 s).
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.config.lease_ttl = ttl;
        self
    }

    /// Renew leases while jobs are held (default on). Off is allowed only with a window of 1.
    pub fn lease_renewal(mut self, on: bool) -> Self {
        self.config.lease_renewal = on;
        self
    }

    /// The retry policy for failed attempts.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.config.retry = policy;
        self
    }

    /// The most handlers running at once over all queues (default: the sum of the queues').
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.config.max_concurrency = Some(n);
        self
    }

    /// How often an idle worker asks the broker anyway, as a backstop for a missed wake-up
    /// (default 1 s).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.config.poll_interval = every;
        self
    }

    /// Settlements are flushed in one round trip once this many wait (default 256)…
    pub fn settle_batch(mut self, n: usize) -> Self {
        self.config.settle_batch = n;
        self
    }

    /// …or this long after the first of them (default 2 ms).
    pub fn settle_delay(mut self, d: Duration) -> Self {
        self.config.settle_delay = d;
        self
    }

    /// How long [`WorkerHandle::shutdown`] lets running handlers finish (default 30 s).
    pub fn grace(mut self, d: Duration) -> Self {
        self.config.grace = d;
        self
    }

    /// Checks every setting without starting anything, so a program can refuse bad
    /// configuration before it enqueues or changes anything.
    pub fn check(&self) -> Result<()> {
        Ok(self.validate()?)
    }

    /// Checks every setting and starts the worker on the current tokio runtime.
    pub fn start(self) -> Result<WorkerHandle> {
        self.validate()?;
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Mutex::new(WorkerStats::default()));
        let el = event_loop::EventLoop::new(
            self.broker.clone(),
            self.queues,
            self.config,
            tx.clone(),
            rx,
            shared.clone(),
        );
        let join = tokio::spawn(el.run());
        Ok(WorkerHandle {
            broker: self.broker,
            tx,
            stats: shared,
            join: Some(join),
        })
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.queues.is_empty() {
            return Err(ConfigError::new(
                "queues",
                "none",
                "at least one queue with a handler",
            ));
        }
        let in_process = self.broker.capabilities().in_process;
        let mut seen = std::collections::HashSet::new();
        for q in &self.queues {
            validate_queue_name(&q.name)?;
            if !seen.insert(q.name.as_str()) {
                return Err(ConfigError::new(
                    "queue",
                    &q.name,
                    "each queue at most once per worker",
                ));
            }
            let o = &q.options;
            if o.concurrency == 0 {
                return Err(ConfigError::new(
                    format!("concurrency of queue {}", q.name),
                    0,
                    "1 or more",
                ));
            }
            if !(1..=MAX_BATCH_LIMIT).contains(&o.max_batch) {
                return Err(ConfigError::new(
                    format!("max_batch of queue {}", q.name),
                    o.max_batch,
                    format!("1..={MAX_BATCH_LIMIT}"),
                ));
            }
            if o.prefetch == Some(Prefetch::Fixed(0)) {
                return Err(ConfigError::new(
                    format!("prefetch of queue {}", q.name),
                    0,
                    "a window of 1 or more (or `slots`, `auto`)",
                ));
            }
            if let Some((size, _)) = o.batch {
                if size == 0 {
                    return Err(ConfigError::new(
                        format!("batch size of queue {}", q.name),
                        0,
                        "1 or more",
                    ));
                }
            }
            let window = event_loop::max_window(o, in_process);
            if window > 1 && !self.config.lease_renewal && self.broker.capabilities().leases {
                return Err(ConfigError::new(
                    "lease_renewal",
                    "off",
                    format!(
                        "on, because queue {} may hold up to {window} jobs (prefetch {}, concurrency {}) \
                         and jobs waiting unrenewed would lose their lease; turn renewal on or use \
                         concurrency 1 with prefetch 1",
                        q.name,
                        o.prefetch.map_or("default".to_string(), |p| p.to_string()),
                        o.concurrency
                    ),
                ));
            }
        }
        if self.config.lease_ttl < Duration::from_millis(10) {
            return Err(ConfigError::new(
                "lease_ttl",
                format!("{:?}", self.config.lease_ttl),
                "10 ms or more",
            ));
        }
        if self.config.max_concurrency == Some(0) {
            return Err(ConfigError::new("max_concurrency", 0, "1 or more"));
        }
        if self.config.settle_batch == 0 {
            return Err(ConfigError::new("settle_batch", 0, "1 or more"));
        }
        self.config.retry.validate()
    }
}

pub(crate) enum Command {
    Pause(String, oneshot::Sender<Result<()>>),
    Resume(String, oneshot::Sender<Result<()>>),
    Cancel(JobId, oneshot::Sender<bool>),
    Counts(String, oneshot::Sender<Result<(u64, u64)>>),
    Shutdown(Option<Duration>, oneshot::Sender<()>),
}

/// What this worker holds of a queue, and what its broker holds pending.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerCounts {
    /// Not started: in the broker, in this worker's buffer, or waiting in a hand-off.
    pub pending: u64,
    /// Running in this worker now.
    pub processing: u64,
}

/// Steers a running worker. Dropping it leaves the worker running; call
/// [`shutdown`](WorkerHandle::shutdown) to stop it gracefully.
#[derive(Debug)]
pub struct WorkerHandle {
    broker: Arc<dyn Broker>,
    tx: mpsc::UnboundedSender<event_loop::Event>,
    stats: Arc<Mutex<WorkerStats>>,
    join: Option<tokio::task::JoinHandle<()>>,
}

impl WorkerHandle {
    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(event_loop::Event::Command(make(tx)))
            .map_err(|_| Error::Closed("worker"))?;
        rx.await.map_err(|_| Error::Closed("worker"))
    }

    /// Stops starting jobs of `queue` and hands its buffered jobs back at once (not charged).
    pub async fn pause(&self, queue: &str) -> Result<()> {
        self.ask(|tx| Command::Pause(queue.to_owned(), tx)).await?
    }

    /// Works `queue` again.
    pub async fn resume(&self, queue: &str) -> Result<()> {
        self.ask(|tx| Command::Resume(queue.to_owned(), tx)).await?
    }

    /// Cancels a job that has not started: pending in the broker, buffered here, or waiting
    /// in a hand-off. Returns whether it was cancelled; `false` when it already started,
    /// finished, or is held by another worker.
    pub async fn cancel(&self, id: JobId) -> Result<bool> {
        match self.broker.cancel(id).await? {
            CancelOutcome::Cancelled => Ok(true),
            CancelOutcome::NotFound => Ok(false),
            CancelOutcome::Held(_) => self.ask(|tx| Command::Cancel(id, tx)).await,
        }
    }

    /// Pending and processing jobs of `queue`. A job waiting in a hand-off is pending.
    pub async fn counts(&self, queue: &str) -> Result<WorkerCounts> {
        let (held_pending, processing) = self
            .ask(|tx| Command::Counts(queue.to_owned(), tx))
            .await??;
        let broker = self.broker.counts(queue).await?;
        Ok(WorkerCounts {
            pending: broker.pending + held_pending,
            processing,
        })
    }

    /// A snapshot of the worker's statistics.
    pub fn stats(&self) -> WorkerStats {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops gracefully with the grace period set at build time.
    pub async fn shutdown(self) -> WorkerStats {
        self.shutdown_within(None).await
    }

    /// Stops gracefully: no more fetches; buffered jobs handed back at once; running
    /// handlers get `grace` to finish, then what is left is handed back.
    pub async fn shutdown_with(self, grace: Duration) -> WorkerStats {
        self.shutdown_within(Some(grace)).await
    }

    async fn shutdown_within(mut self, grace: Option<Duration>) -> WorkerStats {
        let (tx, rx) = oneshot::channel();
        if self
            .tx
            .send(event_loop::Event::Command(Command::Shutdown(grace, tx)))
            .is_ok()
        {
            let _ = rx.await;
        }
        if let Some(join) = self.join.take() {
            let _ = join.await;
        }
        self.stats()
    }
}
