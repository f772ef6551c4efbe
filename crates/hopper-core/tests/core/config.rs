//! Every refused configuration names the setting, the value and what is allowed.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, JobContext, Prefetch, QueueOptions, RetryPolicy, Worker};

use super::support::memory;

async fn noop(_job: JobContext<u64>) -> hopper_core::JobResult {
    Ok(())
}

fn refused(broker: Arc<dyn Broker>, opts: QueueOptions) -> String {
    Worker::builder(broker)
        .queue("q", opts, noop)
        .start()
        .unwrap_err()
        .to_string()
}

#[tokio::test]
async fn a_window_of_zero_is_refused() {
    let (_, b) = memory();
    assert_eq!(
        refused(b, QueueOptions::new().prefetch(Prefetch::Fixed(0))),
        "invalid prefetch of queue q `0`: allowed: a window of 1 or more (or `slots`, `auto`)"
    );
}

#[tokio::test]
async fn max_batch_outside_one_to_a_thousand_is_refused() {
    let (_, b) = memory();
    assert_eq!(
        refused(b.clone(), QueueOptions::new().max_batch(0)),
        "invalid max_batch of queue q `0`: allowed: 1..=1000"
    );
    assert_eq!(
        refused(b, QueueOptions::new().max_batch(1001)),
        "invalid max_batch of queue q `1001`: allowed: 1..=1000"
    );
}

#[tokio::test]
async fn a_window_above_one_without_lease_renewal_is_refused() {
    let (_, b) = memory();
    let err = Worker::builder(b.clone())
        .lease_renewal(false)
        .queue(
            "q",
            QueueOptions::new().concurrency(4).prefetch(Prefetch::Slots),
            noop,
        )
        .start()
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "invalid lease_renewal `off`: allowed: on, because queue q may hold up to 4 jobs"
        ),
        "{err}"
    );
    // A window of one is fine without renewal.
    let ok = Worker::builder(b)
        .lease_renewal(false)
        .queue(
            "q",
            QueueOptions::new()
                .concurrency(1)
                .prefetch(Prefetch::Fixed(1)),
            noop,
        )
        .start()
        .unwrap();
    ok.shutdown_with(Duration::ZERO).await;
}

#[tokio::test]
async fn an_unknown_prefetch_word_is_refused() {
    let err = "eager".parse::<Prefetch>().unwrap_err().to_string();
    assert_eq!(
        err,
        "invalid prefetch `eager`: allowed: `slots`, `auto`, or a number from 1 up"
    );
}

#[tokio::test]
async fn other_bad_settings_are_refused_by_name() {
    let (_, b) = memory();
    assert_eq!(
        refused(b.clone(), QueueOptions::new().concurrency(0)),
        "invalid concurrency of queue q `0`: allowed: 1 or more"
    );
    let err = Worker::builder(b.clone())
        .queue("bad name!", QueueOptions::new(), noop)
        .start()
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "invalid queue `bad name!`: allowed: 1 to 128 characters from A-Z a-z 0-9 _ . : -"
    );
    let err = Worker::builder(b.clone()).start().unwrap_err().to_string();
    assert_eq!(
        err,
        "invalid queues `none`: allowed: at least one queue with a handler, or a schedule"
    );
    let err = Worker::builder(b.clone())
        .retry(RetryPolicy {
            jitter: 1.5,
            ..RetryPolicy::default()
        })
        .queue("q", QueueOptions::new(), noop)
        .start()
        .unwrap_err()
        .to_string();
    assert_eq!(err, "invalid retry.jitter `1.5`: allowed: 0.0 to 1.0");
    let err = b
        .enqueue(vec![hopper_core::NewJob::new("", b"1".to_vec())])
        .await
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("invalid queue ``"), "{err}");
}
