//! Fetching: order, delays, limits, per-queue budgets, one lease per fetch, and concurrent claimers.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, Budget, FetchRequest, JobId, JobState, LeaseId, NewJob, QueueCounts};
use tokio::time::advance;

use super::{counts, counts_of, record, skip_if_pushed};
use crate::helpers::{
    TTL, assert_each_once, claim_concurrently, enqueue, enqueue_n, fetch, fetch_request, ids, past,
    skip,
};

/// A fetch takes jobs by priority (descending), then `run_at`, then id, and returns them in
/// that order.
pub async fn fetch_order(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "fetch_order") {
        return;
    }
    if !broker.capabilities().priorities {
        return skip("fetch_order", "the broker does not order by priority");
    }
    let made = enqueue(
        &broker,
        vec![
            NewJob::new("q", "a"),
            NewJob::new("q", "b").priority(5),
            NewJob::new("q", "c").run_at(past(60)),
            NewJob::new("q", "d").priority(5),
            NewJob::new("q", "e").priority(-1),
        ],
    )
    .await;
    let [a, b, c, d, e] = made[..] else {
        unreachable!("enqueue returned 5 ids")
    };
    let top = fetch(&broker, "q", 2, TTL).await;
    assert_eq!(
        ids(&top.jobs),
        vec![b, d],
        "first fetch of 2: the priority-5 jobs by id"
    );
    let rest = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        ids(&rest.jobs),
        vec![c, a, e],
        "second fetch: priority 0 by run_at (c is older), then priority -1"
    );
    assert_eq!(counts(&broker, "q").await, counts_of(0, 0, 5, 0));
}

/// A delayed job is scheduled, not fetched before its time, reported as `next_due` by a
/// short fetch, and fetched from the millisecond it is due.
pub async fn delayed_jobs(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "delayed_jobs") {
        return;
    }
    if !broker.capabilities().delayed {
        return skip("delayed_jobs", "the broker does not support delayed jobs");
    }
    let made = enqueue(
        &broker,
        vec![
            NewJob::new("q", "later").delay(Duration::from_secs(10)),
            NewJob::new("q", "now"),
        ],
    )
    .await;
    let (later, now) = (made[0], made[1]);
    assert_eq!(
        counts(&broker, "q").await,
        counts_of(1, 1, 0, 0),
        "one due, one scheduled"
    );
    let due_at = record(&broker, later).await.job.run_at;
    let created = record(&broker, later).await.job.created_at;
    assert_eq!(due_at - created, 10_000, "run_at is 10 s after creation");

    let short = fetch(&broker, "q", 5, TTL).await;
    assert_eq!(ids(&short.jobs), vec![now], "only the due job is fetched");
    assert_eq!(
        short.next_due,
        Some(due_at),
        "a short fetch reports when the next job is due"
    );

    advance(Duration::from_millis(9_999)).await;
    let early = fetch(&broker, "q", 5, TTL).await;
    assert!(
        early.jobs.is_empty(),
        "fetched 1 ms before due: {:?}",
        ids(&early.jobs)
    );
    assert_eq!(early.next_due, Some(due_at), "next_due 1 ms before due");

    advance(Duration::from_millis(1)).await;
    let due = fetch(&broker, "q", 5, TTL).await;
    assert_eq!(
        ids(&due.jobs),
        vec![later],
        "the delayed job is fetched once due"
    );
    assert_eq!(due.jobs[0].attempt, 1, "attempt of the delayed job");
    assert_eq!(due.next_due, None, "nothing else is scheduled");
    assert_eq!(counts(&broker, "q").await, counts_of(0, 0, 2, 0));
}

/// A fetch never takes more than its limit, and charges each job it takes one attempt.
pub async fn fetch_capped_by_limit(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "fetch_capped_by_limit") {
        return;
    }
    let made = enqueue_n(&broker, "q", 30).await;
    let fetched = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(fetched.jobs.len(), 10, "30 pending, limit 10");
    assert_eq!(
        ids(&fetched.jobs),
        made[..10].to_vec(),
        "the oldest 10, in order"
    );
    let attempts: Vec<u32> = fetched.jobs.iter().map(|j| j.attempt).collect();
    assert_eq!(attempts, vec![1; 10], "each claimed job is on attempt 1");
    assert_eq!(fetched.next_due, None, "a full fetch reports no next_due");
    assert_eq!(counts(&broker, "q").await, counts_of(20, 0, 10, 0));
    let next = fetch(&broker, "q", 15, TTL).await;
    assert_eq!(ids(&next.jobs), made[10..25].to_vec(), "the next 15");
}

