//! Leases: renewal, expiry, fencing of a stale holder, and expiry on the last attempt.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, JobState, NewJob, Outcome, QueueCounts};
use tokio::time::advance;

use super::{counts, counts_of, record, settle, skip_if_pushed};
use crate::helpers::{TTL, enqueue, enqueue_n, fetch, ids, settle_all, skip};

/// A renewed lease outlives its first expiry: nobody else can fetch its jobs, and its
/// holder can still settle them.
pub async fn lease_renewal(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "lease_renewal") {
        return;
    }
    if !broker.capabilities().leases {
        return skip("lease_renewal", "the broker has no leases");
    }
    enqueue_n(&broker, "q", 3).await;
    let held = fetch(&broker, "q", 3, TTL).await;
    assert_eq!(held.jobs.len(), 3);
    advance(Duration::from_secs(20)).await;
    let lost = broker.renew(&[held.lease], TTL).await.expect("renew");
    assert!(lost.is_empty(), "a live lease reported lost: {lost:?}");
    advance(Duration::from_secs(20)).await;
    let other = fetch(&broker, "q", 10, TTL).await;
    assert!(
        other.jobs.is_empty(),
        "40 s after a 30 s lease renewed at 20 s, another fetch took {:?}",
        ids(&other.jobs)
    );
    assert_eq!(counts(&broker, "q").await, counts_of(0, 0, 3, 0));
    let report = settle(&broker, settle_all(&held, &Outcome::Ack)).await;
    assert_eq!(report.applied, 3, "acks under the renewed lease");
    assert!(report.fenced.is_empty(), "fenced: {:?}", report.fenced);
    assert_eq!(counts(&broker, "q").await, QueueCounts::default());
}

/// An expired lease gives its jobs to the next fetch, on a new lease and a new attempt; the
/// old holder is fenced off: its settlements change nothing and its renewal reports the
/// lease lost.
pub async fn lease_expiry_and_fencing(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "lease_expiry_and_fencing") {
        return;
    }
    if !broker.capabilities().leases {
        return skip("lease_expiry_and_fencing", "the broker has no leases");
    }
    let made = enqueue_n(&broker, "q", 2).await;
    let old = fetch(&broker, "q", 2, TTL).await;
    assert_eq!(ids(&old.jobs), made);
    advance(Duration::from_secs(31)).await;
    let new = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        ids(&new.jobs),
        made,
        "the expired jobs go to the next fetch, in order"
    );
    assert_ne!(new.lease, old.lease, "under a new lease");
    let attempts: Vec<u32> = new.jobs.iter().map(|j| j.attempt).collect();
    assert_eq!(attempts, vec![2, 2], "each on its second attempt");

    let report = settle(&broker, settle_all(&old, &Outcome::Ack)).await;
    assert_eq!(report.applied, 0, "acks under the expired lease applied");
    assert_eq!(
        report.fenced, made,
        "acks under the expired lease are fenced"
    );
    for id in &made {
        let rec = record(&broker, *id).await;
        assert_eq!(rec.state, JobState::Leased, "job {id} after a fenced ack");
        assert_eq!(
            rec.job.lease, new.lease,
            "job {id} stays with the new lease"
        );
        assert_eq!(rec.job.attempt, 2, "job {id} attempt after a fenced ack");
    }
    let lost = broker
        .renew(&[old.lease, new.lease], TTL)
        .await
        .expect("renew");
    assert_eq!(lost, vec![old.lease], "only the expired lease is lost");
    let report = settle(&broker, settle_all(&new, &Outcome::Ack)).await;
    assert_eq!(report.applied, 2, "acks under the new lease");
}

/// A lease that expires on the job's last allowed attempt dead-letters the job instead of
/// returning it; one with attempts left returns it.
pub async fn expiry_on_final_attempt(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "expiry_on_final_attempt") {
        return;
    }
    if !broker.capabilities().leases {
        return skip("expiry_on_final_attempt", "the broker has no leases");
    }
    let made = enqueue(
        &broker,
        vec![
            NewJob::new("q", "last").max_attempts(1),
            NewJob::new("q", "again").max_attempts(2),
        ],
    )
    .await;
    let (last, again) = (made[0], made[1]);
    let held = fetch(&broker, "q", 2, TTL).await;
    assert_eq!(held.jobs.len(), 2);
    advance(Duration::from_secs(31)).await;
    let next = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        ids(&next.jobs),
        vec![again],
        "only the job with attempts left returns"
    );
    assert_eq!(next.jobs[0].attempt, 2);
    let rec = record(&broker, last).await;
    assert_eq!(rec.state, JobState::Dead, "the job out of attempts");
    assert_eq!(
        rec.last_error.as_deref(),
        Some("lease expired on the final attempt"),
        "its error"
    );
    assert_eq!(counts(&broker, "q").await, counts_of(0, 0, 1, 1));
    let dead = broker.dead_letters("q", 10).await.expect("dead_letters");
    assert_eq!(
        dead.iter().map(|r| r.job.id).collect::<Vec<_>>(),
        vec![last]
    );
}
