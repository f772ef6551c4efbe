//! The broker's operations as they run on one connection. Each takes `now` from its
//! caller: `Some` is the broker's own clock, `None` lets the database clock decide (every
//! statement reads `COALESCE(?, now)`). Whether a transaction surrounds them is the
//! caller's business (`broker`), except where noted.
//!
//! # Layout
//! - `enqueue`: new jobs encoded once, split into inserts, each one multi-row `INSERT`;
//! - `fetch`: the reaper, the claim (by priority levels or over the queue), the next due
//!   time, and the probe that tells whether a claim would find anything;
//! - `settle`: settlements, optimistic first, then exactly those still held;
//! - `renew`: lease renewal;
//! - `inspect`: cancel, job records, counts, dead letters, purge, and the newest id (for
//!   the wake poller);
//! - `admin`: listings by cursor, re-drives and discards of dead letters, pauses, queue
//!   names and queue statistics (counts exact or bounded, pause, lag, throughput);
//! - `registry`: worker heartbeats, the live workers, and throughput buckets;
//! - `unique`: the enqueue of jobs with unique keys, and the pruning of lapsed holds;
//! - `rate`: rate limits: the claim's lock on limited queues' windows, their room, and
//!   the windows written back; setting and lifting limits;
//! - `rate_keys`: rate limits per key: the windows of a queue's keys, and the claim that
//!   takes the jobs whose keys have room and moves the others;
//! - `ordering`: ordering keys, and the enqueue of batches with keys of either kind in one
//!   transaction: jobs stored blocked behind their key, the next job let run
//!   when one ends, re-drives and cancels under the key's lock, the pruning of key rows,
//!   and what a lease says of its claim;
//! - `groups`: groups: members taken in, counted as they settle (by whatever ends them),
//!   the completion job enqueued once, seals, status and purges;
//! - `rows`: job states, and jobs and job records decoded from rows.

mod admin;
mod enqueue;
mod fetch;
mod groups;
mod inspect;
mod ordering;
mod rate;
mod rate_keys;
mod registry;
mod renew;
mod rows;
mod settle;
mod unique;

use hopper_core::Millis;

pub(crate) use self::admin::{list, queue_names, queue_status, redrive, set_paused};
pub(crate) use self::enqueue::{chunks, insert, new_rows};
pub(crate) use self::fetch::{Claim, claim, levels, next_due, probe, reap};
pub(crate) use self::groups::{
    enter as enter_groups, joined as join_groups, purge, seal as seal_group, status as group_status,
};
pub(crate) use self::inspect::{Cancel, cancel, cancel_ordered, counts, dead_letters, job, max_id};
pub(crate) use self::ordering::{enqueue_keyed, is_ordered, prune_lines};
pub(crate) use self::rate::{lock as lock_windows, set_limit, write as write_windows};
pub(crate) use self::registry::{Beat, buckets, deregister, heartbeat, workers};
pub(crate) use self::renew::renew;
pub(crate) use self::settle::settle;
pub(crate) use self::unique::{PruneCursor, prune_holds};

/// A duration in milliseconds, saturating.
pub(crate) fn millis(d: std::time::Duration) -> Millis {
    Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)
}
