//! The worker runtime: one event loop that decides what runs next, and an elastic pool of
//! tasks that run handlers (docs/design.md, "How a worker takes work").
//!
//! # Layout
//! - `builder`: [`WorkerBuilder`] builds a worker: queues, their handlers and options,
//!   leases, retries; `options`: [`QueueOptions`] and the worker's settings.
//! - `handle`: [`Worker`] steers a running one: pause, resume, cancel, counts, stats,
//!   shutdown; `heartbeat` reports it to brokers that list live workers; `periodic`
//!   enqueues the slots of its schedules.
//! - `event_loop` holds the per-queue buffers and windows and issues fetches, hand-offs,
//!   settlements and lease renewals; `pool` runs hand-offs on pool tasks; `handler` is
//!   what user code looks like to them; `stats` what a program can read while it runs.
//! - A hand-off of one job whose queue's handlers were timed holding the thread under
//!   32 µs per poll runs on the event loop's own task, in an idle pool task's slot, so no
//!   other task, and no other runtime thread, is woken for a job that costs less than the
//!   wake-up. The first hand-offs of a queue, and any after a longer poll, go to the pool
//!   task itself.

mod builder;
mod event_loop;
mod expired;
mod handle;
mod handler;
mod heartbeat;
mod metrics;
mod options;
mod periodic;
mod pool;
mod stats;

use std::time::Duration;

pub use builder::WorkerBuilder;
pub use handle::{Worker, WorkerCounts};
pub use handler::{JobContext, JobError, JobResult};
pub use metrics::{sample_queue_metrics, set_queue_gauges};
pub use options::QueueOptions;
pub(crate) use options::{QueueSpec, WorkerConfig};
pub use stats::{QueueStats, SIZES_KEPT, WorkerStats};

/// The most jobs one fetch may ask for, unless a queue sets its own `max_batch`.
pub const DEFAULT_MAX_BATCH: usize = 50;
/// The largest `max_batch` accepted.
pub const MAX_BATCH_LIMIT: usize = 1000;
/// Default `batch_wait` of a batch handler.
pub const DEFAULT_BATCH_WAIT: Duration = Duration::from_millis(50);
/// The most jobs one hand-off carries (docs/design.md, "In-process hand-offs"). An in-process broker's default
/// window holds two hand-offs per slot, so at most twice this.
pub const HANDOFF_MAX: usize = 32;
/// In process, with the default window, a queue holds this many hand-offs per slot.
pub(crate) const IN_PROCESS_HANDOFFS: usize = 2;
/// The most fetches a worker keeps in flight at once, to cover the round trip to a pulled
/// broker (docs/design.md, "Round trips in flight"); one, for queues that do not fetch
/// ahead.
pub const MAX_FETCHES_IN_FLIGHT: usize = 4;
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
