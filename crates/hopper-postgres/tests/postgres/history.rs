//! The error history beside `last_error`: the reaper adds the error of a lease that expired
//! on the final attempt, and an error too long for the history is cut there while
//! `last_error` keeps it whole.

use std::time::Duration;

use hopper_core::admin::MAX_ERROR_BYTES;
use hopper_core::{FetchRequest, JobId, NewJob, Outcome, Settlement};
use tokio::time::advance;

use super::support::fresh;

const TTL: Duration = Duration::from_secs(30);

#[tokio::test(start_paused = true)]
async fn a_lease_expired_on_the_final_attempt_joins_the_history() {
    let broker = fresh().await;
    let job = NewJob::new("q", "x").max_attempts(2);
    let id = broker.enqueue(vec![job]).await.unwrap()[0];
    let held = broker.fetch(FetchRequest::one("q", 1, TTL)).await.unwrap();
    let retry = Outcome::Retry {
        delay: Duration::ZERO,
        error: "first".into(),
        step_aside: false,
    };
    let settled = vec![Settlement {
        job: id,
        lease: held.lease,
        outcome: retry,
    }];
    assert_eq!(broker.settle(settled).await.unwrap().applied, 1);
    let again = broker.fetch(FetchRequest::one("q", 1, TTL)).await.unwrap();
    assert_eq!(again.jobs.len(), 1);
    advance(TTL + Duration::from_secs(1)).await;
    let reaping = broker.fetch(FetchRequest::one("q", 1, TTL)).await.unwrap();
    assert!(reaping.jobs.is_empty());

    let rec = broker.job(id).await.unwrap().unwrap();
    let history: Vec<(u32, &str)> = rec
        .errors
        .iter()
        .map(|e| (e.attempt, e.error.as_str()))
        .collect();
    assert_eq!(
        history,
        [(1, "first"), (2, "lease expired on the final attempt")]
    );
    assert!(rec.errors[0].at < rec.errors[1].at, "{rec:?}");
}

#[tokio::test(start_paused = true)]
async fn a_long_error_is_cut_in_the_history_and_whole_in_last_error() {
    let broker = fresh().await;
    let ids = broker
        .enqueue(vec![NewJob::new("q", "long"), NewJob::new("q", "short")])
        .await
        .unwrap();
    let held = broker.fetch(FetchRequest::one("q", 2, TTL)).await.unwrap();
    let long = format!("{}the cause", "é".repeat(MAX_ERROR_BYTES));
    let dead = |job: JobId, error: &str| Settlement {
        job,
        lease: held.lease,
        outcome: Outcome::DeadLetter {
            error: error.to_owned(),
        },
    };
    let settled = vec![dead(ids[0], &long), dead(ids[1], "short")];
    assert_eq!(broker.settle(settled).await.unwrap().applied, 2);

    let rec = broker.job(ids[0]).await.unwrap().unwrap();
    assert_eq!(rec.last_error.as_deref(), Some(long.as_str()));
    let kept = &rec.errors[0].error;
    assert!(kept.len() <= MAX_ERROR_BYTES && kept.len() >= MAX_ERROR_BYTES - 1);
    assert!(kept.ends_with("the cause") && long.ends_with(kept.as_str()));
    let rec = broker.job(ids[1]).await.unwrap().unwrap();
    assert_eq!(rec.errors[0].error, "short");
    assert_eq!(rec.last_error.as_deref(), Some("short"));
}
