//! [`WorkerBuilder`]: queues, their handlers and options, and the worker's settings,
//! checked before anything runs.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::handler::{FnHandler, JobContext, JobResult};
use super::options::{QueueOptions, QueueSpec, WorkerConfig};
use super::pool::QueueHandler;
use super::{DEFAULT_BATCH_WAIT, MAX_BATCH_LIMIT, Worker};
use crate::broker::Broker;
use crate::error::{ConfigError, Result};
use crate::job::validate_queue_name;
use crate::prefetch::Prefetch;
use crate::retry::RetryPolicy;
use crate::schedule::Schedule;
use serde::de::DeserializeOwned;

/// Builds a worker. Nothing runs until [`start`](WorkerBuilder::start), which checks every setting
/// and refuses what cannot work, naming the setting and what it accepts.
pub struct WorkerBuilder {
    broker: Arc<dyn Broker>,
    queues: Vec<QueueSpec>,
    schedules: Vec<Schedule>,
    config: WorkerConfig,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
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
    /// Starts building a worker over `broker`; [`WorkerBuilder::start`] runs it.
    pub fn builder(broker: Arc<dyn Broker>) -> WorkerBuilder {
        WorkerBuilder::new(broker)
    }
}

impl WorkerBuilder {
    /// A worker over `broker` with no queues yet; the same as [`Worker::builder`].
    pub fn new(broker: Arc<dyn Broker>) -> Self {
        WorkerBuilder {
            broker,
            queues: Vec::new(),
            schedules: Vec::new(),
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

    /// How long [`Worker::shutdown`] lets running handlers finish (default 30 s).
    pub fn grace(mut self, d: Duration) -> Self {
        self.config.grace = d;
        self
    }

    /// How often the worker reports itself to a broker that lists live workers
    /// ([`Capabilities::admin`](crate::Capabilities::admin)`.workers`): host, pid, queues,
    /// what it holds, and what it settled, which gives queue throughput. Every 5 s by
    /// default; a worker is listed until six reports in a row are missing. 100 ms or more.
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.config.heartbeat = Some(every);
        self
    }

    /// Never reports this worker: it is not listed, and its settlements do not count in
    /// the broker's throughput figures.
    pub fn unlisted(mut self) -> Self {
        self.config.heartbeat = None;
        self
    }

    /// Enqueues the job of `schedule` at each of its slots while the worker runs. Every
    /// worker with the same schedule may enqueue a slot; the broker keeps one job per slot,
    /// so the broker must enforce unique keys ([`Capabilities::unique`]). A worker may
    /// hold schedules and no queue: a process that only enqueues periodic jobs.
    ///
    /// [`Capabilities::unique`]: crate::Capabilities::unique
    pub fn schedule(mut self, schedule: Schedule) -> Self {
        self.schedules.push(schedule);
        self
    }

    /// The wall clock the worker's schedules read, and against which it waits for the
    /// broker's next due job: the system's unless set (tests use
    /// [`Clock::tokio`](crate::Clock::tokio) with a broker on the same clock).
    pub fn clock(mut self, clock: crate::clock::Clock) -> Self {
        self.config.clock = clock;
        self
    }

    /// Checks every setting without starting anything, so a program can refuse bad
    /// configuration before it enqueues or changes anything.
    pub fn check(&self) -> Result<()> {
        Ok(self.validate()?)
    }

    /// Checks every setting and starts the worker on the current tokio runtime.
    pub fn start(self) -> Result<Worker> {
        self.validate()?;
        Ok(Worker::run(
            self.broker,
            self.queues,
            self.schedules,
            self.config,
        ))
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.queues.is_empty() && self.schedules.is_empty() {
            return Err(ConfigError::new(
                "queues",
                "none",
                "at least one queue with a handler, or a schedule",
            ));
        }
        let mut names = std::collections::HashSet::new();
        for s in &self.schedules {
            if !names.insert(s.name()) {
                return Err(ConfigError::new(
                    "schedule",
                    s.name(),
                    "each schedule name at most once per worker",
                ));
            }
            let caps = self.broker.capabilities();
            if !caps.unique {
                return Err(ConfigError::new(
                    format!("schedule {}", s.name()),
                    format!("on the {} broker", caps.name),
                    "a broker that enforces unique keys (memory, SQLite, PostgreSQL, MySQL): \
                     each slot's job is unique by its time, so workers agree on one",
                ));
            }
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
            if o.timeout == Some(Duration::ZERO) {
                return Err(ConfigError::new(
                    format!("timeout of queue {}", q.name),
                    "0 s",
                    "more than zero (or no timeout)",
                ));
            }
            if o.rate_limit.is_some() && !self.broker.capabilities().rate_limits {
                return Err(ConfigError::new(
                    format!("rate limit of queue {}", q.name),
                    format!("on the {} broker", self.broker.capabilities().name),
                    "a broker that keeps rate limits (memory, SQLite, PostgreSQL, MySQL)",
                ));
            }
            let per_key = o.rate_limit.is_some_and(|l| l.per_key);
            if per_key && !self.broker.capabilities().rate_limits_per_key {
                return Err(ConfigError::new(
                    format!("rate limit of queue {}", q.name),
                    format!("per key on the {} broker", self.broker.capabilities().name),
                    "a broker that keeps rate limits per key (memory, SQLite, PostgreSQL)",
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
            let window = o.max_window(in_process);
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
        if let Some(every) = self
            .config
            .heartbeat
            .filter(|&e| e < Duration::from_millis(100))
        {
            return Err(ConfigError::new(
                "heartbeat",
                format!("{every:?}"),
                "100 ms or more",
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
