//! Hopper's embedded broker (`sqlite://PATH`): every job in one SQLite file, no server.
//! Not for direct use: depend on `hopper`, which re-exports [`SqliteBroker`].
//!
//! The file is in WAL mode with `synchronous = NORMAL`. One dedicated thread owns the
//! connection; broker calls travel to it over a channel, and it runs whatever calls are
//! queued together in one write transaction (group commit), each in its own savepoint so
//! that one failing call does not undo the others. Claims are optimistic: a job is taken
//! only while still pending, so brokers in several processes can share one file.
//!
//! Rate limits live in the file too (`rate`): a limited queue's window of recent claims is
//! read and written back inside the claim's write transaction, which SQLite runs one at a
//! time, so every broker of the file keeps one limit between them. So do groups
//! (`groups`): members are counted in the transaction that ends them, and a sealed group's
//! completion job enqueued by the one that leaves it nothing unsettled, once.
//!
//! # Layout
//! - [`broker`]: [`SqliteBroker`], the [`Broker`](hopper_core::Broker) implementation,
//!   which reads the clock and sends commands.
//! - [`options`]: [`SqliteOptions`], how the file is opened.
//! - `writer`: the database thread and group commit.
//! - `queries`: each operation as it runs on that thread; `admin`, the operator calls
//!   (listings, re-drives, pauses, statistics); `registry`, live workers and throughput
//!   buckets; `unique`, enqueues with unique keys and the sweep of stale ones;
//!   `ordering`, ordering keys: jobs blocked behind the earlier ones of their key; `rate`,
//!   rate limits: each limited queue's window, read and written by its claims;
//!   `rate_keys`, limits per key: a window per rate key, jobs held back moved; `groups`,
//!   groups: members counted as they settle, and each sealed group's completion job;
//!   `rows`, reading a job or a record from its row.
//! - `schema`: connection settings and versioned migrations (`migrations/*.sql`, recorded in
//!   `PRAGMA user_version`).
//! - `sql`: every statement, one per file under `sql/`.
//! - `watch`: wake-ups for commits by other processes, from a watch on the file.

mod admin;
pub mod broker;
mod groups;
pub mod options;
mod ordering;
mod queries;
mod rate;
mod rate_keys;
mod registry;
mod rows;
mod schema;
mod sql;
mod store;
mod unique;
mod watch;
mod writer;

pub use broker::SqliteBroker;
pub use options::SqliteOptions;
