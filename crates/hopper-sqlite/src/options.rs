//! [`SqliteOptions`]: how a [`SqliteBroker`](crate::SqliteBroker) opens its file.

use std::time::Duration;

use hopper_core::{Clock, ConfigError, Limits};

/// Settings for [`SqliteBroker::open_with`](crate::SqliteBroker::open_with).
///
/// ```
/// use std::time::Duration;
/// use hopper_sqlite::SqliteOptions;
///
/// let options = SqliteOptions::default().busy_timeout(Duration::from_secs(10));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// Where "now" comes from for run times and lease expiry. Default [`Clock::System`],
    /// which every process sharing the file must use so that they agree on expiry; tests
    /// pass [`Clock::tokio`] to run on tokio's paused clock.
    pub clock: Clock,
    /// How long a write waits for another process holding the file's write lock before it
    /// fails. Default 5 s.
    pub busy_timeout: Duration,
    /// The most commands one transaction carries (group commit). Default 256, at least 1.
    /// Larger groups amortise the commit; smaller ones bound how long a caller waits
    /// behind the others.
    pub group_commit_limit: usize,
    /// How long the database thread keeps checking for the next command, yielding its core
    /// between checks, before it sleeps until one arrives. Default 500 µs; zero sleeps at
    /// once.
    ///
    /// While a worker drains a backlog, its next fetch or settlement arrives a few hundred
    /// microseconds after the last reply, and waking a thread that went to sleep cost
    /// about 80 µs more (p50) on a 2-vCPU virtual machine, whose idle core halts. The
    /// thread checks only while commands come within this time of each other: after a
    /// longer wait it sleeps at once, so a quiet broker spends it once, not after every
    /// command. A worker at batch 100 sends its next call 250–400 µs after the last reply;
    /// at 250 µs the thread mostly slept anyway there (BENCHMARKS.md, twelfth session).
    pub spin_wait: Duration,
    /// The largest payload an enqueue accepts, in bytes (default
    /// [`DEFAULT_MAX_PAYLOAD`](hopper_core::job::DEFAULT_MAX_PAYLOAD), 8 MiB; at most
    /// 512 MiB). Every job passes through the one writer thread, so one huge payload
    /// holds up every other enqueue and claim while it is written.
    pub max_payload: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            clock: Clock::System,
            busy_timeout: Duration::from_secs(5),
            group_commit_limit: 256,
            spin_wait: Duration::from_micros(500),
            max_payload: hopper_core::job::DEFAULT_MAX_PAYLOAD,
        }
    }
}

impl SqliteOptions {
    /// Sets [`clock`](Self::clock).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Sets [`busy_timeout`](Self::busy_timeout).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Sets [`group_commit_limit`](Self::group_commit_limit).
    pub fn group_commit_limit(mut self, limit: usize) -> Self {
        self.group_commit_limit = limit;
        self
    }

    /// Sets [`spin_wait`](Self::spin_wait).
    pub fn spin_wait(mut self, wait: Duration) -> Self {
        self.spin_wait = wait;
        self
    }

    /// Sets [`max_payload`](Self::max_payload).
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        Limits::max_payload(self.max_payload)?;
        if self.group_commit_limit == 0 {
            return Err(ConfigError::new(
                "group_commit_limit",
                self.group_commit_limit,
                "at least 1",
            ));
        }
        Ok(())
    }
}
