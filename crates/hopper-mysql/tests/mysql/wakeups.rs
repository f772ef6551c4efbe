//! The wake poller: a broker learns of jobs another process enqueued without fetching.

use std::time::{Duration, Instant};

use hopper_core::{Broker, NewJob};
use hopper_mysql::{MySqlBroker, MySqlOptions};

use super::support::broker_with;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_enqueued_elsewhere_wakes_an_idle_broker() {
    let (broker, url) = broker_with(|o| {
        o.wake_poll(Some((
            Duration::from_millis(20),
            Duration::from_millis(200),
        )))
    })
    .await;
    // Another process, as far as `broker` can tell.
    let producer = MySqlBroker::connect_with(&url, MySqlOptions::default().wake_poll(None))
        .await
        .unwrap();
    let mut wake = broker.wake_signal().expect("a wake signal");
    // Long enough for the poller to take its first reading and back off to the maximum.
    tokio::time::sleep(Duration::from_millis(600)).await;
    wake.borrow_and_update();

    for i in 0..3 {
        let sent = Instant::now();
        producer
            .enqueue(vec![NewJob::json("q", &i).unwrap()])
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(1), wake.changed())
            .await
            .unwrap_or_else(|_| panic!("enqueue {i}: no wake within a second"))
            .expect("the broker is alive");
        wake.borrow_and_update();
        assert!(sent.elapsed() < Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    producer.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_poller_stops_with_its_broker() {
    let (broker, url) = broker_with(|o| o.wake_poll(None)).await;
    let polled = MySqlBroker::connect_with(
        &url,
        MySqlOptions::default()
            .wake_poll(Some((Duration::from_millis(10), Duration::from_millis(10)))),
    )
    .await
    .unwrap();
    let wake = polled.wake_signal().unwrap();
    drop(polled);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        wake.has_changed().is_err(),
        "the poller still holds the wake signal"
    );
    drop(broker);
}
