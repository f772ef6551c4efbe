//! What operators ask of a broker from outside a running program: jobs listed by state a
//! page at a time, the error of every attempt, dead letters re-driven or discarded, queues
//! paused for every worker, and per-queue statistics.
//!
//! These are [`Broker`](crate::Broker) calls with defaults that answer
//! [`Error::NotSupported`]; [`Capabilities::admin`](crate::Capabilities::admin) says which a
//! broker serves.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{ConfigError, Error};
use crate::job::{JobId, Millis};

/// The most attempts whose errors a job keeps: the latest, oldest dropped first.
pub const ERROR_HISTORY: usize = 20;

/// The longest error kept for one attempt, in bytes; a longer one keeps its end (where
/// panics and standard error put the cause), cut at a character boundary.
pub const MAX_ERROR_BYTES: usize = 4096;

/// How far [`Broker::queue_glance`](crate::Broker::queue_glance) counts each state for the
/// dashboard: a queue of a million jobs shows "10000+" in a few milliseconds rather than
/// its exact count in a few hundred.
pub const COUNT_BOUND: u64 = 10_000;

/// The most jobs one [`Broker::list_jobs`](crate::Broker::list_jobs) page holds.
pub const MAX_PAGE: usize = 1000;

/// `error` cut to its last [`MAX_ERROR_BYTES`] bytes, as brokers store it.
pub fn bounded_error(error: &str) -> &str {
    if error.len() <= MAX_ERROR_BYTES {
        return error;
    }
    let mut from = error.len() - MAX_ERROR_BYTES;
    while !error.is_char_boundary(from) {
        from += 1;
    }
    &error[from..]
}

/// The error of one failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptError {
    /// Which attempt (1 for the first run).
    pub attempt: u32,
    /// When the broker recorded it (ms since the epoch).
    pub at: Millis,
    /// What the handler, or the broker, said.
    pub error: String,
}

/// The states a listing can ask for. Pending and scheduled are the two halves of waiting
/// jobs: due now, and due later (delayed, or backing off before a retry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListState {
    /// Waiting and due, in the order workers take them: priority, then `run_at`, then id.
    Pending,
    /// Waiting, not due yet, in the same order.
    Scheduled,
    /// Held under a lease, soonest expiry first.
    Leased,
    /// Dead-lettered, in the order they died.
    Dead,
    /// Finished and kept (brokers told to retain completed jobs), in the order they ended.
    Completed,
    /// Cancelled before they ran, in the order they were cancelled.
    Cancelled,
}

impl ListState {
    /// Every state, in the order tables show them.
    pub const ALL: [ListState; 6] = [
        ListState::Pending,
        ListState::Scheduled,
        ListState::Leased,
        ListState::Dead,
        ListState::Completed,
        ListState::Cancelled,
    ];

    /// The state's name as commands take and print it.
    pub fn name(self) -> &'static str {
        match self {
            ListState::Pending => "pending",
            ListState::Scheduled => "scheduled",
            ListState::Leased => "leased",
            ListState::Dead => "dead",
            ListState::Completed => "completed",
            ListState::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for ListState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ListState {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        ListState::ALL
            .into_iter()
            .find(|state| state.name() == s)
            .ok_or_else(|| {
                ConfigError::new(
                    "state",
                    s,
                    "one of pending, scheduled, leased, dead, completed, cancelled",
                )
            })
    }
}

/// Where a page of a listing ends, so the next one starts right after it: the sort key of
/// the last job listed. Keyset paging: a page costs the same at the millionth job as at the
/// first, and jobs that change state between pages are neither repeated nor skipped within
/// the state listed.
///
/// Written as three numbers joined by `.` (`0.1733400000000.42`), which is what commands
/// print and take back with `--after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cursor {
    /// The first sort column: the priority of waiting jobs, a lease's expiry, the time a
    /// job finished.
    pub key: i64,
    /// The second: `run_at` of waiting jobs, 0 elsewhere.
    pub sub: i64,
    /// The last job's id, which breaks ties.
    pub id: JobId,
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.key, self.sub, self.id.0)
    }
}

impl FromStr for Cursor {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        let bad = || {
            ConfigError::new(
                "cursor",
                s,
                "three integers joined by '.', as the previous page printed",
            )
        };
        let mut parts = s.split('.').map(|p| p.parse::<i64>().map_err(|_| bad()));
        let (Some(key), Some(sub), Some(id), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        Ok(Cursor {
            key: key?,
            sub: sub?,
            id: JobId(id?),
        })
    }
}

/// One page of a listing to ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobQuery {
    /// The queue.
    pub queue: String,
    /// The state.
    pub state: ListState,
    /// Newest first: the state's order reversed.
    pub newest_first: bool,
    /// Start after this job (the previous page's [`JobPage::next`]).
    pub after: Option<Cursor>,
    /// The most jobs to return, 1 to [`MAX_PAGE`].
    pub limit: usize,
}

