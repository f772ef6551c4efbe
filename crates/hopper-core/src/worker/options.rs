//! How a queue is worked ([`QueueOptions`]) and the settings of a whole worker.

use std::time::Duration;

use super::pool::QueueHandler;
use super::{DEFAULT_MAX_BATCH, HANDOFF_MAX, IN_PROCESS_HANDOFFS};
use crate::prefetch::{AUTO_CEILING, Prefetch};
use crate::retry::RetryPolicy;

/// How one queue is worked.
#[derive(Debug, Clone)]
pub struct QueueOptions {
    pub(crate) concurrency: usize,
    pub(crate) prefetch: Option<Prefetch>,
    pub(crate) max_batch: usize,
    pub(crate) pop_ahead: bool,
    pub(crate) batch: Option<(usize, Duration)>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) rate_limit: Option<crate::RateLimit>,
    pub(crate) retries_hold_key: bool,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            concurrency: 10,
            prefetch: None,
            max_batch: DEFAULT_MAX_BATCH,
            pop_ahead: false,
            batch: None,
            timeout: None,
            rate_limit: None,
            retries_hold_key: true,
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

    /// How long one attempt may run: a handler (or a batch) still running `limit` after
    /// it started is stopped (its future dropped), and the attempt fails with "timed out
    /// after …", retried with backoff like any failure and dead-lettered after the last.
    /// Off by default. A handler stopped this way stops at its next `.await`: one that
    /// blocks its thread cannot be stopped, so keep blocking work in `spawn_blocking`.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// Limits how many of this queue's jobs start, across every worker of the broker: the
    /// worker sets `limit` on the broker ([`Broker::set_rate_limit`](crate::Broker::set_rate_limit))
    /// before its first fetch, so the broker keeps one window for every process. Without
    /// it the worker leaves the queue's limit as it is (set by another worker, or by
    /// `hopper queue limit`). Refused at start on a broker without
    /// [`Capabilities::rate_limits`](crate::Capabilities::rate_limits).
    pub fn rate_limit(mut self, limit: crate::RateLimit) -> Self {
        self.rate_limit = Some(limit);
        self
    }

    /// Whether a failed job with an [ordering key](crate::NewJob::ordering_key) holds its
    /// key while it waits for its retry. On by default: the key's next job waits for it,
    /// so the key's jobs finish in enqueue order whatever fails. Off, the failed job steps
    /// aside: the key's next jobs run meanwhile, still one at a time, and the failed job
    /// runs again once its retry time has come and the job of its key running then has
    /// ended, before the jobs still waiting. Snoozed and released jobs keep their key
    /// either way, and so does a job whose lease expired.
    pub fn retries_hold_key(mut self, hold: bool) -> Self {
        self.retries_hold_key = hold;
        self
    }

    /// The largest window these options can lead to; used to check lease renewal.
    pub(crate) fn max_window(&self, in_process: bool) -> usize {
        let per_slot = self.batch.map_or(1, |(size, _)| size);
        let c = self.concurrency;
        match self.prefetch {
            // Saturating: any concurrency is accepted here (fuzzing found the overflow).
            None if in_process => c.saturating_mul(per_slot.max(IN_PROCESS_HANDOFFS * HANDOFF_MAX)),
            None | Some(Prefetch::Slots) => c.saturating_mul(per_slot),
            Some(Prefetch::Fixed(n)) => n.max(c),
            Some(Prefetch::Auto) => c.saturating_mul(AUTO_CEILING),
        }
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
    /// How often the worker reports itself to a broker that lists workers; `None`: never.
    pub(crate) heartbeat: Option<Duration>,
    /// The wall clock the worker's schedules and the broker's due times read.
    pub(crate) clock: crate::clock::Clock,
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
            heartbeat: Some(crate::registry::HEARTBEAT_EVERY),
            clock: crate::clock::Clock::System,
        }
    }
}

/// One queue of a worker: its name, options and handler.
pub(crate) struct QueueSpec {
    pub(crate) name: String,
    pub(crate) options: QueueOptions,
    pub(crate) handler: QueueHandler,
}
