//! Settlements: retries, dead letters, releases, payloads on every return, and per-job application of a batch.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, JobId, JobState, LeaseId, NewJob, Outcome, Settlement};
use tokio::time::advance;

use super::{counts, counts_of, one, record, settle, skip_if_pushed};
use crate::helpers::{TTL, enqueue, enqueue_n, fetch, ids, settle_all, skip};

/// A retry puts the job back after its delay with its error kept; the next fetch charges
/// the next attempt.
pub async fn retry_counts_attempts(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "retry_counts_attempts") {
        return;
    }
    if !broker.capabilities().delayed {
        return skip(
            "retry_counts_attempts",
            "the broker does not support delays",
        );
    }
    let id = enqueue_n(&broker, "q", 1).await[0];
    let held = fetch(&broker, "q", 1, TTL).await;
    assert_eq!(held.jobs[0].attempt, 1);
    let retry = Outcome::Retry {
        delay: Duration::from_secs(5),
        error: "first failure".into(),
        step_aside: false,
    };
    let report = settle(&broker, one(id, held.lease, retry)).await;
    assert_eq!(report.applied, 1, "retry applied");
    let rec = record(&broker, id).await;
    assert_eq!(rec.state, JobState::Pending, "state while backing off");
    assert_eq!(rec.job.attempt, 1, "the attempt stays charged");
    assert_eq!(rec.last_error.as_deref(), Some("first failure"));
    assert_eq!(rec.job.lease, LeaseId(0), "no lease while backing off");
    assert_eq!(
        counts(&broker, "q").await,
        counts_of(0, 1, 0, 0),
        "backing off is scheduled"
    );

    let now = fetch(&broker, "q", 1, TTL).await;
    assert!(now.jobs.is_empty(), "fetched at once after a 5 s retry");
    assert_eq!(
        now.next_due,
        Some(rec.job.run_at),
        "next_due is the retry time"
    );
    advance(Duration::from_millis(4_999)).await;
    assert!(
        fetch(&broker, "q", 1, TTL).await.jobs.is_empty(),
        "fetched 1 ms early"
    );
    advance(Duration::from_millis(1)).await;
    let again = fetch(&broker, "q", 1, TTL).await;
    assert_eq!(
        ids(&again.jobs),
        vec![id],
        "fetched once the delay has passed"
    );
    assert_eq!(again.jobs[0].attempt, 2, "second attempt");
    let rec = record(&broker, id).await;
    assert_eq!(rec.state, JobState::Leased);
    assert_eq!(
        rec.last_error.as_deref(),
        Some("first failure"),
        "error kept while leased"
    );
}

/// Dead letters keep their error, are listed oldest first, are counted, and never run
/// again.
pub async fn dead_letters(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "dead_letters") {
        return;
    }
    let made = enqueue_n(&broker, "q", 2).await;
    let held = fetch(&broker, "q", 2, TTL).await;
    let dead = |error: &str| Outcome::DeadLetter {
        error: error.into(),
    };
    let report = settle(&broker, one(made[1], held.lease, dead("bang"))).await;
    assert_eq!(report.applied, 1);
    advance(Duration::from_secs(1)).await;
    let report = settle(&broker, one(made[0], held.lease, dead("boom"))).await;
    assert_eq!(report.applied, 1);

    let rec = record(&broker, made[0]).await;
    assert_eq!(rec.state, JobState::Dead);
    assert_eq!(rec.last_error.as_deref(), Some("boom"));
    assert_eq!(rec.job.lease, LeaseId(0), "a dead job has no lease");
    assert_eq!(counts(&broker, "q").await, counts_of(0, 0, 0, 2));
    let listed = broker.dead_letters("q", 10).await.expect("dead_letters");
    assert_eq!(
        listed.iter().map(|r| r.job.id).collect::<Vec<_>>(),
        vec![made[1], made[0]],
        "oldest dead letter first"
    );
    assert_eq!(
        listed
            .iter()
            .map(|r| r.last_error.as_deref())
            .collect::<Vec<_>>(),
        vec![Some("bang"), Some("boom")]
    );
    assert!(listed.iter().all(|r| r.state == JobState::Dead));
    let limited = broker.dead_letters("q", 1).await.expect("dead_letters");
    assert_eq!(limited.len(), 1, "limit 1");
    assert_eq!(limited[0].job.id, made[1]);
    assert!(
        fetch(&broker, "q", 10, TTL).await.jobs.is_empty(),
        "a dead letter was fetched"
    );
    advance(Duration::from_secs(3600)).await;
    assert!(
        fetch(&broker, "q", 10, TTL).await.jobs.is_empty(),
        "a dead letter came back"
    );
}

