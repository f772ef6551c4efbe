//! [`PgOptions`]: the schema, the connections, the clock and the wake-ups of a broker.

use std::time::Duration;

use hopper_core::{Clock, ConfigError, Limits};

/// The schema Hopper's tables live in unless told otherwise.
pub const DEFAULT_SCHEMA: &str = "hopper";

/// How a [`PgBroker`](crate::PgBroker) connects and behaves.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PgOptions {
    /// The schema holding Hopper's tables, so several applications can share a database.
    /// Lowercase letters, digits and `_`, starting with a letter or `_`, at most 63.
    pub schema: String,
    /// Dedicated connections a broker holds for enqueues, settlements and the rest
    /// (1..=64, default 4). Besides them it holds two for claims and one that listens.
    pub connections: usize,
    /// `None` (the default): every time comes from the database clock. `Some`: times are
    /// read from this clock and sent as parameters, which tests use to run on tokio's
    /// paused clock.
    pub clock: Option<Clock>,
    /// Wake idle workers with LISTEN/NOTIFY (default on). Off, they poll.
    pub listen: bool,
    /// Keep acknowledged jobs as completed for this long instead of deleting them.
    pub keep_completed: Option<Duration>,
    /// Vacuum the jobs table after this broker has claimed this many jobs since its last
    /// vacuum (default 10,000; `None` leaves it to autovacuum). A claim leaves a dead entry
    /// at the front of the index of pending jobs, and every later claim walks over it until
    /// a vacuum removes it; autovacuum looks at most once a minute, by which time a fast
    /// drain has left hundreds of thousands. Runs in the background on a connection of its
    /// own, skips the table while another vacuum holds it, and waits at least a second and
    /// ten times its own last duration between runs. Needs the broker's role to own the
    /// table; otherwise the server skips it with a warning.
    pub vacuum_after: Option<u64>,
    /// Settlements wait for the WAL flush (default `true`). `false` commits acks, retries
    /// and dead letters with `synchronous_commit = off`, on the claim connections: one
    /// flush less per batch, but **a server crash may re-run acknowledged jobs** (the last
    /// few hundred milliseconds of settlements are lost with it, as claims are). No job is
    /// lost either way: a lost settlement leaves its job leased, to be reclaimed.
    pub durable_settlements: bool,
    /// The longest any of the broker's statements may run on the server (default 60 s;
    /// `None` keeps the server's setting): a claim, settlement or enqueue stuck behind a
    /// lock someone else holds fails with the server's "canceling statement due to
    /// statement timeout" instead of holding its worker forever. Vacuums and migrations
    /// run on connections without it.
    pub statement_timeout: Option<Duration>,
    /// The largest payload an enqueue accepts, in bytes (default
    /// [`DEFAULT_MAX_PAYLOAD`](hopper_core::job::DEFAULT_MAX_PAYLOAD), 8 MiB; at most
    /// 512 MiB). A `max_payload=` in the broker URL overrides it.
    pub max_payload: usize,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            schema: DEFAULT_SCHEMA.to_owned(),
            connections: 4,
            clock: None,
            listen: true,
            keep_completed: None,
            vacuum_after: Some(10_000),
            durable_settlements: true,
            statement_timeout: Some(Duration::from_secs(60)),
            max_payload: hopper_core::job::DEFAULT_MAX_PAYLOAD,
        }
    }
}

impl PgOptions {
    /// Sets the schema.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Sets how many dedicated connections the broker holds.
    pub fn connections(mut self, n: usize) -> Self {
        self.connections = n;
        self
    }

    /// Reads times from `clock` instead of the database.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Turns LISTEN/NOTIFY wake-ups on or off.
    pub fn listen(mut self, on: bool) -> Self {
        self.listen = on;
        self
    }

    /// Keeps acknowledged jobs for `retention` (pruned as workers fetch).
    pub fn keep_completed(mut self, retention: Duration) -> Self {
        self.keep_completed = Some(retention);
        self
    }

    /// Vacuums the jobs table after every `claimed` jobs this broker claims, or never
    /// (`None`).
    pub fn vacuum_after(mut self, claimed: Option<u64>) -> Self {
        self.vacuum_after = claimed;
        self
    }

    /// Makes settlements wait for the WAL flush (`true`, the default) or not; see
    /// [`PgOptions::durable_settlements`].
    pub fn durable_settlements(mut self, on: bool) -> Self {
        self.durable_settlements = on;
        self
    }

    /// [`PgOptions::statement_timeout`].
    pub fn statement_timeout(mut self, limit: Option<Duration>) -> Self {
        self.statement_timeout = limit;
        self
    }

    /// [`PgOptions::max_payload`].
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        validate_schema(&self.schema)?;
        Limits::max_payload(self.max_payload)?;
        if self
            .statement_timeout
            .is_some_and(|t| t < Duration::from_millis(1))
        {
            return Err(ConfigError::new(
                "statement_timeout",
                "0 ms",
                "1 ms or more, or None",
            ));
        }
        if !(1..=64).contains(&self.connections) {
            return Err(ConfigError::new("connections", self.connections, "1..=64"));
        }
        if self.vacuum_after == Some(0) {
            return Err(ConfigError::new("vacuum_after", 0, "at least 1, or None"));
        }
        Ok(())
    }
}

/// Checks a schema name: it is spliced into SQL as an identifier, so only a safe alphabet
/// is accepted and no quoting is ever needed.
pub(crate) fn validate_schema(schema: &str) -> Result<(), ConfigError> {
    let mut chars = schema.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !first_ok || !rest_ok || schema.len() > 63 {
        return Err(ConfigError::new(
            "schema",
            schema,
            "1 to 63 of a-z 0-9 _, not starting with a digit",
        ));
    }
    Ok(())
}