impl JobQuery {
    /// The first page of up to `limit` jobs of `queue` in `state`, oldest first.
    pub fn new(queue: impl Into<String>, state: ListState, limit: usize) -> Self {
        JobQuery {
            queue: queue.into(),
            state,
            newest_first: false,
            after: None,
            limit,
        }
    }

    /// Refuses a page size out of range, naming it.
    pub fn validate(&self) -> Result<(), Error> {
        if !(1..=MAX_PAGE).contains(&self.limit) {
            return Err(ConfigError::new("limit", self.limit, format!("1 to {MAX_PAGE}")).into());
        }
        crate::job::validate_queue_name(&self.queue)?;
        Ok(())
    }
}

/// A page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPage {
    /// The jobs, in the order asked.
    pub jobs: Vec<crate::JobRecord>,
    /// Where the next page starts, when this one was full (the next may still be empty).
    pub next: Option<Cursor>,
}

/// Which dead letters a re-drive or discard takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// These jobs, those of them that are dead; the others are left as they are.
    Jobs(Vec<JobId>),
    /// The oldest `at_most` dead letters of a queue. Callers take a whole queue in chunks,
    /// so that no statement holds a million rows and progress can be shown.
    Queue {
        /// The queue.
        queue: String,
        /// The most to take in this call.
        at_most: usize,
    },
}

/// Completed, failed and dead-lettered attempts of a queue over a recent window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Throughput {
    /// Jobs acknowledged.
    pub completed: u64,
    /// Attempts that failed and were retried.
    pub failed: u64,
    /// Jobs dead-lettered.
    pub dead: u64,
}

/// A queue as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStatus {
    /// The queue.
    pub queue: String,
    /// Jobs by state.
    pub counts: crate::QueueCounts,
    /// Whether workers are told to take nothing from it.
    pub paused: bool,
    /// How long the oldest due job has waited past its `run_at`; `None` with none due.
    pub lag: Option<Duration>,
    /// The last minute's throughput, where the broker keeps it.
    pub last_minute: Option<Throughput>,
    /// The last hour's, where the broker keeps it.
    pub last_hour: Option<Throughput>,
    /// Where the counts are bounded ([`Broker::queue_glance`](crate::Broker::queue_glance)):
    /// a count of at most this many is exact, and one of this plus one means more. `None`:
    /// every count is exact.
    pub bound: Option<u64>,
    /// Consumers on the queue, where the server counts them (RabbitMQ). Brokers whose
    /// workers report themselves leave it out: [`Broker::workers`](crate::Broker::workers)
    /// lists who works each queue.
    pub consumers: Option<u64>,
    /// The queue's rate limit ([`Broker::set_rate_limit`](crate::Broker::set_rate_limit)),
    /// where one is set.
    pub rate_limit: Option<crate::RateLimit>,
}

/// How long the oldest due job waited, from its `run_at` and the broker's `now`.
pub fn lag_since(oldest_due: Option<Millis>, now: Millis) -> Option<Duration> {
    oldest_due.map(|at| Duration::from_millis(now.saturating_sub(at).max(0) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_print_and_parse_back() {
        let c = Cursor {
            key: -3,
            sub: 1_733_400_000_000,
            id: JobId(42),
        };
        assert_eq!(c.to_string(), "-3.1733400000000.42");
        assert_eq!(c.to_string().parse::<Cursor>().unwrap(), c);
        for bad in ["", "1.2", "1.2.3.4", "a.b.c", "1..3"] {
            let err = bad.parse::<Cursor>().unwrap_err().to_string();
            assert!(err.contains("cursor"), "{bad}: {err}");
        }
    }

    #[test]
    fn long_errors_keep_their_end_at_a_char_boundary() {
        let short = "boom";
        assert_eq!(bounded_error(short), "boom");
        let long = format!("{}é{}", "a".repeat(MAX_ERROR_BYTES), "the cause");
        let kept = bounded_error(&long);
        assert!(kept.len() <= MAX_ERROR_BYTES && kept.len() >= MAX_ERROR_BYTES - 1);
        assert!(kept.ends_with("the cause"));
    }

    #[test]
    fn page_sizes_out_of_range_are_refused_by_name() {
        let mut q = JobQuery::new("q", ListState::Dead, 0);
        assert!(q.validate().unwrap_err().to_string().contains("limit"));
        q.limit = MAX_PAGE + 1;
        assert!(q.validate().unwrap_err().to_string().contains("limit"));
        q.limit = MAX_PAGE;
        q.validate().unwrap();
        assert_eq!("dead".parse::<ListState>().unwrap(), ListState::Dead);
        assert!("gone".parse::<ListState>().is_err());
    }
}
