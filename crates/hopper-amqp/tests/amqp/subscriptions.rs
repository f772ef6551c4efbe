//! Closing a subscription mid-batch: its unsettled deliveries come back marked redelivered
//! and another subscription processes them; nothing is lost.

use std::sync::Arc;
use std::time::Duration;

use hopper_amqp::AmqpOptions;
use hopper_amqp::wire::REDELIVERED;
use hopper_core::{Broker, JobContext, Outcome, QueueOptions, Settlement, Worker};

use super::support::{Seen, another, enqueue_n, eventually, fetch_until, setup};

#[tokio::test]
async fn closing_a_subscription_mid_batch_hands_its_unsettled_deliveries_to_another() {
    let s = setup("sub_close").await;
    enqueue_n(&s.broker, &s.queue, 20).await;
    let a: Arc<dyn Broker> = s.dyn_broker();
    a.subscribe(&s.queue, Some(10)).await.unwrap();
    let held = fetch_until(&a, &s.queue, 10, 10).await;
    assert_eq!(held.len(), 10, "window 10");
    // Three of the batch finish; seven are still being worked on when the channel closes.
    let acks = held[..3]
        .iter()
        .map(|j| Settlement {
            job: j.id,
            lease: j.lease,
            outcome: Outcome::Ack,
        })
        .collect();
    assert_eq!(a.settle(acks).await.unwrap().applied, 3);
    let acked: Vec<u64> = held[..3]
        .iter()
        .map(|j| j.decode::<u64>().unwrap())
        .collect();
    let unsettled: Vec<u64> = held[3..]
        .iter()
        .map(|j| j.decode::<u64>().unwrap())
        .collect();
    // Meanwhile the three acks made room: up to three more were pushed into the buffer.
    let held_at_close = a.counts(&s.queue).await.unwrap().leased;
    assert!(
        (7..=10).contains(&held_at_close),
        "held unsettled at the close: {held_at_close}"
    );
    a.unsubscribe(&s.queue).await.unwrap();
    // The first holder's late settlement names a closed channel: fenced, never applied.
    let late = a
        .settle(vec![Settlement {
            job: held[3].id,
            lease: held[3].lease,
            outcome: Outcome::Ack,
        }])
        .await
        .unwrap();
    assert_eq!(
        (late.applied, late.fenced.len()),
        (0, 1),
        "a settlement after the close"
    );

    let b = another(AmqpOptions::new()).await;
    let seen = Arc::new(Seen::default());
    let redelivered = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (seen2, red2) = (seen.clone(), redelivered.clone());
    let worker = Worker::builder(b.clone())
        .queue(
            &s.queue,
            QueueOptions::new().concurrency(4),
            move |job: JobContext<u64>| {
                seen2.record(job.payload);
                if job
                    .job
                    .headers
                    .get(REDELIVERED)
                    .is_some_and(|v| v == "true")
                {
                    red2.lock().unwrap().push(job.payload);
                }
                async { Ok(()) }
            },
        )
        .start()
        .unwrap();
    eventually(20, "the other subscription to process 17 jobs", || {
        seen.distinct() == 17
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    worker.shutdown().await;
    assert_eq!(seen.total(), 17, "each of the 17 exactly once");
    let set = seen.inner.lock().unwrap().0.clone();
    assert!(
        acked.iter().all(|i| !set.contains(i)),
        "an acknowledged job came back"
    );
    assert!(
        unsettled.iter().all(|i| set.contains(i)),
        "an unsettled job was lost"
    );
    let mut red = redelivered.lock().unwrap().clone();
    red.sort_unstable();
    assert_eq!(
        red.len() as u64,
        held_at_close,
        "exactly what the closed channel held comes back redelivered: {red:?}"
    );
    assert!(
        unsettled.iter().all(|i| red.contains(i)),
        "the seven of the batch: {red:?}"
    );
    b.close().await;
}