/// A released job goes back to its place in the queue without its attempt charged.
pub async fn release_is_attempt_neutral(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "release_is_attempt_neutral") {
        return;
    }
    let made = enqueue_n(&broker, "q", 2).await;
    let held = fetch(&broker, "q", 1, TTL).await;
    assert_eq!(ids(&held.jobs), vec![made[0]]);
    assert_eq!(held.jobs[0].attempt, 1);
    let report = settle(&broker, settle_all(&held, &Outcome::Release)).await;
    assert_eq!(report.applied, 1, "release applied");
    let rec = record(&broker, made[0]).await;
    assert_eq!(rec.state, JobState::Pending, "state after release");
    assert_eq!(rec.job.attempt, 0, "attempt after release");
    let again = fetch(&broker, "q", 1, TTL).await;
    assert_eq!(
        ids(&again.jobs),
        vec![made[0]],
        "the released job keeps its place"
    );
    assert_eq!(again.jobs[0].attempt, 1, "attempt after release and fetch");
}

/// A job's payload comes back byte for byte however the job returns to its queue: after
/// its lease expired, after a release, after a retry, and in its record while held. The
/// sizes straddle the memory broker's inline copy of a held payload (64 bytes).
pub async fn payloads_survive_every_return(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "payloads_survive_every_return") {
        return;
    }
    let payloads: Vec<Vec<u8>> = [0usize, 3, 64, 65, 10_000]
        .iter()
        .map(|&n| (0..n).map(|i| (i % 251) as u8).collect())
        .collect();
    let made = enqueue(
        &broker,
        payloads
            .iter()
            .map(|p| NewJob::new("q", p.clone()))
            .collect(),
    )
    .await;
    let by_id = |fetched: &hopper_core::Fetched| -> Vec<(JobId, Vec<u8>)> {
        let mut got: Vec<_> = fetched
            .jobs
            .iter()
            .map(|j| (j.id, j.payload.clone()))
            .collect();
        got.sort();
        got
    };
    let want: Vec<(JobId, Vec<u8>)> = made.iter().copied().zip(payloads.clone()).collect();

    let first = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(by_id(&first), want, "payloads as fetched");
    for (id, payload) in &want {
        let rec = record(&broker, *id).await;
        assert_eq!(rec.state, JobState::Leased, "job {id} is held");
        assert_eq!(
            &rec.job.payload, payload,
            "job {id}'s payload in its record while held"
        );
    }
    let again = if broker.capabilities().leases {
        advance(Duration::from_secs(31)).await;
        let again = fetch(&broker, "q", 10, TTL).await;
        assert_eq!(by_id(&again), want, "payloads after the lease expired");
        again
    } else {
        skip(
            "payloads_survive_every_return",
            "the broker has no leases to expire",
        );
        first
    };

    let settlements: Vec<Settlement> = again
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| Settlement {
            job: j.id,
            lease: j.lease,
            outcome: if i % 2 == 0 {
                Outcome::Release
            } else {
                Outcome::Retry {
                    delay: Duration::ZERO,
                    error: "once more".into(),
                    step_aside: false,
                }
            },
        })
        .collect();
    let report = settle(&broker, settlements).await;
    assert_eq!(report.applied, want.len(), "releases and retries applied");
    let last = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        by_id(&last),
        want,
        "payloads after a release (even positions) or a retry (odd)"
    );
}

/// Settlements in one call apply or are fenced one by one.
pub async fn settle_batch_is_per_job(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "settle_batch_is_per_job") {
        return;
    }
    let made = enqueue_n(&broker, "q", 3).await;
    let held = fetch(&broker, "q", 3, TTL).await;
    let report = settle(
        &broker,
        vec![
            Settlement {
                job: made[0],
                lease: held.lease,
                outcome: Outcome::Ack,
            },
            Settlement {
                job: made[1],
                lease: held.lease,
                outcome: Outcome::Retry {
                    delay: Duration::ZERO,
                    error: "again".into(),
                    step_aside: false,
                },
            },
            Settlement {
                job: made[2],
                lease: LeaseId(held.lease.0 ^ 1),
                outcome: Outcome::Ack,
            },
            Settlement {
                job: JobId(i64::MAX),
                lease: held.lease,
                outcome: Outcome::Ack,
            },
        ],
    )
    .await;
    assert_eq!(
        report.applied, 2,
        "the ack and the retry under the right lease"
    );
    assert_eq!(
        report.fenced,
        vec![made[2], JobId(i64::MAX)],
        "the wrong lease and the unknown job are fenced"
    );
    match broker.job(made[0]).await.expect("job()") {
        None => {}
        Some(rec) => assert_eq!(rec.state, JobState::Completed, "an acked job"),
    }
    let retried = record(&broker, made[1]).await;
    assert_eq!(retried.state, JobState::Pending);
    assert_eq!(retried.last_error.as_deref(), Some("again"));
    let fenced = record(&broker, made[2]).await;
    assert_eq!(
        fenced.state,
        JobState::Leased,
        "the fenced job is still held"
    );
    assert_eq!(fenced.job.lease, held.lease);
    let again = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        ids(&again.jobs),
        vec![made[1]],
        "a zero-delay retry is due at once"
    );
    assert_eq!(again.jobs[0].attempt, 2);
}
