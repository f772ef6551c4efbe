//! Bounded counts (`queue_glance`) where the suite's jobs do not go: several priority
//! levels, each holding due and delayed jobs, so that a count's limit is used up across
//! levels, beside leased jobs, dead letters and another queue's jobs. At every bound each
//! count is the exact one, or `bound + 1` when that is more.

use std::time::Duration;

use hopper_core::{NewJob, Outcome, QueueCounts, Settlement};
use hopper_testkit::helpers::{enqueue, fetch};
use tokio::time::advance;

use super::support::temp_broker;

fn cut(exact: QueueCounts, bound: u64) -> QueueCounts {
    let cut = |n: u64| n.min(bound.saturating_add(1));
    QueueCounts {
        pending: cut(exact.pending),
        scheduled: cut(exact.scheduled),
        leased: cut(exact.leased),
        dead: cut(exact.dead),
    }
}

#[tokio::test(start_paused = true)]
async fn counts_are_cut_at_the_bound_across_priority_levels() {
    let broker = temp_broker().await;
    // Four levels, each with due jobs and jobs delayed by a minute.
    let jobs = (0..60)
        .map(|i| {
            let job = NewJob::new("q", "x").priority([5, 1, 0, -3][i % 4]);
            if i % 3 == 0 {
                job.delay(Duration::from_secs(60))
            } else {
                job
            }
        })
        .collect();
    enqueue(&broker, jobs).await;
    enqueue(&broker, vec![NewJob::new("other", "x"); 30]).await;
    advance(Duration::from_secs(1)).await;
    let held = fetch(&broker, "q", 6, Duration::from_secs(600)).await;
    let dead: Vec<Settlement> = held.jobs[..4]
        .iter()
        .map(|j| Settlement {
            job: j.id,
            lease: held.lease,
            outcome: Outcome::DeadLetter {
                error: "broken".into(),
            },
        })
        .collect();
    broker.settle(dead).await.unwrap();

    let full = broker.queue_stats("q").await.unwrap();
    let exact = QueueCounts {
        pending: 34,
        scheduled: 20,
        leased: 2,
        dead: 4,
    };
    assert_eq!(full.counts, exact);
    assert_eq!(full.bound, None);
    for bound in (0..=40).chain([u64::MAX - 1, u64::MAX]) {
        let glance = broker.queue_glance("q", bound).await.unwrap();
        assert_eq!(glance.bound, Some(bound));
        assert_eq!(glance.counts, cut(exact, bound), "bound {bound}");
        assert_eq!(
            (
                glance.lag,
                glance.paused,
                glance.last_minute,
                glance.last_hour
            ),
            (full.lag, full.paused, full.last_minute, full.last_hour),
            "bound {bound}"
        );
    }
    let empty = broker.queue_glance("none", 10).await.unwrap();
    assert_eq!(empty.counts, QueueCounts::default());
}
