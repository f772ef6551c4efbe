//! Worker statistics a program can read while the worker runs.

use std::collections::BTreeMap;

/// The most fetch and hand-off sizes kept in order; later ones are counted, not listed.
pub const SIZES_KEPT: usize = 100_000;

/// Counters and recent history of one worker. A snapshot: read it again for fresh figures.
/// Later versions may add figures, so it cannot be built outside this crate.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Fetches that returned at least one job. On a broker that pushes deliveries
    /// ([`Capabilities::pushed`](crate::Capabilities::pushed)) there is no fetch: each
    /// batch handed to a handler counts as one (each job, for a one-job handler).
    pub fetches: u64,
    /// Fetches that returned nothing (idle polls and wake-ups that lost the race).
    pub empty_fetches: u64,
    /// Jobs those fetches returned.
    pub fetched_jobs: u64,
    /// The most fetches that were in flight at once: above 1 when a pulled queue fetched
    /// ahead to cover the round trip.
    pub peak_fetches_in_flight: usize,
    /// The size of each non-empty fetch, in order (the first [`SIZES_KEPT`]). On a pushed
    /// broker, the size of each batch handed to a handler (1 for a one-job handler).
    pub batch_sizes: Vec<u32>,
    /// Jobs in each hand-off, in order (the first [`SIZES_KEPT`]).
    pub handoff_sizes: Vec<u32>,
    /// Hand-offs made. Each wakes a pool task, except those run on the event loop's own
    /// task ([`inline_handoffs`](Self::inline_handoffs)), so jobs per hand-off says how
    /// many jobs share a wake-up.
    pub handoffs: u64,
    /// Of [`handoffs`](Self::handoffs), those run on the event loop's own task, in a pool
    /// task's slot: one job each, of a queue whose handlers were timed holding the thread
    /// less than 32 µs per poll, where waking a pool task would cost about as much as the
    /// job.
    pub inline_handoffs: u64,
    /// Jobs whose handler is running now.
    pub running: usize,
    /// Jobs fetched and not yet started (in the buffer or waiting in a hand-off).
    pub buffered: usize,
    /// Jobs acknowledged.
    pub completed: u64,
    /// Failed attempts sent back for a retry.
    pub retried: u64,
    /// Jobs dead-lettered.
    pub dead: u64,
    /// Jobs handed back unstarted (shutdown, pause, lost slot).
    pub released: u64,
    /// Jobs cancelled while held.
    pub cancelled: u64,
    /// Slots of periodic jobs this worker enqueued.
    pub slots_enqueued: u64,
    /// Slots of periodic jobs another worker had enqueued first.
    pub slots_taken_elsewhere: u64,
    /// Slots of periodic jobs given up: the broker refused them until the next slot.
    pub slots_missed: u64,
    /// Jobs their handler put off ([`JobError::snooze`](crate::JobError::snooze)).
    pub snoozed: u64,
    /// Settlement round trips made.
    pub settle_calls: u64,
    /// Leases the broker reported lost (expired, or taken over after expiring) while this
    /// worker still held jobs under them; their unstarted jobs were dropped.
    pub leases_lost: u64,
    /// Pool tasks alive now.
    pub pool_tasks: usize,
    /// Pool tasks alive and idle now.
    pub idle_tasks: usize,
    /// The most pool tasks alive at once.
    pub peak_pool_tasks: usize,
    /// Pool tasks spawned since the worker started. Tasks idle for a second (beyond one)
    /// end, so a figure well above [`peak_pool_tasks`](Self::peak_pool_tasks) means load
    /// that comes and goes over seconds.
    pub pool_tasks_started: u64,
    /// Settlements the broker had not confirmed when a stopping worker gave up on it,
    /// [`STOP_SETTLE_LIMIT`](crate::worker::STOP_SETTLE_LIMIT) after its grace period: they
    /// failed, or were still on their way (a batch in flight may yet be applied). Their jobs
    /// come back once their leases expire, as after a crash. A RabbitMQ acknowledgement,
    /// release or reject counts as delivered once its frame is queued on the connection: one
    /// that a server gone silent never reads is not counted here, and its job comes back the
    /// same way.
    pub settlements_undelivered: u64,
    /// Per-queue figures.
    pub queues: BTreeMap<String, QueueStats>,
}

/// Figures of one queue of one worker. Later versions may add figures, as to
/// [`WorkerStats`].
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct QueueStats {
    /// How many of this queue's jobs each non-empty fetch carried, in order.
    pub fetch_sizes: Vec<u32>,
    /// Jobs acknowledged.
    pub completed: u64,
    /// Failed attempts sent back for a retry.
    pub retried: u64,
    /// Jobs dead-lettered.
    pub dead: u64,
    /// Batches handed to a batch handler, by size, in order.
    pub batch_sizes: Vec<u32>,
    /// The most jobs of this queue held at once (buffered, waiting in hand-offs, running).
    pub peak_held: usize,
    /// Pushed brokers: each window the subscription was opened or re-sized with, in order
    /// (none when the broker's default applies).
    pub windows: Vec<u32>,
}

impl WorkerStats {
    /// Average jobs per non-empty fetch.
    pub fn jobs_per_fetch(&self) -> f64 {
        if self.fetches == 0 {
            0.0
        } else {
            self.fetched_jobs as f64 / self.fetches as f64
        }
    }
}

pub(crate) fn push_size(v: &mut Vec<u32>, n: usize) {
    if v.len() < SIZES_KEPT {
        v.push(n as u32);
    }
}
