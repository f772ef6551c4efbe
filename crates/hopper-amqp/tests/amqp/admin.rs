//! The operator calls against the real server, from a second broker on its own connection
//! (as the `hopper` command would be): statistics from passive declares, dead letters sent
//! back or discarded a chunk at a time, and pauses every worker on the virtual host obeys,
//! running or started later.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hopper_amqp::AmqpOptions;
use hopper_amqp::wire;
use hopper_core::{
    Broker, Error, JobContext, JobId, Outcome, Prefetch, QueueCounts, QueueOptions, Selection,
    Settlement, Worker,
};
use lapin::message::Delivery;
use lapin::options::BasicGetOptions;
use lapin::types::AMQPValue;

use super::support::{Setup, another, enqueue_n, eventually, fetch_until, setup, url, wait_for};

fn counts(pending: u64, scheduled: u64, leased: u64, dead: u64) -> QueueCounts {
    QueueCounts {
        pending,
        scheduled,
        leased,
        dead,
    }
}

/// Dead-letters `n` jobs of the test's queue, each on its second attempt with the error
/// `broken <payload>`; returns their payloads in the order they died.
async fn make_dead(s: &Setup, n: usize) -> Vec<u64> {
    enqueue_n(&s.broker, &s.queue, n).await;
    let b = s.dyn_broker();
    b.subscribe(&s.queue, Some(n as u32)).await.unwrap();
    let first = fetch_until(&b, &s.queue, n, 10).await;
    assert_eq!(first.len(), n, "first attempts");
    let retry = |j: &hopper_core::Job| Settlement {
        job: j.id,
        lease: j.lease,
        outcome: Outcome::Retry {
            delay: Duration::ZERO,
            error: "first try".into(),
            step_aside: false,
        },
    };
    b.settle(first.iter().map(retry).collect()).await.unwrap();
    let second = fetch_until(&b, &s.queue, n, 10).await;
    assert_eq!(second.len(), n, "second attempts");
    assert!(second.iter().all(|j| j.attempt == 2));
    let order: Vec<u64> = second.iter().map(|j| j.decode().unwrap()).collect();
    let dead = |j: &hopper_core::Job| Settlement {
        job: j.id,
        lease: j.lease,
        outcome: Outcome::DeadLetter {
            error: format!("broken {}", j.decode::<u64>().unwrap()),
        },
    };
    let report = b.settle(second.iter().map(dead).collect()).await.unwrap();
    assert_eq!(report.applied, n);
    b.unsubscribe(&s.queue).await.unwrap();
    order
}

/// Takes (and acknowledges) up to `n` messages from `queue` with a client of its own.
async fn take_raw(queue: &str, n: usize) -> Vec<Delivery> {
    let conn = lapin::Connection::connect(&url(), lapin::ConnectionProperties::default())
        .await
        .expect("connect");
    let ch = conn.create_channel().await.unwrap();
    let mut taken = Vec::new();
    for _ in 0..n {
        let get = ch
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap();
        match get {
            Some(m) => taken.push(m.delivery),
            None => break,
        }
    }
    let _ = conn.close(200, "taken".into()).await;
    taken
}

fn header<'a>(d: &'a Delivery, name: &str) -> Option<&'a AMQPValue> {
    d.properties.headers().as_ref()?.inner().get(name)
}

