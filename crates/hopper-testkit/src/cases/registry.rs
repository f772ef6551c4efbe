//! Live workers and throughput buckets, as [`Broker::heartbeat`] stores them.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::registry::{BUCKET, bucket_of};
use hopper_core::{Broker, QueueBeat, ScheduleBeat, Throughput, WorkerBeat, WorkerInfo};
use tokio::time::advance;

use super::admin::not_supported;

fn settled(completed: u64, failed: u64, dead: u64) -> Throughput {
    Throughput {
        completed,
        failed,
        dead,
    }
}

fn worker(id: &str, started_at: i64, queues: Vec<QueueBeat>) -> WorkerInfo {
    WorkerInfo {
        id: id.to_owned(),
        host: "host-1".to_owned(),
        pid: 4242,
        started_at,
        heartbeat_at: 0,
        expires_at: 0,
        queues,
        schedules: Vec::new(),
    }
}

fn beat(w: &WorkerInfo, ttl_s: u64, settled: Vec<(&str, Throughput)>) -> WorkerBeat {
    WorkerBeat {
        worker: w.clone(),
        ttl: Duration::from_secs(ttl_s),
        settled: settled
            .into_iter()
            .map(|(q, t)| (q.to_owned(), t))
            .collect(),
    }
}

async fn report(broker: &Arc<dyn Broker>, beat: &WorkerBeat) {
    broker
        .heartbeat(beat)
        .await
        .unwrap_or_else(|e| panic!("heartbeat of {} failed: {e:?}", beat.worker.id));
}

async fn listed(broker: &Arc<dyn Broker>) -> Vec<WorkerInfo> {
    broker.workers().await.expect("workers()")
}

/// Two workers report; each is listed as reported, with the broker's times, until its
/// report expires; a stopped one is removed. What they settled lands in 10-second buckets,
/// summed over the last minute and hour by `queue_stats`, and ages out of both.
pub async fn workers_and_throughput(broker: Arc<dyn Broker>) {
    if !broker.capabilities().admin.workers {
        let w = worker("w", 0, vec![]);
        not_supported(broker.heartbeat(&beat(&w, 30, vec![])).await, "heartbeat");
        not_supported(broker.workers().await, "workers");
        return not_supported(broker.throughput("q").await, "throughput");
    }
    assert!(listed(&broker).await.is_empty(), "a fresh broker");
    // Start a bucket's width from its edge, so both first reports share a bucket.
    let clock = hopper_core::Clock::tokio();
    let into_bucket = clock.now_millis() - bucket_of(clock.now_millis());
    // The broker's clock and this one follow the same paused time from anchors taken a
    // moment apart: 100 ms in, both are in the same bucket.
    advance(BUCKET - Duration::from_millis(into_bucket as u64) + Duration::from_millis(100)).await;
    let t0 = clock.now_millis();

    let q1 = QueueBeat {
        queue: "q1".into(),
        concurrency: 4,
        held: 3,
        running: 2,
        window: 8,
        paused: false,
        fetches: vec![1, 1, 2, 2, 4],
        lease_expires_at: Some(1_000),
    };
    let nightly = ScheduleBeat {
        name: "nightly".into(),
        queue: "reports".into(),
        spec: "0 3 * * * (Europe/Paris)".into(),
        next_at: Some(t0 + 60_000),
        last_at: Some(t0 - 86_340_000),
    };
    let a = WorkerInfo {
        schedules: vec![nightly.clone()],
        ..worker("host-1:4242:a", t0 - 5000, vec![q1.clone()])
    };
    let b = worker("host-1:4243:b", t0 - 1000, vec![]);
    report(&broker, &beat(&b, 10, vec![("q2", settled(7, 0, 0))])).await;
    report(&broker, &beat(&a, 30, vec![("q1", settled(5, 2, 1))])).await;
    let now = listed(&broker).await;
    assert_eq!(
        now.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(),
        ["host-1:4242:a", "host-1:4243:b"],
        "oldest first"
    );
    assert_eq!((now[0].host.as_str(), now[0].pid), ("host-1", 4242));
    assert_eq!(now[0].queues, vec![q1.clone()], "queues as reported");
    assert_eq!(now[0].schedules, vec![nightly], "schedules as reported");
    assert!(now[1].schedules.is_empty(), "no schedules");
    assert_eq!(now[0].started_at, t0 - 5000);
    assert!(
        (t0 - 100..t0 + 100).contains(&now[0].heartbeat_at),
        "heartbeat_at {} is the broker's now ({t0})",
        now[0].heartbeat_at
    );
    assert_eq!(
        now[0].expires_at - now[0].heartbeat_at,
        30_000,
        "ttl of 30 s"
    );
    assert_eq!(
        now[1].expires_at - now[1].heartbeat_at,
        10_000,
        "ttl of 10 s"
    );

    advance(Duration::from_secs(11)).await;
    let busier = QueueBeat {
        held: 9,
        ..q1.clone()
    };
    let a2 = WorkerInfo {
        queues: vec![busier.clone()],
        ..a.clone()
    };
    report(&broker, &beat(&a2, 30, vec![("q1", settled(3, 0, 0))])).await;
    let now = listed(&broker).await;
    assert_eq!(now.len(), 1, "b's report expired after 10 s: {now:?}");
    assert_eq!(
        now[0].queues,
        vec![busier],
        "the latest report replaces the last"
    );

    let buckets = broker.throughput("q1").await.expect("throughput");
    assert_eq!(
        buckets.len(),
        2,
        "a bucket per 10 s that settled anything: {buckets:?}"
    );
    assert!(buckets[0].at < buckets[1].at, "oldest first");
    assert_eq!(
        (buckets[0].counts, buckets[1].counts),
        (settled(5, 2, 1), settled(3, 0, 0))
    );
    assert_eq!(buckets[0].at % 10_000, 0, "buckets start on 10 s");
    let q1_now = broker.queue_stats("q1").await.expect("queue_stats");
    assert_eq!(q1_now.last_minute, Some(settled(8, 2, 1)));
    assert_eq!(q1_now.last_hour, Some(settled(8, 2, 1)));
    let q2 = broker.queue_stats("q2").await.expect("queue_stats");
    assert_eq!(
        q2.last_minute,
        Some(settled(7, 0, 0)),
        "an expired worker's counts stay"
    );

    advance(Duration::from_secs(60)).await;
    let q1_later = broker.queue_stats("q1").await.unwrap();
    assert_eq!(
        q1_later.last_minute,
        Some(settled(0, 0, 0)),
        "a minute later"
    );
    assert_eq!(q1_later.last_hour, Some(settled(8, 2, 1)));
    assert!(
        listed(&broker).await.is_empty(),
        "a's 30 s report expired too"
    );

    advance(Duration::from_secs(3600)).await;
    let q1_gone = broker.queue_stats("q1").await.unwrap();
    assert_eq!(q1_gone.last_hour, Some(settled(0, 0, 0)), "an hour later");
    assert!(broker.throughput("q1").await.unwrap().is_empty());

    report(&broker, &beat(&a, 30, vec![])).await;
    assert_eq!(listed(&broker).await.len(), 1, "a reports again");
    assert!(broker.deregister(&a.id).await.unwrap(), "a stopped");
    assert!(listed(&broker).await.is_empty());
    assert!(!broker.deregister(&a.id).await.unwrap(), "already gone");

    let nameless = worker("", 0, vec![]);
    let err = broker
        .heartbeat(&beat(&nameless, 30, vec![]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("worker id"), "{err}");
}
