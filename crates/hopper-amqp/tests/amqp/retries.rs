//! Retries come back after their delay with the attempt raised; after max attempts, and at
//! once for a payload that does not decode, a job goes to the dead-letter queue carrying
//! its last error.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hopper_amqp::topology::dead_queue;
use hopper_amqp::wire::{ATTEMPT, ERROR};
use hopper_core::{Broker, JobContext, JobError, NewJob, QueueOptions, Worker};
use lapin::options::BasicGetOptions;
use lapin::types::AMQPValue;

use super::support::{setup, url, wait_for};

/// Reads one message from `queue` with a plain lapin client: body and headers.
pub(super) async fn get_one(queue: &str) -> Option<(Vec<u8>, lapin::types::FieldTable)> {
    let conn = lapin::Connection::connect(&url(), lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    let got = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap();
    let _ = conn.close(200, "done".into()).await;
    got.map(|m| {
        let headers = m.delivery.properties.headers().clone().unwrap_or_default();
        (m.delivery.data, headers)
    })
}

pub(super) fn text(v: Option<&AMQPValue>) -> String {
    match v {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        other => format!("{other:?}"),
    }
}

pub(super) fn int(v: Option<&AMQPValue>) -> i64 {
    match v {
        Some(AMQPValue::LongLongInt(n)) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

#[tokio::test]
async fn a_retry_returns_after_its_delay_with_the_attempt_raised() {
    let s = setup("retry_delay").await;
    s.broker
        .enqueue(vec![NewJob::json(&s.queue, &7u64).unwrap()])
        .await
        .unwrap();
    let runs: Arc<Mutex<Vec<(u32, Instant)>>> = Arc::default();
    let r = runs.clone();
    let worker = Worker::builder(s.dyn_broker())
        .queue(
            &s.queue,
            QueueOptions::new().concurrency(1),
            move |job: JobContext<u64>| {
                r.lock().unwrap().push((job.job.attempt, Instant::now()));
                let attempt = job.job.attempt;
                async move {
                    if attempt == 1 {
                        Err(JobError::retry_after("not yet", Duration::from_millis(500)))
                    } else {
                        Ok(())
                    }
                }
            },
        )
        .start()
        .unwrap();
    wait_for(&worker, 15, "the retried job to complete", |s| {
        s.completed == 1
    })
    .await;
    worker.shutdown().await;
    let runs = runs.lock().unwrap().clone();
    assert_eq!(
        runs.iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![1, 2],
        "attempts"
    );
    let gap = runs[1].1 - runs[0].1;
    assert!(
        gap >= Duration::from_millis(500),
        "came back after {gap:?}, before its 500 ms"
    );
    assert!(
        gap < Duration::from_millis(3000),
        "came back only after {gap:?}"
    );
}

#[tokio::test]
async fn after_five_attempts_the_job_is_dead_lettered_with_its_last_error() {
    let s = setup("retry_max").await;
    s.broker
        .enqueue(vec![NewJob::json(&s.queue, &1u64).unwrap().max_attempts(5)])
        .await
        .unwrap();
    let attempts: Arc<Mutex<Vec<u32>>> = Arc::default();
    let a = attempts.clone();
    let worker = Worker::builder(s.dyn_broker())
        .queue(
            &s.queue,
            QueueOptions::new().concurrency(1),
            move |job: JobContext<u64>| {
                a.lock().unwrap().push(job.job.attempt);
                let attempt = job.job.attempt;
                async move {
                    Err(JobError::retry_after(
                        format!("failure {attempt}"),
                        Duration::from_millis(20),
                    ))
                }
            },
        )
        .start()
        .unwrap();
    wait_for(&worker, 20, "five attempts and a dead letter", |s| {
        s.dead == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stats = worker.shutdown().await;
    assert_eq!(
        *attempts.lock().unwrap(),
        vec![1, 2, 3, 4, 5],
        "no sixth run"
    );
    assert_eq!((stats.retried, stats.dead), (4, 1));
    let counts = s.broker.counts(&s.queue).await.unwrap();
    assert_eq!((counts.pending, counts.dead), (0, 1), "counts: {counts:?}");
    let (body, headers) = get_one(&dead_queue(&s.queue)).await.expect("a dead letter");
    assert_eq!(body, b"1");
    let h = headers.inner();
    assert_eq!(text(h.get(ERROR)), "failure 5", "the last error");
    assert_eq!(int(h.get(ATTEMPT)), 5, "attempts charged");
}

#[tokio::test]
async fn a_payload_that_does_not_decode_is_dead_lettered_at_once() {
    let s = setup("retry_decode").await;
    s.broker
        .enqueue(vec![NewJob::new(&s.queue, b"not json".to_vec())])
        .await
        .unwrap();
    let ran = Arc::new(Mutex::new(0));
    let r = ran.clone();
    let worker = Worker::builder(s.dyn_broker())
        .queue(
            &s.queue,
            QueueOptions::new(),
            move |_job: JobContext<u64>| {
                *r.lock().unwrap() += 1;
                async { Ok(()) }
            },
        )
        .start()
        .unwrap();
    wait_for(&worker, 10, "a dead letter", |s| s.dead == 1).await;
    let stats = worker.shutdown().await;
    assert_eq!(
        (*ran.lock().unwrap(), stats.retried),
        (0, 0),
        "never ran, never retried"
    );
    let mut dead = None;
    for _ in 0..50 {
        dead = get_one(&dead_queue(&s.queue)).await;
        if dead.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (body, headers) = dead.expect("a dead letter");
    assert_eq!(body, b"not json");
    let error = text(headers.inner().get(ERROR));
    assert!(error.starts_with("payload does not decode: "), "{error}");
    assert_eq!(int(headers.inner().get(ATTEMPT)), 1);
}

#[tokio::test]
async fn a_delayed_job_waits_on_the_server() {
    let s = setup("retry_delayed").await;
    let enqueued = Instant::now();
    s.broker
        .enqueue(vec![
            NewJob::json(&s.queue, &3u64)
                .unwrap()
                .delay(Duration::from_millis(400)),
        ])
        .await
        .unwrap();
    let counts = s.broker.counts(&s.queue).await.unwrap();
    assert_eq!(
        (counts.pending, counts.scheduled),
        (0, 1),
        "scheduled in its retry queue"
    );
    let at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let a = at.clone();
    let worker = Worker::builder(s.dyn_broker())
        .queue(
            &s.queue,
            QueueOptions::new(),
            move |_job: JobContext<u64>| {
                *a.lock().unwrap() = Some(Instant::now());
                async { Ok(()) }
            },
        )
        .start()
        .unwrap();
    wait_for(&worker, 10, "the delayed job", |s| s.completed == 1).await;
    worker.shutdown().await;
    let ran = at.lock().unwrap().expect("ran") - enqueued;
    assert!(
        ran >= Duration::from_millis(400),
        "ran after {ran:?}, before its delay"
    );
}