/// One fetch serves several queues, each within its own budget, and orders the result
/// globally by priority, then `run_at`, then id.
pub async fn per_queue_budgets(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "per_queue_budgets") {
        return;
    }
    let caps = broker.capabilities();
    if !caps.priorities || !caps.delayed {
        return skip(
            "per_queue_budgets",
            "the broker does not order by priority and run_at",
        );
    }
    let a = enqueue_n(&broker, "a", 20).await;
    let mut b_jobs: Vec<NewJob> = (0..10)
        .map(|i| NewJob::new("b", vec![i]).priority(2))
        .collect();
    b_jobs.extend((10..20).map(|i| NewJob::new("b", vec![i]).run_at(past(60))));
    let b = enqueue(&broker, b_jobs).await;

    let request = |a_limit, b_limit| FetchRequest {
        budgets: vec![
            Budget {
                queue: "a".into(),
                limit: a_limit,
            },
            Budget {
                queue: "b".into(),
                limit: b_limit,
            },
        ],
        lease_ttl: TTL,
    };
    let first = fetch_request(&broker, request(5, 2)).await;
    let expected: Vec<JobId> = b[..2].iter().chain(&a[..5]).copied().collect();
    assert_eq!(
        ids(&first.jobs),
        expected,
        "budgets a:5 b:2: b's two priority-2 jobs, then a's first five"
    );
    assert_eq!(counts(&broker, "a").await.leased, 5, "taken from a");
    assert_eq!(counts(&broker, "b").await.leased, 2, "taken from b");

    let second = fetch_request(&broker, request(3, 10)).await;
    let expected: Vec<JobId> = b[2..12].iter().chain(&a[5..8]).copied().collect();
    assert_eq!(
        ids(&second.jobs),
        expected,
        "budgets a:3 b:10: b's 8 priority-2 jobs, b's 2 older priority-0 jobs, then a's 3"
    );
    assert_eq!(counts(&broker, "a").await, counts_of(12, 0, 8, 0));
    assert_eq!(counts(&broker, "b").await, counts_of(8, 0, 12, 0));
}

/// Everything one fetch returns shares one lease, across queues; each fetch has its own.
pub async fn one_lease_per_fetch(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "one_lease_per_fetch") {
        return;
    }
    enqueue_n(&broker, "x", 4).await;
    enqueue_n(&broker, "y", 2).await;
    let request = FetchRequest {
        budgets: vec![
            Budget {
                queue: "x".into(),
                limit: 2,
            },
            Budget {
                queue: "y".into(),
                limit: 2,
            },
        ],
        lease_ttl: TTL,
    };
    let first = fetch_request(&broker, request).await;
    assert_eq!(first.jobs.len(), 4, "2 from x and 2 from y");
    assert_ne!(first.lease, LeaseId(0), "a fetch's lease is never 0");
    for job in &first.jobs {
        assert_eq!(
            job.lease, first.lease,
            "job {} carries its fetch's lease",
            job.id
        );
        let rec = record(&broker, job.id).await;
        assert_eq!(rec.state, JobState::Leased, "job {} is leased", job.id);
        assert_eq!(
            rec.job.queue, job.queue,
            "job {}'s record names its queue",
            job.id
        );
        assert_eq!(
            rec.job.lease, first.lease,
            "job {}'s record names the lease",
            job.id
        );
    }
    let second = fetch(&broker, "x", 10, TTL).await;
    assert_eq!(second.jobs.len(), 2, "the 2 left in x");
    assert_ne!(second.lease, first.lease, "two fetches share a lease");
    assert!(second.jobs.iter().all(|j| j.lease == second.lease));
}

/// 2,000 jobs claimed by 8 concurrent tasks in batches of 25: each job exactly once.
pub async fn concurrent_claimers(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "concurrent_claimers") {
        return;
    }
    let mut made = Vec::with_capacity(2_000);
    for _ in 0..4 {
        made.extend(enqueue_n(&broker, "q", 500).await);
    }
    let seen = claim_concurrently(std::slice::from_ref(&broker), "q", 8, 25).await;
    assert_each_once(&seen, &made);
    assert_eq!(
        counts(&broker, "q").await,
        QueueCounts::default(),
        "all acked"
    );
}
