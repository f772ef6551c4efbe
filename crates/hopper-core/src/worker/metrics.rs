//! The worker's metrics, through the [`metrics`] facade: whatever recorder the program
//! installs (Prometheus, StatsD, OpenTelemetry) receives them. Every series carries the
//! labels `queue` and `broker` (the broker's [`Capabilities::name`](crate::Capabilities)).
//!
//! | name | kind | what |
//! |---|---|---|
//! | `hopper_jobs_enqueued_total` | counter | jobs a broker accepted from [`Broker::enqueue`] in this process |
//! | `hopper_jobs_fetched_total` | counter | jobs taken from the broker |
//! | `hopper_fetch_size` | histogram | jobs per fetch that returned any, per queue |
//! | `hopper_jobs_completed_total` | counter | jobs acknowledged |
//! | `hopper_jobs_retried_total` | counter | failed attempts sent back for a retry |
//! | `hopper_jobs_dead_total` | counter | jobs dead-lettered |
//! | `hopper_jobs_released_total` | counter | jobs handed back unstarted |
//! | `hopper_jobs_snoozed_total` | counter | jobs their handler put off, attempt not charged |
//! | `hopper_job_duration_seconds` | histogram | a job's handler, start to finish |
//! | `hopper_job_start_delay_seconds` | histogram | from a job's due time (`run_at`, at the earliest its enqueue) to its start |
//! | `hopper_settlements_fenced_total` | counter | settlements the broker ignored, their lease gone (`broker` only) |
//! | `hopper_lease_renewals_total` | counter | leases renewed (`broker` only) |
//! | `hopper_leases_lost_total` | counter | leases lost or given up while jobs were held (`broker` only) |
//!
//! Sampled from the broker by [`sample_queue_metrics`], which a program runs beside its
//! workers (`hopper work --metrics` does), gauges with `queue` and `broker`:
//! `hopper_queue_jobs` (with `state`: pending, scheduled, leased, dead),
//! `hopper_queue_lag_seconds` (the oldest due job's wait; 0 with none due) and
//! `hopper_queue_paused` (1 or 0).
//!
//! Handles are registered once, when the worker starts, so install the recorder before
//! starting workers; on the hot path each update is then an atomic add, and nothing at
//! all without a recorder. Counters are updated once per batch where the event loop
//! already counts a batch; durations once per job.

use std::time::{Duration, SystemTime};

use std::sync::Arc;

use metrics::{Counter, Histogram, counter, gauge, histogram};
use tokio::time::Instant;

use crate::broker::Broker;
use crate::job::{Job, Millis, to_millis};

/// One queue's handles.
#[derive(Debug)]
pub(crate) struct QueueMeters {
    pub(crate) fetched: Counter,
    pub(crate) fetch_size: Histogram,
    pub(crate) completed: Counter,
    pub(crate) retried: Counter,
    pub(crate) dead: Counter,
    pub(crate) released: Counter,
    pub(crate) snoozed: Counter,
    pub(crate) duration: Histogram,
    pub(crate) start_delay: Histogram,
}

impl QueueMeters {
    pub(crate) fn new(queue: &str, broker: &'static str) -> Self {
        let labels = [("queue", queue.to_owned()), ("broker", broker.to_owned())];
        QueueMeters {
            fetched: counter!("hopper_jobs_fetched_total", &labels),
            fetch_size: histogram!("hopper_fetch_size", &labels),
            completed: counter!("hopper_jobs_completed_total", &labels),
            retried: counter!("hopper_jobs_retried_total", &labels),
            dead: counter!("hopper_jobs_dead_total", &labels),
            released: counter!("hopper_jobs_released_total", &labels),
            snoozed: counter!("hopper_jobs_snoozed_total", &labels),
            duration: histogram!("hopper_job_duration_seconds", &labels),
            start_delay: histogram!("hopper_job_start_delay_seconds", &labels),
        }
    }

    /// Records how long each of `jobs` waited past its due time, at `now`.
    pub(crate) fn started<'a>(&self, jobs: impl Iterator<Item = &'a Job>, now: Millis) {
        for job in jobs {
            let due = job.run_at.max(job.created_at);
            self.start_delay
                .record(now.saturating_sub(due).max(0) as f64 / 1000.0);
        }
    }
}