#[tokio::test]
async fn queue_stats_give_the_depths_of_the_ready_retry_and_dead_letter_queues() {
    let s = setup("st_depth").await;
    make_dead(&s, 2).await;
    enqueue_n(&s.broker, &s.queue, 4).await;
    let delayed = |secs: u64, n: u64| -> Vec<hopper_core::NewJob> {
        (0..n)
            .map(|i| {
                hopper_core::NewJob::json(&s.queue, &i)
                    .unwrap()
                    .delay(Duration::from_secs(secs))
            })
            .collect()
    };
    // Two retry queues: 3 jobs wait a minute, 2 wait ten.
    s.broker.enqueue(delayed(60, 3)).await.unwrap();
    s.broker.enqueue(delayed(600, 2)).await.unwrap();

    // An operator that never declared or used the queue sees every retry bucket.
    let operator = another(AmqpOptions::new()).await;
    let st = operator.queue_stats(&s.queue).await.unwrap();
    assert_eq!(st.queue, s.queue);
    assert_eq!(st.counts, counts(4, 5, 0, 2), "ready, retry, dead");
    assert!(!st.paused);
    assert_eq!((st.lag, st.last_minute, st.last_hour), (None, None, None));

    // What this process holds unsettled is what it can count as leased.
    let b = s.dyn_broker();
    b.subscribe(&s.queue, Some(3)).await.unwrap();
    let held = fetch_until(&b, &s.queue, 3, 10).await;
    assert_eq!(held.len(), 3);
    let st = b.queue_stats(&s.queue).await.unwrap();
    assert_eq!(st.counts, counts(1, 5, 3, 2), "three delivered here");
    b.settle(held.iter().map(Settlement::ack).collect())
        .await
        .unwrap();
    b.unsubscribe(&s.queue).await.unwrap();

    let missing = hopper_testkit::unique_name("st_missing");
    let none = operator.queue_stats(&missing).await.unwrap();
    assert_eq!((none.counts, none.paused), (counts(0, 0, 0, 0), false));

    let err = operator.queues().await.unwrap_err();
    assert!(matches!(err, Error::NotSupported { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "amqp broker does not support listing queues (AMQP cannot enumerate a server's \
         queues; name the queue)"
    );
    let caps = operator.capabilities().admin;
    assert!(caps.redrive && caps.pause && caps.stats && !caps.list && !caps.throughput);
    operator.close().await;
}

#[tokio::test]
async fn dead_letters_go_back_oldest_first_a_chunk_at_a_time_with_attempts_reset() {
    let s = setup("st_redrive").await;
    let died = make_dead(&s, 5).await;
    let dead_queue = hopper_amqp::topology::dead_queue(&s.queue);
    let chunk = |at_most| Selection::Queue {
        queue: s.queue.clone(),
        at_most,
    };

    // Without the work queue (deleted, and an operator that declares nothing) no copy is
    // taken: the dead letters stay.
    let plain = another(AmqpOptions::new()).await;
    plain
        .delete_queues(std::slice::from_ref(&s.queue))
        .await
        .unwrap();
    let err = plain.retry_dead(&chunk(3)).await.unwrap_err();
    assert!(err.to_string().contains("no queue took"), "{err}");
    assert_eq!(plain.queue_stats(&s.queue).await.unwrap().counts.dead, 5);

    let operator = another(AmqpOptions::new().declare(true)).await;
    assert_eq!(operator.retry_dead(&chunk(3)).await.unwrap(), 3);
    let st = operator.queue_stats(&s.queue).await.unwrap();
    assert_eq!(st.counts, counts(3, 0, 0, 2), "3 back, 2 still dead");

    let back = take_raw(&s.queue, 10).await;
    let payloads: Vec<u64> = back
        .iter()
        .map(|d| serde_json::from_slice(&d.data).unwrap())
        .collect();
    assert_eq!(payloads, died[..3], "the oldest three, in order");
    for d in back {
        let n: u64 = serde_json::from_slice(&d.data).unwrap();
        assert!(header(&d, wire::ATTEMPT).is_none(), "attempts reset");
        assert!(header(&d, wire::QUEUE).is_none(), "no longer a dead letter");
        let error = header(&d, wire::ERROR).expect("the error is kept");
        assert_eq!(
            error,
            &AMQPValue::LongString(format!("broken {n}").into_bytes().into())
        );
        let job = wire::decode(d, &s.queue, 1, hopper_amqp::QueueKind::Classic, wire_now());
        assert_eq!(job.attempt, 1, "runs as a first attempt");
    }

    let by_id = Selection::Jobs(vec![JobId(1)]);
    for (call, err) in [
        ("retry", operator.retry_dead(&by_id).await.unwrap_err()),
        ("discard", operator.discard_dead(&by_id).await.unwrap_err()),
    ] {
        assert!(matches!(err, Error::NotSupported { .. }), "{call}: {err:?}");
        assert!(err.to_string().contains("by its id"), "{call}: {err}");
    }

    // The broker that declared the queue before it was deleted declares it again.
    plain
        .delete_queues(std::slice::from_ref(&s.queue))
        .await
        .unwrap();
    assert_eq!(s.broker.retry_dead(&chunk(1)).await.unwrap(), 1);
    let again = take_raw(&s.queue, 10).await;
    assert_eq!(again.len(), 1);
    assert_eq!(
        serde_json::from_slice::<u64>(&again[0].data).unwrap(),
        died[3]
    );

    assert_eq!(operator.discard_dead(&chunk(100)).await.unwrap(), 1);
    assert_eq!(operator.discard_dead(&chunk(100)).await.unwrap(), 0);
    assert_eq!(operator.retry_dead(&chunk(100)).await.unwrap(), 0);
    assert_eq!(
        operator.queue_stats(&s.queue).await.unwrap().counts,
        counts(0, 0, 0, 0)
    );
    assert!(take_raw(&dead_queue, 1).await.is_empty());
    // A queue that never had a dead-letter queue has nothing to take.
    let never = Selection::Queue {
        queue: hopper_testkit::unique_name("st_never"),
        at_most: 10,
    };
    assert_eq!(plain.discard_dead(&never).await.unwrap(), 0);
    plain.close().await;
    operator.close().await;
}

fn wire_now() -> i64 {
    hopper_core::job::to_millis(std::time::SystemTime::now())
}

/// The start time of every job a worker ran.
#[derive(Default)]
struct Starts(Mutex<Vec<Instant>>);

impl Starts {
    fn after(&self, t: Instant) -> usize {
        self.0.lock().unwrap().iter().filter(|&&at| at > t).count()
    }
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// A worker on `broker` running `queue` with a small window, each job 10 ms.
fn worker(broker: Arc<dyn Broker>, queue: &str, starts: &Arc<Starts>) -> Worker {
    let starts = starts.clone();
    Worker::builder(broker)
        .queue(
            queue,
            QueueOptions::new()
                .concurrency(2)
                .prefetch(Prefetch::Fixed(2)),
            move |_job: JobContext<u64>| {
                starts.0.lock().unwrap().push(Instant::now());
                async {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    Ok(())
                }
            },
        )
        .start()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_from_another_process_stops_a_running_worker_until_resumed() {
    let s = setup("pause_live").await;
    enqueue_n(&s.broker, &s.queue, 3000).await;
    let starts = Arc::new(Starts::default());
    let w = worker(s.dyn_broker(), &s.queue, &starts);
    eventually(10, "the worker to run 20 jobs", || starts.len() >= 20).await;

    let operator = another(AmqpOptions::new()).await;
    assert!(operator.set_paused(&s.queue, true).await.unwrap());
    let paused_at = Instant::now();
    assert!(!operator.set_paused(&s.queue, true).await.unwrap(), "again");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let pending = operator.queue_stats(&s.queue).await.unwrap();
    assert!(pending.paused);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later = operator.queue_stats(&s.queue).await.unwrap();
    assert_eq!(
        later.counts.pending, pending.counts.pending,
        "nothing taken while paused"
    );
    let late = starts.after(paused_at + Duration::from_secs(1));
    let in_window = starts.after(paused_at);
    assert_eq!(late, 0, "jobs started more than a second after the pause");
    // What was already pushed into the window of 2 (and what the acks of those running
    // let through before the announcement arrived) may still run.
    assert!(in_window <= 6, "{in_window} started after the pause");

    let before = starts.len();
    assert!(operator.set_paused(&s.queue, false).await.unwrap());
    assert!(
        !operator.set_paused(&s.queue, false).await.unwrap(),
        "again"
    );
    eventually(2, "jobs to start again after the resume", || {
        starts.len() >= before + 5
    })
    .await;
    assert!(!operator.queue_stats(&s.queue).await.unwrap().paused);
    w.shutdown().await;
    operator.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_while_its_queue_is_paused_takes_nothing_until_resumed() {
    let s = setup("pause_start").await;
    enqueue_n(&s.broker, &s.queue, 20).await;
    let operator = another(AmqpOptions::new()).await;
    assert!(operator.set_paused(&s.queue, true).await.unwrap());

    // A fetch of a paused queue returns nothing.
    let fetcher = s.dyn_broker();
    assert!(fetch_until(&fetcher, &s.queue, 1, 1).await.is_empty());
    fetcher.unsubscribe(&s.queue).await.unwrap();

    let starts = Arc::new(Starts::default());
    let b = another(AmqpOptions::new()).await;
    let w = worker(b.clone(), &s.queue, &starts);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(starts.len(), 0, "started while paused");
    let st = operator.queue_stats(&s.queue).await.unwrap();
    assert_eq!((st.counts.pending, st.paused), (20, true));

    assert!(operator.set_paused(&s.queue, false).await.unwrap());
    eventually(2, "the first job after the resume", || starts.len() > 0).await;
    wait_for(&w, 10, "all 20", |st| st.completed == 20).await;
    w.shutdown().await;
    b.close().await;
    operator.close().await;
}

/// More than one chunk: 300 dead letters put in the dead-letter queue by another client go
/// back 290 in one call, in their order, and the other 10 are discarded.
#[tokio::test]
async fn a_redrive_larger_than_a_chunk_keeps_the_order() {
    use lapin::options::BasicPublishOptions;
    let s = setup("st_chunks").await;
    // Declares the queue and its dead-letter queue.
    s.broker.subscribe(&s.queue, Some(1)).await.unwrap();
    s.broker.unsubscribe(&s.queue).await.unwrap();
    let conn = lapin::Connection::connect(&url(), lapin::ConnectionProperties::default())
        .await
        .expect("connect");
    let ch = conn.create_channel().await.unwrap();
    let dead = hopper_amqp::topology::dead_queue(&s.queue);
    for i in 0..300u64 {
        ch.basic_publish(
            "".into(),
            dead.as_str().into(),
            BasicPublishOptions::default(),
            i.to_string().as_bytes(),
            lapin::BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    let _ = conn.close(200, "published".into()).await;
    let operator = another(AmqpOptions::new()).await;
    let all = |at_most| Selection::Queue {
        queue: s.queue.clone(),
        at_most,
    };
    assert_eq!(operator.retry_dead(&all(290)).await.unwrap(), 290);
    let back: Vec<u64> = take_raw(&s.queue, 1000)
        .await
        .iter()
        .map(|d| serde_json::from_slice(&d.data).unwrap())
        .collect();
    assert_eq!(back, (0..290).collect::<Vec<_>>());
    assert_eq!(operator.discard_dead(&all(1000)).await.unwrap(), 10);
    operator.close().await;
}
