//! Hopper's MySQL / MariaDB broker (`mysql://…`), for MySQL 8 and MariaDB 10.6+. Not for
//! direct use: depend on `hopper`.
//!
//! Many worker processes on many machines share one database. A fetch claims its batch in
//! one transaction: every queue's budget in one `SELECT … FOR UPDATE SKIP LOCKED`, one
//! `UPDATE` that takes the rows under a fresh lease, `COMMIT`. The settlements of a call
//! are one transaction too: one `DELETE` for the acks, one `UPDATE` for everything else.
//! Enqueue is one multi-row `INSERT` per thousand jobs. Sessions run at READ COMMITTED, so
//! claims lock rows, never the gaps between them.
//!
//! A job may carry a unique key. A batch with keys is one transaction that also takes them
//! in `hopper_unique`, locking them in key order so that racing producers store one job per
//! key, and tells from each holder's row whether its hold still stands; nothing else reads
//! the table, so claims and settlements cost what they did, and a batch without keys is
//! the plain `INSERT`. Heartbeats delete lapsed holds, a bounded walk a minute.
//!
//! Jobs may carry an ordering key: those of a queue sharing one run one at a time, in
//! enqueue order. A job waiting behind an earlier one of its key is stored pending with its
//! `run_at` moved 2^62 ms ahead, where no claim reaches it, so claims read what they did
//! (and each job's key, which their lease then reports). A batch with keys locks its keys'
//! rows of `hopper_ordering` in key order, reads each key's first unfinished job, and
//! stores its jobs waiting or not; when a job of a key that could run ends, the same
//! transaction locks the key's row, reads the key's next job (its first unfinished one,
//! passing over failed jobs that stepped aside and are not due yet) and lets it run. A
//! retry that steps aside moves its job behind the key under the same lock, when other
//! jobs of the key wait, and lets the next run. Each reads after the other committed, so
//! neither misses what the other did (see `queries::ordering`). Plain enqueues are the
//! plain `INSERT`, and settlements under a lease whose claim took no job with a key are
//! the statements they were. Heartbeats delete the rows of keys without jobs, as they do lapsed holds.
//!
//! A queue may have a rate limit: at most `max` of its jobs start in any window of `per`,
//! whichever process claims them. Its row of `hopper_rate_limits` holds the limit and the
//! window (the start times of its latest claims); a claim of the queue locks that row
//! before it reads any job, takes at most the window's room, stamps its jobs' `started_at`
//! and writes the window back in the same transaction, so claimers everywhere take turns
//! on it. Queues without a limit pay one primary-key probe inside the claim statement,
//! which also tells a broker that a queue was limited by another process (see
//! `queries::rate`); a queue whose window is full is due again when the window has room.
//! A limit per key keeps a window per rate key of the queue's jobs instead: under the same
//! lock, the claim takes the jobs whose keys have room and moves the others to when their
//! keys will (see `queries::rate_keys`).
//!
//! Jobs may be members of a group, which is sealed with a completion job: once the group is
//! sealed and every member has settled (completed, died, cancelled or purged), the
//! completion job is enqueued, once. A member keeps its group in its row until it is
//! counted; the counts and the sealed completion job are the group's row of
//! `hopper_groups`. A batch with members locks its groups' rows (in name order) and is
//! refused whole when one is sealed; a claim that takes a member marks its lease as one
//! that takes a job with an ordering key does, and whatever ends a member (a settlement,
//! the reaper, a cancel, a purge) counts it in its own transaction under the group's row
//! lock, enqueueing the completion job before it commits when it counted the last (see
//! `queries::groups`). Plain jobs keep their statements.
//!
//! Times are milliseconds since the epoch, read from the database clock by default, so
//! that every process agrees on lease expiry whatever its own clock says
//! ([`MySqlOptions::clock`]). The schema is versioned: [`migrate()`] (the `hopper migrate`
//! command) applies it, and a broker refuses to start on a schema that is behind.
//!
//! Operators list a queue's jobs by state a page at a time (keyset paging over index
//! ranges, so a page deep in a million jobs costs what the first does), with the error of
//! each failed attempt; re-drive or discard dead letters; pause queues; and see each
//! queue's rate limit. A pause is a
//! row of `hopper_paused` that the claim statement itself checks, so every worker of every
//! process stops taking from the queue at its next claim. Workers report themselves every
//! few seconds: each report replaces the worker's row of `hopper_workers` and adds what it
//! settled to its queues' 10-second buckets of `hopper_throughput`, from which operators
//! see the live workers and each queue's last minute and hour.
//!
//! MySQL has no LISTEN/NOTIFY. A broker wakes its own idle workers when it enqueues or
//! hands work back, and a background task polls `SELECT MAX(id)` on a connection of its
//! own for jobs other processes enqueued: every 20 ms after it saw a change, backing off by
//! doubling to once a second, so **an idle broker polls at most once a second**
//! ([`MySqlOptions::wake_poll`]). Retries, releases and resumed queues of other processes,
//! and jobs their settlements let run behind an ordering key, are found by the worker's
//! own idle poll; the process that let one run wakes its own workers at once.
//!
//! # Layout
//! - [`broker`]: [`MySqlBroker`], the [`Broker`](hopper_core::Broker) implementation:
//!   clocks, wake-ups, and which calls may be repeated; its fetch, and the pruning
//!   heartbeats run, in files of their own.
//! - [`options`]: [`MySqlOptions`]: clock, connections, wake polling.
//! - [`migrate`](mod@migrate): versioned migrations ([`migrate()`], `migrations/*.sql`)
//!   and the version check at connect.
//! - `queries`: each operation as it runs on one connection, one module per concern
//!   (enqueue, unique keys, ordering keys, groups, fetch, rate limits, settle, renew,
//!   inspection, operator calls, the worker registry).
//! - `conn`: the broker's dedicated connections, reconnection and transactions.
//! - `poll`: the wake poller.
//! - `sql`: every statement, one per file under `sql/`.
//! - `url`: `mysql://` URLs, and keeping their passwords out of messages.

pub mod broker;
mod conn;
pub mod migrate;
pub mod options;
mod poll;
mod queries;
mod sql;
mod url;

pub use broker::MySqlBroker;
pub use migrate::migrate;
pub use options::MySqlOptions;