/// The worker's handles not tied to a queue.
#[derive(Debug)]
pub(crate) struct WorkerMeters {
    /// Whether a recorder was installed when the worker started ([`recording`](crate::metering::recording)), so
    /// that the per-job histograms are worth their arithmetic (a few dozen instructions a
    /// job, which a drain of tiny jobs feels).
    pub(crate) per_job: bool,
    pub(crate) fenced: Counter,
    pub(crate) renewals: Counter,
    pub(crate) leases_lost: Counter,
}

impl WorkerMeters {
    pub(crate) fn new(broker: &'static str) -> Self {
        let labels = [("broker", broker)];
        WorkerMeters {
            per_job: crate::metering::recording(),
            fenced: counter!("hopper_settlements_fenced_total", &labels),
            renewals: counter!("hopper_lease_renewals_total", &labels),
            leases_lost: counter!("hopper_leases_lost_total", &labels),
        }
    }
}

/// The wall clock in milliseconds, read from the event loop's monotonic `now` (tokio's,
/// so a paused test clock moves it too) from an anchor taken every ten minutes: not a
/// reading of the system clock per hand-off, which a drain of tiny jobs would feel with or
/// without a recorder installed. Between anchors it follows the monotonic clock, which
/// NTP slews with the wall clock; a step of the wall clock shows at the next anchor.
#[derive(Debug)]
pub(crate) struct WallClock {
    at: Instant,
    ms: Millis,
}

/// How long one anchor of [`WallClock`] serves.
const ANCHOR_FOR: Duration = Duration::from_secs(600);

impl WallClock {
    pub(crate) fn new() -> Self {
        WallClock {
            at: Instant::now(),
            ms: to_millis(SystemTime::now()),
        }
    }

    /// The wall time at `now`.
    pub(crate) fn at(&mut self, now: Instant) -> Millis {
        if now.saturating_duration_since(self.at) >= ANCHOR_FOR {
            *self = WallClock::new();
        }
        self.ms + now.saturating_duration_since(self.at).as_millis() as Millis
    }
}

/// Reads each queue's [`queue_stats`](Broker::queue_stats) every `every` and sets the
/// queue gauges (see the module docs); runs until dropped. A broker that keeps no
/// statistics is asked once, and the loop ends with a warning.
pub async fn sample_queue_metrics(broker: Arc<dyn Broker>, queues: Vec<String>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !set_queue_gauges(&*broker, &queues).await {
            return;
        }
    }
}

/// Sets the queue gauges (see the module docs) of `queues` once, from
/// [`queue_stats`](Broker::queue_stats). Returns `false`, with a warning, when the broker
/// keeps no statistics; a queue whose statistics fail is skipped with a warning.
pub async fn set_queue_gauges(broker: &dyn Broker, queues: &[String]) -> bool {
    let name = broker.capabilities().name;
    for queue in queues {
        let status = match broker.queue_stats(queue).await {
            Ok(status) => status,
            Err(e @ crate::Error::NotSupported { .. }) => {
                tracing::warn!(error = %e, "queue gauges are not sampled");
                return false;
            }
            Err(e) => {
                tracing::warn!(error = %e.chain(), queue, "sampling queue gauges failed");
                continue;
            }
        };
        let labels = |state: &'static str| {
            [
                ("queue", queue.clone()),
                ("broker", name.to_owned()),
                ("state", state.to_owned()),
            ]
        };
        let c = status.counts;
        for (state, n) in [
            ("pending", c.pending),
            ("scheduled", c.scheduled),
            ("leased", c.leased),
            ("dead", c.dead),
        ] {
            gauge!("hopper_queue_jobs", &labels(state)).set(n as f64);
        }
        let labels = [("queue", queue.clone()), ("broker", name.to_owned())];
        let lag = status.lag.unwrap_or_default().as_secs_f64();
        gauge!("hopper_queue_lag_seconds", &labels).set(lag);
        gauge!("hopper_queue_paused", &labels).set(if status.paused { 1.0 } else { 0.0 });
    }
    true
}
