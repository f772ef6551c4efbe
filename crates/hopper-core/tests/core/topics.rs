//! Topics: publish once, every subscription reads every payload once, in order.

use std::sync::Arc;

use hopper_core::MemoryBroker;

fn payload(i: u32) -> Arc<[u8]> {
    Arc::from(i.to_be_bytes().as_slice())
}

fn number(p: &[u8]) -> u32 {
    u32::from_be_bytes(p.try_into().unwrap())
}

#[tokio::test]
async fn every_subscription_sees_every_payload_once_in_order() {
    let broker = MemoryBroker::new();
    let topic = broker.topic("events").unwrap();
    let mut a = topic.subscribe();
    let mut b = topic.subscribe();
    for i in 0..1000 {
        topic.publish(payload(i));
    }
    let mut got_a = Vec::new();
    while got_a.len() < 1000 {
        got_a.extend(a.recv_batch(64).await.iter().map(|p| number(p)));
    }
    assert_eq!(got_a, (0..1000).collect::<Vec<_>>());
    assert_eq!(topic.retained(), 1000, "kept until b reads them");
    let mut got_b = Vec::new();
    while got_b.len() < 1000 {
        got_b.push(number(&b.recv().await));
    }
    assert_eq!(got_b, got_a);
    assert_eq!(topic.retained(), 0, "dropped once both read them");
    assert!(a.try_recv_batch(10).is_empty());
}

#[tokio::test]
async fn a_paused_subscriber_delays_neither_the_publisher_nor_the_others() {
    let broker = MemoryBroker::new();
    let topic = broker.topic("events").unwrap();
    let mut slow = topic.subscribe();
    let mut fast = topic.subscribe();
    slow.pause();
    let reader = tokio::spawn(async move {
        let mut n = 0;
        while n < 500 {
            n += fast.recv_batch(100).await.len();
        }
        n
    });
    for i in 0..500 {
        topic.publish(payload(i));
    }
    assert_eq!(reader.await.unwrap(), 500);
    assert!(slow.try_recv_batch(10).is_empty(), "paused");
    assert_eq!(slow.lag(), 500);
    assert_eq!(topic.retained(), 500, "kept for the paused subscriber");
    slow.resume();
    let first = slow.recv_batch(1000).await;
    assert_eq!(first.len(), 500);
    assert_eq!(number(&first[0]), 0);
    assert_eq!(topic.retained(), 0);
}

#[tokio::test]
async fn a_topic_name_is_checked_like_a_queue_name() {
    let broker = MemoryBroker::new();
    let err = broker.topic("no spaces").unwrap_err().to_string();
    assert!(err.starts_with("invalid queue `no spaces`"), "{err}");
}
