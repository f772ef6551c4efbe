//! What a broker can do ([`Capabilities`]) and which operator calls it serves
//! ([`AdminCalls`]).

#[cfg(doc)]
use super::Broker;
#[cfg(doc)]
use crate::admin::QueueStatus;
#[cfg(doc)]
use crate::job::NewJob;

/// What a broker can do, so the runtime and tools can adapt.
///
/// Built from a preset and adjusted, never written out field by field, so that a field
/// added here reaches every broker with its preset's value:
///
/// ```
/// use hopper_core::Capabilities;
///
/// let caps = Capabilities::pushed("amqp").without_delayed();
/// assert!(caps.pushed && caps.durable && !caps.delayed && !caps.leases);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// A short name: `memory`, `sqlite`, ….
    pub name: &'static str,
    /// Jobs survive the process.
    pub durable: bool,
    /// Jobs live in this process, so fetching is a hand-off in memory: a worker keeps
    /// a wide window and batches hand-offs (docs/design.md, "In-process hand-offs").
    pub in_process: bool,
    /// `run_at` and delays are honoured.
    pub delayed: bool,
    /// Priorities order the queue.
    pub priorities: bool,
    /// Leases expire and fence stale holders.
    pub leases: bool,
    /// Topics (publish once, many subscriptions).
    pub topics: bool,
    /// Deliveries are pushed by the server under a window (RabbitMQ's `basic.qos`): a
    /// worker opens a [subscription](Broker::subscribe) per queue and a fetch takes what has
    /// already arrived, without a round trip. A short fetch is then no sign that the queue
    /// ran dry, only that the next deliveries are still on their way. The worker polls such
    /// a broker's [`settle`](Broker::settle) once on its event loop before it hands the rest
    /// to a task of its own, so a settlement that only queues frames completes there; the
    /// part before its first `Pending` must not block.
    pub pushed: bool,
    /// Which operator calls it serves (listing, re-drives, pausing, …).
    pub admin: AdminCalls,
    /// Unique keys ([`NewJob::unique_key`]) are enforced by the broker itself, so that
    /// every producer agrees; without, an enqueue of a job with a key is refused.
    pub unique: bool,
    /// Ordering keys ([`NewJob::ordering_key`]) are kept by the broker itself, so that
    /// every worker agrees; without, an enqueue of a job with a key is refused.
    pub ordered: bool,
    /// Rate limits ([`Broker::set_rate_limit`]) are kept by the broker itself, so that
    /// every worker's claims count against one window.
    pub rate_limits: bool,
    /// Rate limits [per key](crate::RateLimit::per_key) and the jobs' rate keys
    /// ([`NewJob::rate_key`]); without, both are refused.
    pub rate_limits_per_key: bool,
    /// Groups ([`NewJob::group`], [`Broker::seal_group`]) are counted by the broker
    /// itself, so that their completion job is enqueued once; without, an enqueue of a
    /// member is refused.
    pub groups: bool,
}

/// Which of the operator calls of [`admin`](crate::admin) a broker serves; the others
/// answer [`Error::NotSupported`](crate::Error::NotSupported).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdminCalls {
    /// [`Broker::list_jobs`], with the error of every attempt in each record.
    pub list: bool,
    /// [`Broker::retry_dead`] and [`Broker::discard_dead`].
    pub redrive: bool,
    /// [`Broker::set_paused`], honoured by every worker of the broker.
    pub pause: bool,
    /// [`Broker::queues`] and [`Broker::queue_stats`].
    pub stats: bool,
    /// Throughput over the last minute and hour in [`QueueStatus`], and
    /// [`Broker::throughput`].
    pub throughput: bool,
    /// [`Broker::heartbeat`], [`Broker::deregister`] and [`Broker::workers`]: live workers.
    pub workers: bool,
}

