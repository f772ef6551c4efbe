//! Listings page by page where the suite's jobs do not go: many jobs sharing a sort key
//! (a batch enqueued, fetched or dead-lettered in one call shares its time), several
//! priority levels each holding due and delayed jobs, and pages of every size both ways.
//! Every walk must give each job once, in the order a sort of all of them gives.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, JobId, JobQuery, JobRecord, ListState, NewJob, Outcome, Settlement};
use hopper_testkit::helpers::{enqueue, fetch};
use tokio::time::advance;

use super::support::temp_broker;

/// Every page of `query`, its ids in order.
async fn walk(broker: &Arc<dyn Broker>, mut query: JobQuery) -> Vec<JobId> {
    let mut seen = Vec::new();
    loop {
        let page = broker.list_jobs(&query).await.unwrap();
        assert!(page.jobs.iter().all(|r| r.job.queue == query.queue));
        seen.extend(page.jobs.iter().map(|r| r.job.id));
        match page.next {
            Some(next) => query.after = Some(next),
            None => return seen,
        }
        assert!(seen.len() <= 1_000, "paging does not end: {query:?}");
    }
}

/// Walks `state` at several page sizes, oldest and newest first, against `expected`.
async fn check(broker: &Arc<dyn Broker>, state: ListState, expected: &[JobId]) {
    for limit in [1, 2, 7, 50, 1000] {
        let query = JobQuery::new("q", state, limit);
        assert_eq!(
            walk(broker, query.clone()).await,
            expected,
            "{state} by {limit}"
        );
        let newest = JobQuery {
            newest_first: true,
            ..query
        };
        let reversed: Vec<JobId> = expected.iter().rev().copied().collect();
        assert_eq!(
            walk(broker, newest).await,
            reversed,
            "{state} by {limit}, newest first"
        );
    }
}

async fn records(broker: &Arc<dyn Broker>, ids: &[JobId]) -> Vec<JobRecord> {
    let mut records = Vec::new();
    for id in ids {
        records.push(broker.job(*id).await.unwrap().unwrap());
    }
    records
}

#[tokio::test(start_paused = true)]
async fn pages_through_ties_levels_and_delays_both_ways() {
    let broker = temp_broker().await;
    // Three batches, each sharing one enqueue time: three priority levels, each with due
    // jobs and jobs delayed by 10 or 20 s (two of those sharing a run_at too).
    let mut made = Vec::new();
    for _ in 0..3 {
        let jobs = (0..30)
            .map(|i| {
                let job = NewJob::new("q", "x").priority([2, 0, -7][i % 3]);
                match i % 5 {
                    3 => job.delay(Duration::from_secs(10)),
                    4 => job.delay(Duration::from_secs(20)),
                    _ => job,
                }
            })
            .collect();
        made.extend(enqueue(&broker, jobs).await);
        enqueue(&broker, vec![NewJob::new("other", "x")]).await;
        advance(Duration::from_millis(1)).await;
    }
    let mut waiting = records(&broker, &made).await;
    waiting.sort_by_key(|r| (-r.job.priority, r.job.run_at, r.job.id));
    let scheduled_at = waiting[0].job.run_at + 10_000;
    let (due, later): (Vec<_>, Vec<_>) = waiting.iter().partition(|r| r.job.run_at < scheduled_at);
    let ids = |rs: &[&JobRecord]| rs.iter().map(|r| r.job.id).collect::<Vec<_>>();
    check(&broker, ListState::Pending, &ids(&due)).await;
    check(&broker, ListState::Scheduled, &ids(&later)).await;

    // Leased: two fetches at one instant under different leases, each sharing its expiry.
    let short = fetch(&broker, "q", 10, Duration::from_secs(30)).await;
    let long = fetch(&broker, "q", 10, Duration::from_secs(60)).await;
    let mut leased: Vec<JobId> = short.jobs.iter().map(|j| j.id).collect();
    leased.sort();
    let mut longer: Vec<JobId> = long.jobs.iter().map(|j| j.id).collect();
    longer.sort();
    leased.extend(longer);
    check(&broker, ListState::Leased, &leased).await;

    // Dead: the short lease's jobs in one settlement (one finished_at), then the long's.
    let mut dead = Vec::new();
    for fetched in [&short, &long] {
        let settlements: Vec<Settlement> = fetched
            .jobs
            .iter()
            .map(|j| Settlement {
                job: j.id,
                lease: fetched.lease,
                outcome: Outcome::DeadLetter {
                    error: "broken".into(),
                },
            })
            .collect();
        broker.settle(settlements).await.unwrap();
        let mut ids: Vec<JobId> = fetched.jobs.iter().map(|j| j.id).collect();
        ids.sort();
        dead.extend(ids);
        advance(Duration::from_millis(1)).await;
    }
    check(&broker, ListState::Dead, &dead).await;

    // Cancelled: three at one instant.
    let page = broker
        .list_jobs(&JobQuery::new("q", ListState::Pending, 3))
        .await
        .unwrap();
    let mut cancelled = Vec::new();
    for record in &page.jobs {
        broker.cancel(record.job.id).await.unwrap();
        cancelled.push(record.job.id);
    }
    cancelled.sort();
    check(&broker, ListState::Cancelled, &cancelled).await;
    check(&broker, ListState::Completed, &[]).await;

    let other = broker
        .list_jobs(&JobQuery::new("other", ListState::Pending, 10))
        .await
        .unwrap();
    assert_eq!(other.jobs.len(), 3, "the other queue's own");
}
