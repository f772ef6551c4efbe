//! Fault injection for Hopper: REAL worker processes (the `chaos-worker` binary of this
//! crate) drain a backlog on each durable broker (SQLite, PostgreSQL, MariaDB, RabbitMQ)
//! while the tests SIGKILL them, restart or cut off the server, hold the SQLite file
//! locked or partition the network; then [`checker`] accounts for every job id.
//!
//! # Running
//! `cargo test -p hopper-chaos` runs the bounded form (a few faults per broker, a short
//! steady run; well under five minutes on two cores). The full form (at least 20 kills
//! per broker, every fault repeated, a ten-minute steady run):
//!
//! ```text
//! HOPPER_CHAOS_FULL=1 cargo test -p hopper-chaos -- --nocapture --test-threads=1
//! ```
//!
//! `--nocapture` shows each scenario's row of figures. The servers are the shared test
//! servers (`HOPPER_TEST_POSTGRES_URL`, `HOPPER_TEST_MYSQL_URL`, `HOPPER_TEST_AMQP_URL`,
//! defaulting to 127.0.0.1); each test works in a schema, database or queue of its own and
//! faults only its own connections. The server-restart scenario starts a private
//! PostgreSQL cluster; the partition scenario needs root (`ip netns`) and skips, saying
//! why, without it.
//!
//! # Layout
//! - [`checker`]: the run-log format and the accounting of every id.
//! - [`fleet`]: starting, killing and restarting worker processes.
//! - [`forward`]: a TCP forwarder, to reach a loopback-only server from a namespace.

pub mod checker;
pub mod fleet;
pub mod forward;
