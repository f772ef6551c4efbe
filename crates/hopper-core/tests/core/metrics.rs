//! The worker's metrics: what a recorder installed before the worker starts receives,
//! counted against a run whose outcomes are known.

use std::time::Duration;

use hopper_core::{JobContext, JobError, NewJob, QueueOptions, RetryPolicy, Worker};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::{CompositeKey, MetricKind};

use super::support::{memory, wait_for};

fn label(key: &CompositeKey, name: &str) -> Option<String> {
    key.key()
        .labels()
        .find(|l| l.key() == name)
        .map(|l| l.value().to_owned())
}

#[tokio::test(start_paused = true)]
async fn counters_and_histograms_match_the_run() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let (_, broker) = memory();
    // 0..10: multiples of 3 fail twice (retried once, then dead at their second attempt);
    // the rest succeed after 50 ms. The queue is paused until 2 s after they were due.
    let worker = Worker::builder(broker.clone())
        .retry(RetryPolicy {
            base: Duration::from_millis(100),
            factor: 1.0,
            jitter: 0.0,
            ..RetryPolicy::default()
        })
        .queue(
            "q",
            QueueOptions::new().concurrency(2),
            |job: JobContext<u64>| async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                match job.payload % 3 {
                    0 => Err(JobError::retry("multiple of three")),
                    _ => Ok(()),
                }
            },
        )
        .start()
        .unwrap();
    worker.pause("q").await.unwrap();
    let jobs = (0..10u64)
        .map(|i| NewJob::json("q", &i).unwrap().max_attempts(2))
        .collect();
    broker.enqueue(jobs).await.unwrap();
    tokio::time::advance(Duration::from_secs(2)).await;
    worker.resume("q").await.unwrap();
    let stats = wait_for(&worker, |s| s.completed + s.dead == 10).await;
    worker.shutdown().await;
    assert_eq!((stats.completed, stats.retried, stats.dead), (6, 4, 4));

    let mut counters = std::collections::BTreeMap::new();
    let mut histograms = std::collections::BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let name = key.key().name().to_owned();
        if name.starts_with("hopper_jobs")
            || name.starts_with("hopper_job_")
            || name == "hopper_fetch_size"
        {
            assert_eq!(label(&key, "queue").as_deref(), Some("q"), "{name}");
        }
        assert_eq!(label(&key, "broker").as_deref(), Some("memory"), "{name}");
        match (key.kind(), value) {
            (MetricKind::Counter, DebugValue::Counter(n)) => {
                counters.insert(name, n);
            }
            (MetricKind::Histogram, DebugValue::Histogram(values)) => {
                let values: Vec<f64> = values.into_iter().map(|v| v.into_inner()).collect();
                histograms.insert(name, values);
            }
            other => panic!("unexpected {name}: {other:?}"),
        }
    }
    assert_eq!(counters["hopper_jobs_enqueued_total"], 10);
    assert_eq!(counters["hopper_jobs_completed_total"], 6);
    assert_eq!(counters["hopper_jobs_retried_total"], 4);
    assert_eq!(counters["hopper_jobs_dead_total"], 4);
    assert_eq!(
        counters["hopper_jobs_fetched_total"], 14,
        "10 first attempts, 4 second"
    );
    assert_eq!(counters["hopper_jobs_released_total"], 0);
    let sizes = &histograms["hopper_fetch_size"];
    assert_eq!(
        sizes.iter().sum::<f64>(),
        14.0,
        "fetch sizes add up to the jobs fetched"
    );
    let durations = &histograms["hopper_job_duration_seconds"];
    assert_eq!(durations.len(), 14, "one duration per attempt");
    assert!(
        durations.iter().all(|d| (*d - 0.05).abs() < 1e-9),
        "{durations:?}"
    );
    let delays = &histograms["hopper_job_start_delay_seconds"];
    assert_eq!(delays.len(), 14, "one start delay per attempt");
    // The first two started at once, 2 s after they were due.
    assert!(
        delays.iter().filter(|d| (**d - 2.0).abs() < 0.002).count() >= 2,
        "{delays:?}"
    );
}

/// A duplicate of a unique key is not enqueued, and is not counted as enqueued.
#[tokio::test(start_paused = true)]
async fn duplicates_are_not_counted_as_enqueued() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let (_, broker) = memory();
    let keyed = || NewJob::new("q", b"1".to_vec()).unique_key("k");
    let plain = NewJob::new("q", b"2".to_vec());
    let other = NewJob::new("r", b"3".to_vec());
    broker
        .enqueue(vec![keyed(), keyed(), plain, other])
        .await
        .unwrap();
    broker.enqueue(vec![keyed()]).await.unwrap();
    let mut enqueued = std::collections::BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        if let DebugValue::Counter(n) = value {
            if key.key().name() == "hopper_jobs_enqueued_total" {
                enqueued.insert(label(&key, "queue").unwrap(), n);
            }
        }
    }
    assert_eq!(enqueued, [("q".into(), 2), ("r".into(), 1)].into());
}
