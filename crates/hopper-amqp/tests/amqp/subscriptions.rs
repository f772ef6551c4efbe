//! Closing a subscription mid-batch: its unsettled deliveries come back marked redelivered
//! and another subscription processes them; nothing is lost.

use std::sync::Arc;
use std::time::Duration;

use hopper_amqp::AmqpOptions;
use hopper_amqp::wire::REDELIVERED;
use hopper_core::{Broker, JobContext, QueueOptions, Settlement, Worker};

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
    let acks = held[..3].iter().map(Settlement::ack).collect();
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
    let late = a.settle(vec![Settlement::ack(&held[3])]).await.unwrap();
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

/// On a quorum queue the server counts deliveries (`x-delivery-count`), so a delivery
/// handed back by a closed channel (a crashed worker) counts as an attempt, which a header
/// written by the client cannot do; on a classic queue the same hand-back is attempt
/// neutral.
#[tokio::test]
async fn a_quorum_queue_counts_a_delivery_handed_back_by_a_closed_channel_as_an_attempt() {
    use hopper_amqp::QueueKind;
    for (kind, second_attempt) in [(QueueKind::Quorum, 2), (QueueKind::Classic, 1)] {
        let s =
            super::support::setup_with("quorum", AmqpOptions::new().declare(true).queue_kind(kind))
                .await;
        enqueue_n(&s.broker, &s.queue, 1).await;
        let a: Arc<dyn Broker> = s.dyn_broker();
        a.subscribe(&s.queue, Some(1)).await.unwrap();
        let first = fetch_until(&a, &s.queue, 1, 10).await;
        assert_eq!(first.len(), 1, "{kind:?}: delivered once");
        assert_eq!(first[0].attempt, 1, "{kind:?}: a first delivery");
        // The holder goes away without settling: the server takes the delivery back.
        a.unsubscribe(&s.queue).await.unwrap();
        let b: Arc<dyn Broker> = another(AmqpOptions::new().declare(true).queue_kind(kind)).await;
        b.subscribe(&s.queue, Some(1)).await.unwrap();
        let again = fetch_until(&b, &s.queue, 1, 10).await;
        assert_eq!(again.len(), 1, "{kind:?}: delivered again");
        assert_eq!(again[0].decode::<u64>().unwrap(), 0);
        assert_eq!(
            again[0].headers.get(REDELIVERED).map(String::as_str),
            Some("true"),
            "{kind:?}: marked redelivered"
        );
        assert_eq!(
            again[0].attempt, second_attempt,
            "{kind:?}: attempt after the hand-back"
        );
        let done = b.settle(vec![Settlement::ack(&again[0])]).await.unwrap();
        assert_eq!(done.applied, 1);
        b.unsubscribe(&s.queue).await.unwrap();
    }
}

/// A quorum queue Hopper declares carries the server's delivery limit: a message handed
/// out more often than that (each holder gone before settling, as crashing workers would
/// be) is dead-lettered by the server itself, with no worker left to count.
#[tokio::test]
async fn a_quorum_queue_dead_letters_a_message_past_its_delivery_limit() {
    use super::support::{queue_figures, setup_with_queue};
    use hopper_amqp::{QueueKind, QueueSettings};
    let queue = hopper_testkit::unique_name("qlimit");
    let settings = QueueSettings::new()
        .kind(QueueKind::Quorum)
        .delivery_limit(2);
    let options = AmqpOptions::new()
        .declare(true)
        .queue(queue.clone(), settings);
    let s = setup_with_queue(queue, options.clone()).await;
    enqueue_n(&s.broker, &s.queue, 1).await;
    // Delivered, handed back, delivered, handed back, delivered, handed back: three
    // deliveries against a limit of two.
    for round in 1..=3 {
        let holder: Arc<dyn Broker> = another(options.clone()).await;
        holder.subscribe(&s.queue, Some(1)).await.unwrap();
        let got = fetch_until(&holder, &s.queue, 1, 10).await;
        assert_eq!(got.len(), 1, "delivery {round}");
        holder.unsubscribe(&s.queue).await.unwrap();
    }
    let dead = hopper_amqp::topology::dead_queue(&s.queue);
    eventually(10, "the server dead-letters the message", || {
        queue_figures(&dead) == Some((1, 0)) && queue_figures(&s.queue) == Some((0, 0))
    })
    .await;
}