impl AdminCalls {
    /// Everything a broker that stores each job as a record can do.
    pub const RECORDS: AdminCalls = AdminCalls {
        list: true,
        redrive: true,
        pause: true,
        stats: true,
        throughput: true,
        workers: true,
    };

    /// What a broker that holds messages rather than records can do (RabbitMQ): depths,
    /// dead letters re-driven or discarded a chunk at a time, pauses; no listings.
    pub const PUSHED: AdminCalls = AdminCalls {
        list: false,
        redrive: true,
        pause: true,
        stats: true,
        throughput: false,
        workers: false,
    };

    /// None of them.
    pub const NONE: AdminCalls = AdminCalls {
        list: false,
        redrive: false,
        pause: false,
        stats: false,
        throughput: false,
        workers: false,
    };
}

impl Capabilities {
    /// A durable broker whose workers claim jobs with statements under expiring leases
    /// (SQLite, PostgreSQL, MySQL): delays, priorities and leases, nothing pushed.
    pub const fn leased_sql(name: &'static str) -> Self {
        Capabilities {
            name,
            durable: true,
            in_process: false,
            delayed: true,
            priorities: true,
            leases: true,
            topics: false,
            pushed: false,
            admin: AdminCalls::NONE,
            unique: false,
            ordered: false,
            rate_limits: false,
            rate_limits_per_key: false,
            groups: false,
        }
    }

    /// A broker whose jobs live in this process, so a fetch is a hand-off in memory:
    /// delays, priorities, leases and topics, and nothing survives the process.
    pub const fn in_process(name: &'static str) -> Self {
        Capabilities {
            name,
            durable: false,
            in_process: true,
            delayed: true,
            priorities: true,
            leases: true,
            topics: true,
            pushed: false,
            admin: AdminCalls::RECORDS,
            unique: false,
            ordered: false,
            rate_limits: false,
            rate_limits_per_key: false,
            groups: false,
        }
    }

    /// A durable broker whose server pushes deliveries under a window (RabbitMQ): delays,
    /// and no priorities or leases (a delivery is held until its channel closes).
    pub const fn pushed(name: &'static str) -> Self {
        Capabilities {
            name,
            durable: true,
            in_process: false,
            delayed: true,
            priorities: false,
            leases: false,
            topics: false,
            pushed: true,
            admin: AdminCalls::NONE,
            unique: false,
            ordered: false,
            rate_limits: false,
            rate_limits_per_key: false,
            groups: false,
        }
    }

    /// The same, under another name (a wrapper that changes how the broker is reached).
    pub const fn named(self, name: &'static str) -> Self {
        Capabilities { name, ..self }
    }

    /// The same, with jobs reached over a connection rather than handed off in memory.
    pub const fn without_in_process(self) -> Self {
        Capabilities {
            in_process: false,
            ..self
        }
    }

    /// The same, serving the operator calls `admin` says.
    pub const fn with_admin(self, admin: AdminCalls) -> Self {
        Capabilities { admin, ..self }
    }

    /// The same, enforcing unique keys.
    pub const fn with_unique(self) -> Self {
        Capabilities {
            unique: true,
            ..self
        }
    }

    /// The same, keeping rate limits.
    pub const fn with_rate_limits(self) -> Self {
        Capabilities {
            rate_limits: true,
            ..self
        }
    }

    /// The same, keeping rate limits per key (and so rate limits).
    pub const fn with_rate_limits_per_key(self) -> Self {
        Capabilities {
            rate_limits: true,
            rate_limits_per_key: true,
            ..self
        }
    }

    /// The same, counting groups.
    pub const fn with_groups(self) -> Self {
        Capabilities {
            groups: true,
            ..self
        }
    }

    /// The same, keeping ordering keys.
    pub const fn with_ordered(self) -> Self {
        Capabilities {
            ordered: true,
            ..self
        }
    }

    /// The same, with `run_at` and delays not honoured.
    pub const fn without_delayed(self) -> Self {
        Capabilities {
            delayed: false,
            ..self
        }
    }
}
