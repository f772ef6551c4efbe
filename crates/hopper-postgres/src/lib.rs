//! Hopper's PostgreSQL broker (`postgres://…`). Not for direct use: depend on `hopper` with
//! the `postgres` feature.
//!
//! Many worker processes on many machines share one database. A fetch claims a batch in one
//! statement with `FOR UPDATE SKIP LOCKED` over a partial index of available jobs, with every
//! queue's budget in the same round trip; settlements of any mix are one statement; leases
//! of every held job renew in one statement. Enqueue is one statement for any number of
//! jobs, and can run inside the caller's own transaction ([`PgBroker::enqueue_in`]). Unique
//! keys live in a table of their own: a batch with keys is still one statement, which
//! takes each key under its row lock; claims and settlements never touch that table. A
//! rate-limited queue's window is a row the claim statement locks, reads and extends in the
//! same round trip (`broker::rate`), so claimers in every process share it. A group's
//! members are counted by the very statement that ends each one, which enqueues the
//! completion job of a group it leaves done (`broker::groups`). Idle workers wake on
//! LISTEN/NOTIFY.
//!
//! # Layout
//! - [`broker`]: [`PgBroker`], the [`Broker`](hopper_core::Broker) implementation,
//!   one module per concern (connecting, enqueue, fetch, settle, renew, inspection,
//!   listing, the other operator calls, maintenance).
//! - [`options`]: [`PgOptions`]: schema, connections, clock, wake-ups, retention.
//! - [`migrate`](mod@migrate): versioned migrations ([`migrate()`]) and the version check
//!   at connect.
//! - `conn`: the broker's dedicated connections; `listen`: LISTEN/NOTIFY; `sql`: the
//!   statements of `sql/`, one per file; `url`: URL parsing with `?schema=`.

pub mod broker;
mod conn;
mod listen;
pub mod migrate;
pub mod options;
mod sql;
mod url;

pub use broker::PgBroker;
pub use migrate::{migrate, migrate_with};
pub use options::{DEFAULT_SCHEMA, PgOptions};
