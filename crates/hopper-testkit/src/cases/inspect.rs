//! Changing and inspecting what is queued: cancelling a job and purging a queue.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, CancelOutcome, JobId, JobState, NewJob, Outcome, QueueCounts};
use tokio::time::advance;

use super::{counts, counts_of, one, record, settle, skip_if_pushed};
use crate::helpers::{TTL, enqueue, enqueue_n, fetch, ids, skip};

/// Cancelling a pending job means it never runs; a held job is reported with its lease.
pub async fn cancel(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "cancel") {
        return;
    }
    let made = enqueue_n(&broker, "q", 3).await;
    let cancelled = broker.cancel(made[1]).await.expect("cancel");
    assert_eq!(
        cancelled,
        CancelOutcome::Cancelled,
        "cancelling a pending job"
    );
    assert_eq!(record(&broker, made[1]).await.state, JobState::Cancelled);
    assert_eq!(
        counts(&broker, "q").await,
        counts_of(2, 0, 0, 0),
        "counts after cancel"
    );

    let held = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        ids(&held.jobs),
        vec![made[0], made[2]],
        "the cancelled job was fetched"
    );
    assert_eq!(
        broker.cancel(made[0]).await.expect("cancel"),
        CancelOutcome::Held(held.lease),
        "cancelling a held job"
    );
    assert_eq!(
        record(&broker, made[0]).await.state,
        JobState::Leased,
        "a held job stays"
    );
    assert_eq!(
        broker.cancel(made[1]).await.expect("cancel"),
        CancelOutcome::NotFound,
        "cancelling twice"
    );
    assert_eq!(
        broker.cancel(JobId(i64::MAX)).await.expect("cancel"),
        CancelOutcome::NotFound,
        "cancelling an unknown id"
    );
    advance(Duration::from_secs(3600)).await;
    let later = fetch(&broker, "q", 10, TTL).await;
    assert!(
        !ids(&later.jobs).contains(&made[1]),
        "the cancelled job was fetched after the leases expired"
    );
}

/// Purging a queue removes its jobs in every state, and only its jobs.
pub async fn purge_removes_every_state(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "purge_removes_every_state") {
        return;
    }
    if !broker.capabilities().delayed {
        return skip(
            "purge_removes_every_state",
            "the broker does not support delays",
        );
    }
    let made = enqueue(
        &broker,
        vec![
            NewJob::new("q", "leased"),
            NewJob::new("q", "dead"),
            NewJob::new("q", "pending"),
            NewJob::new("q", "scheduled").delay(Duration::from_secs(3600)),
            NewJob::new("other", "kept"),
        ],
    )
    .await;
    let held = fetch(&broker, "q", 2, TTL).await;
    assert_eq!(ids(&held.jobs), made[..2].to_vec());
    let dead = Outcome::DeadLetter { error: "x".into() };
    settle(&broker, one(made[1], held.lease, dead)).await;
    assert_eq!(
        counts(&broker, "q").await,
        counts_of(1, 1, 1, 1),
        "one job in each state"
    );

    let gone = broker.purge("q").await.expect("purge");
    assert_eq!(gone, 4, "purged jobs");
    assert_eq!(
        counts(&broker, "q").await,
        QueueCounts::default(),
        "counts after purge"
    );
    assert_eq!(
        counts(&broker, "other").await,
        counts_of(1, 0, 0, 0),
        "other queue kept"
    );
    for id in &made[..4] {
        assert!(
            broker.job(*id).await.expect("job()").is_none(),
            "job {id} survived purge"
        );
    }
    let report = settle(&broker, one(made[0], held.lease, Outcome::Ack)).await;
    assert_eq!(
        report.fenced,
        vec![made[0]],
        "settling a purged job is fenced"
    );
    assert!(fetch(&broker, "q", 10, TTL).await.jobs.is_empty());
}
