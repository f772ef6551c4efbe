//! Rate limits, kept by the broker ([`hopper_core::rate`]): at most `max` claims of a queue
//! in any window of `per`, whoever claims.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, Budget, Error, FetchRequest, RateLimit};
use tokio::time::advance;

use super::record;
use crate::helpers::{TTL, claim_concurrently, enqueue_n, fetch, fetch_request, skip};

fn limit(max: u32, per_ms: u64) -> RateLimit {
    RateLimit::new(max, Duration::from_millis(per_ms)).expect("a valid limit")
}

/// Says whether the broker keeps rate limits; when it does not, checks that it refuses
/// one, naming what it cannot do.
async fn keeps_limits(broker: &Arc<dyn Broker>, case: &str) -> bool {
    if broker.capabilities().rate_limits {
        return true;
    }
    let refused = broker.set_rate_limit("q", Some(limit(3, 100))).await;
    assert!(
        matches!(&refused, Err(Error::NotSupported { what, .. }) if what.contains("rate limit")),
        "a broker without Capabilities::rate_limits must refuse a limit: {refused:?}"
    );
    skip(
        case,
        "needs Capabilities::rate_limits (checked: refused by name)",
    );
    false
}

/// A limited queue gives out at most `max` jobs in any window of `per`, in one fetch or
/// many, and says when the window has room again; queues beside it in the same fetch are
/// not held up. Setting the limit again, or changing it, keeps the starts already counted;
/// lifting it frees the queue. Operators see the limit in the queue's statistics.
pub async fn rate_limits(broker: Arc<dyn Broker>) {
    if !keeps_limits(&broker, "rate_limits").await {
        return;
    }
    broker
        .set_rate_limit("q", Some(limit(3, 100)))
        .await
        .unwrap();
    enqueue_n(&broker, "q", 12).await;
    enqueue_n(&broker, "other", 5).await;
    let both = FetchRequest {
        budgets: vec![
            Budget {
                queue: "q".into(),
                limit: 10,
            },
            Budget {
                queue: "other".into(),
                limit: 10,
            },
        ],
        lease_ttl: TTL,
    };
    let first = fetch_request(&broker, both).await;
    let of = |queue: &str| first.jobs.iter().filter(|j| j.queue == queue).count();
    assert_eq!((of("q"), of("other")), (3, 5), "3 of q, every job of other");
    let t0 = record(&broker, first.jobs[0].id)
        .await
        .started_at
        .expect("a claimed job's start");
    assert_eq!(
        first.next_due,
        Some(t0 + 100),
        "jobs are due and the window is full: due again when its starts leave it"
    );

    advance(Duration::from_millis(99)).await;
    let early = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(early.jobs.len(), 0, "1 ms before the window has room");
    assert_eq!(early.next_due, Some(t0 + 100));

    advance(Duration::from_millis(1)).await;
    assert_eq!(
        fetch(&broker, "q", 2, TTL).await.jobs.len(),
        2,
        "the budget"
    );
    advance(Duration::from_millis(10)).await;
    assert_eq!(fetch(&broker, "q", 10, TTL).await.jobs.len(), 1, "the room");

    broker
        .set_rate_limit("q", Some(limit(3, 100)))
        .await
        .unwrap();
    let again = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        again.jobs.len(),
        0,
        "setting the limit again keeps its starts"
    );
    assert_eq!(again.next_due, Some(t0 + 200), "the 2 at t0+100 leave then");

    broker
        .set_rate_limit("q", Some(limit(5, 100)))
        .await
        .unwrap();
    assert_eq!(
        fetch(&broker, "q", 10, TTL).await.jobs.len(),
        2,
        "raised to 5: 5 less the 3 in the window"
    );
    broker
        .set_rate_limit("q", Some(limit(2, 1000)))
        .await
        .unwrap();
    advance(Duration::from_millis(100)).await;
    let lowered = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        lowered.jobs.len(),
        0,
        "lowered to 2 a second: 5 in the window"
    );
    assert_eq!(
        lowered.next_due,
        Some(t0 + 1110),
        "room for one once the 3 started at t0+110 leave"
    );

    if broker.capabilities().admin.stats {
        let stats = broker.queue_stats("q").await.unwrap();
        assert_eq!(stats.rate_limit, Some(limit(2, 1000)), "shown to operators");
        broker
            .set_rate_limit("idle", Some(limit(1, 1000)))
            .await
            .unwrap();
        let names = broker.queues().await.unwrap();
        assert!(
            names.iter().any(|n| n == "idle"),
            "a limited queue is listed before it holds a job: {names:?}"
        );
        broker.set_rate_limit("idle", None).await.unwrap();
        assert!(!broker.queues().await.unwrap().iter().any(|n| n == "idle"));
    }

    broker.set_rate_limit("q", None).await.unwrap();
    assert_eq!(
        fetch(&broker, "q", 10, TTL).await.jobs.len(),
        4,
        "lifted: the rest of the 12"
    );
    if broker.capabilities().admin.stats {
        assert_eq!(broker.queue_stats("q").await.unwrap().rate_limit, None);
    }
    let bad = broker.set_rate_limit("", Some(limit(1, 1))).await;
    assert!(bad.is_err(), "an empty queue name is refused: {bad:?}");
}

/// Claimers racing on a limited queue take no more than the limit between them: 8
/// claimers fetching batches of 7 from 300 jobs under 40 an hour claim exactly 40.
pub async fn rate_limit_racing_claimers(broker: Arc<dyn Broker>) {
    if !keeps_limits(&broker, "rate_limit_racing_claimers").await {
        return;
    }
    broker
        .set_rate_limit("q", Some(limit(40, 3_600_000)))
        .await
        .unwrap();
    enqueue_n(&broker, "q", 300).await;
    let seen = claim_concurrently(std::slice::from_ref(&broker), "q", 8, 7).await;
    assert_eq!(seen.len(), 40, "claimed under a limit of 40 an hour");
    let counts = broker.counts("q").await.unwrap();
    assert_eq!(counts.pending, 260, "the rest still wait");
}
