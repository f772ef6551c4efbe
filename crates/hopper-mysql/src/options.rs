//! [`MySqlOptions`]: the clock, the connections and the wake polling of a broker.

use std::time::Duration;

use hopper_core::{Clock, ConfigError, Limits};

/// How a [`MySqlBroker`](crate::MySqlBroker) connects and behaves.
///
/// ```
/// use std::time::Duration;
/// use hopper_mysql::MySqlOptions;
///
/// let options = MySqlOptions::default()
///     .connections(8)
///     .wake_poll(Some((Duration::from_millis(50), Duration::from_secs(2))));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MySqlOptions {
    /// Where "now" comes from for run times, lease expiry, `created_at` and `finished_at`.
    /// `None` (the default): the database clock, so that every process sharing the
    /// database agrees on expiry whatever its own clock says. `Some`: read from this clock
    /// on the caller's side and sent as a parameter, which tests use to run on tokio's
    /// paused clock ([`Clock::tokio`]).
    pub clock: Option<Clock>,
    /// Dedicated connections the broker holds (1..=64, default 4). Each call takes one for
    /// its duration, so this bounds the calls in flight at once.
    pub connections: usize,
    /// How often a background task looks for jobs other processes enqueued, to wake idle
    /// workers: every `min` after it saw a change, doubling up to `max` while nothing
    /// changes. Default `Some((20 ms, 1 s))`. `None`: no poller and no timers at all (tests
    /// on tokio's paused clock); idle workers then find other processes' jobs by their own
    /// poll.
    pub wake_poll: Option<(Duration, Duration)>,
    /// The largest payload an enqueue accepts, in bytes (default
    /// [`DEFAULT_MAX_PAYLOAD`](hopper_core::job::DEFAULT_MAX_PAYLOAD), 8 MiB; at most
    /// 512 MiB, and no more than the server's `max_allowed_packet` can carry). A
    /// `max_payload=` in the broker URL overrides it.
    pub max_payload: usize,
    /// The longest any of the broker's statements may run on the server (default 60 s;
    /// `None` keeps the server's settings): a claim, settlement or enqueue stuck behind a
    /// table lock someone else holds fails with the server's "max_statement_time exceeded"
    /// instead of holding its worker forever. MariaDB bounds every statement; MySQL 8
    /// bounds read-only SELECTs and the wait for a table's lock. Migrations run without it.
    pub statement_timeout: Option<Duration>,
}

impl Default for MySqlOptions {
    fn default() -> Self {
        MySqlOptions {
            clock: None,
            connections: 4,
            wake_poll: Some((Duration::from_millis(20), Duration::from_secs(1))),
            max_payload: hopper_core::job::DEFAULT_MAX_PAYLOAD,
            statement_timeout: Some(Duration::from_secs(60)),
        }
    }
}

impl MySqlOptions {
    /// Reads times from `clock` instead of the database.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Sets how many dedicated connections the broker holds.
    pub fn connections(mut self, n: usize) -> Self {
        self.connections = n;
        self
    }

    /// Sets the wake poll's `(min, max)` interval, or turns the poller off with `None`.
    pub fn wake_poll(mut self, poll: Option<(Duration, Duration)>) -> Self {
        self.wake_poll = poll;
        self
    }

    /// [`MySqlOptions::max_payload`].
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    /// [`MySqlOptions::statement_timeout`].
    pub fn statement_timeout(mut self, limit: Option<Duration>) -> Self {
        self.statement_timeout = limit;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        Limits::max_payload(self.max_payload)?;
        if self
            .statement_timeout
            .is_some_and(|t| t < Duration::from_millis(1))
        {
            let value = format!("{:?}", self.statement_timeout.unwrap_or_default());
            return Err(ConfigError::new(
                "statement_timeout",
                value,
                "1 ms or more, or None",
            ));
        }
        if !(1..=64).contains(&self.connections) {
            return Err(ConfigError::new("connections", self.connections, "1..=64"));
        }
        if let Some((min, max)) = self.wake_poll {
            if min.is_zero() || min > max {
                return Err(ConfigError::new(
                    "wake_poll",
                    format!("{min:?}..{max:?}"),
                    "a minimum above zero and no greater than the maximum, or None",
                ));
            }
        }
        Ok(())
    }
}
