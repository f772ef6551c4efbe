//! The cases. Each takes a fresh, empty broker built on
//! [`Clock::tokio`](hopper_core::Clock::tokio) and panics with a message naming what
//! differed. All but [`concurrent_claimers`], [`unique_keys_racing_producers`],
//! [`ordered_keys_racing_claimers`] and [`rate_limit_racing_claimers`] expect a current-thread runtime whose clock is paused
//! (`#[tokio::test(start_paused = true)]`), since they move time with
//! `tokio::time::advance`; those four expect a multi-thread
//! runtime in real time. [`broker_suite!`](crate::broker_suite) sets both up.
//!
//! The cases live in files by area and are re-exported here, so each is
//! `cases::<name>` whatever file holds it:
//! - `enqueue`: ids and records, refused queue names, the wake signal;
//! - `fetch`: order, delays, limits, budgets, one lease per fetch, concurrent claimers;
//! - `leases`: renewal, expiry and fencing, expiry on the last attempt;
//! - `settle`: retries, dead letters, releases, payloads, per-job settlement;
//! - `inspect`: cancelling and purging;
//! - `admin`: listings by cursor, error histories, re-drives, pauses, statistics;
//! - `registry`: live workers and throughput buckets;
//! - `unique`: unique keys, under racing producers too, and snoozing;
//! - `ordering`: ordering keys, under racing producers and claimers too;
//! - `ordering_aside`: ordering keys whose failed jobs step aside for their retry;
//! - `ordering_unique`: jobs with both a unique key and an ordering key;
//! - `rate`: rate limits, under racing claimers too;
//! - `groups`: groups and their completion job.

mod admin;
mod enqueue;
mod fetch;
mod groups;
mod inspect;
mod leases;
mod ordering;
mod ordering_aside;
mod ordering_unique;
mod rate;
mod rate_keys;
mod registry;
mod settle;
mod unique;

pub use admin::{
    bounded_counts, dead_letters_retried_and_discarded, error_history_per_attempt,
    listing_pages_by_cursor, pause_and_resume, queue_stats_and_names,
};
pub use enqueue::{
    bad_queue_name, enqueue_one_and_many, values_at_the_edges, values_out_of_range,
    wake_signal_on_new_work,
};
pub use fetch::{
    concurrent_claimers, delayed_jobs, fetch_capped_by_limit, fetch_order, one_lease_per_fetch,
    per_queue_budgets,
};
pub use groups::groups;
pub use inspect::{cancel, purge_removes_every_state};
pub use leases::{expiry_on_final_attempt, lease_expiry_and_fencing, lease_renewal};
pub use ordering::{ordered_keys, ordered_keys_racing_claimers};
pub use ordering_aside::ordered_retries_step_aside;
pub use ordering_unique::unique_and_ordering_keys;
pub use rate::{rate_limit_racing_claimers, rate_limits};
pub use rate_keys::{
    rate_limits_per_key, rate_limits_per_key_read_past_a_backlog,
    rate_limits_per_key_spread_afresh_each_claim,
};
pub use registry::workers_and_throughput;
pub use settle::{
    dead_letters, payloads_survive_every_return, release_is_attempt_neutral, retry_counts_attempts,
    settle_batch_is_per_job,
};
pub use unique::{snooze_is_attempt_neutral, unique_keys, unique_keys_racing_producers};

use std::sync::Arc;

use hopper_core::{Broker, Error, JobId, LeaseId, NewJob, Outcome, QueueCounts, Settlement};

use crate::helpers::skip;

async fn counts(broker: &Arc<dyn Broker>, queue: &str) -> QueueCounts {
    broker
        .counts(queue)
        .await
        .unwrap_or_else(|e| panic!("counts(`{queue}`) failed: {e:?}"))
}

fn counts_of(pending: u64, scheduled: u64, leased: u64, dead: u64) -> QueueCounts {
    QueueCounts {
        pending,
        scheduled,
        leased,
        dead,
    }
}

async fn record(broker: &Arc<dyn Broker>, id: JobId) -> hopper_core::JobRecord {
    broker
        .job(id)
        .await
        .unwrap_or_else(|e| panic!("job({id}) failed: {e:?}"))
        .unwrap_or_else(|| panic!("job({id}) not found"))
}

async fn settle(
    broker: &Arc<dyn Broker>,
    settlements: Vec<Settlement>,
) -> hopper_core::SettleReport {
    broker
        .settle(settlements.clone())
        .await
        .unwrap_or_else(|e| panic!("settle {settlements:?} failed: {e:?}"))
}

/// Skips `case` on a broker that pushes deliveries ([`Capabilities::pushed`]): there a
/// fetch takes only what has already arrived, and a delivery's id is not the id enqueue
/// returned, so a case that fetches right after enqueueing and compares ids does not apply.
/// Such brokers prove the same behaviour through workers in their own tests.
///
/// [`Capabilities::pushed`]: hopper_core::Capabilities::pushed
fn skip_if_pushed(broker: &Arc<dyn Broker>, case: &str) -> bool {
    let pushed = broker.capabilities().pushed;
    if pushed {
        skip(
            case,
            "the broker pushes deliveries: a fetch takes what has arrived, and a delivery's id \
             is not the id enqueue returned",
        );
    }
    pushed
}

/// Says whether the broker has a capability (`has`, named `capability`); when it does
/// not, checks that it refuses a batch of a plain job and `job`, which needs it, and
/// stores nothing, then prints that `case` is skipped.
async fn capable_or_refuses(
    broker: &Arc<dyn Broker>,
    has: bool,
    capability: &str,
    job: NewJob,
    case: &str,
) -> bool {
    if has {
        return true;
    }
    let refused = broker
        .enqueue(vec![NewJob::new("q", b"plain".to_vec()), job])
        .await;
    assert!(
        matches!(refused, Err(Error::NotSupported { .. })),
        "a broker without Capabilities::{capability} must refuse the job: {refused:?}"
    );
    assert_eq!(
        counts(broker, "q").await,
        counts_of(0, 0, 0, 0),
        "stored none"
    );
    let why = format!("needs Capabilities::{capability} (checked: refused, nothing stored)");
    skip(case, &why);
    false
}

fn one(id: JobId, lease: LeaseId, outcome: Outcome) -> Vec<Settlement> {
    vec![Settlement {
        job: id,
        lease,
        outcome,
    }]
}
