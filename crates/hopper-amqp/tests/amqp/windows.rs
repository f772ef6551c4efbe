//! Windows: prefetch N holds N and each ack lets exactly one more in; no prefetch takes the
//! whole backlog; a queue's prefetch overrides the broker's default; 0 is refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hopper_amqp::AmqpOptions;
use hopper_core::{Broker, JobContext, Prefetch, QueueOptions, Settlement, Worker};

use super::support::{
    enqueue_n, eventually, fetch_until, held_after, queue_figures, setup, setup_with, wait_for,
};

#[tokio::test]
async fn prefetch_n_holds_n_and_each_ack_lets_exactly_one_more_in() {
    let s = setup("win_n").await;
    let broker = s.dyn_broker();
    enqueue_n(&s.broker, &s.queue, 20).await;
    broker
        .subscribe(&s.queue, Some(3))
        .await
        .expect("subscribe");
    // Positive counts wait for what is due (a loaded server may take a while), then a quiet
    // spell shows nothing more came.
    let mut held = fetch_until(&broker, &s.queue, 3, 10).await;
    assert_eq!(held.len(), 3, "window 3: deliveries before any ack");
    assert!(
        held_after(&broker, &s.queue, 200).await.is_empty(),
        "nothing more without an ack"
    );
    match queue_figures(&s.queue) {
        Some((ready, unacked)) => {
            assert_eq!(
                (ready, unacked),
                (17, 3),
                "rabbitmqctl: ready and unacknowledged"
            )
        }
        None => {
            eprintln!("note: rabbitmqctl list_queues unavailable; server-side figures not checked")
        }
    }
    for round in 0..5 {
        let job = held.remove(0);
        let report = broker
            .settle(vec![Settlement::ack(&job)])
            .await
            .expect("settle");
        assert_eq!(report.applied, 1, "round {round}: ack applied");
        let more = fetch_until(&broker, &s.queue, 1, 10).await;
        assert_eq!(more.len(), 1, "round {round}: one ack lets one more in");
        held.extend(more);
        assert!(
            held_after(&broker, &s.queue, 200).await.is_empty(),
            "round {round}: and only one"
        );
        assert_eq!(held.len(), 3, "round {round}: the window stays full at 3");
    }
    if let Some((ready, unacked)) = queue_figures(&s.queue) {
        assert_eq!((ready, unacked), (12, 3), "rabbitmqctl after 5 acks");
    }
    broker.unsubscribe(&s.queue).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_never_runs_more_than_the_window() {
    let s = setup("win_worker").await;
    enqueue_n(&s.broker, &s.queue, 40).await;
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    // Handlers wait at this gate until the server's figures are read, so the reading falls
    // mid-drain however long rabbitmqctl takes (a second or two, more on a loaded host).
    let (open, gate) = tokio::sync::watch::channel(false);
    let (r, p) = (running.clone(), peak.clone());
    let worker = Worker::builder(s.dyn_broker())
        .queue(
            &s.queue,
            QueueOptions::new()
                .concurrency(10)
                .prefetch(Prefetch::Fixed(4)),
            move |_job: JobContext<u64>| {
                let (r, p, mut gate) = (r.clone(), p.clone(), gate.clone());
                async move {
                    let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                    p.fetch_max(now, Ordering::SeqCst);
                    let _ = gate.wait_for(|open| *open).await;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    r.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
    eventually(10, "the window's 4 jobs to start", || {
        running.load(Ordering::SeqCst) == 4
    })
    .await;
    let queue = s.queue.clone();
    let figures = tokio::task::spawn_blocking(move || queue_figures(&queue))
        .await
        .unwrap();
    open.send_replace(true);
    let stats = wait_for(&worker, 30, "40 jobs", |s| s.completed == 40).await;
    worker.shutdown().await;
    assert_eq!(
        peak.load(Ordering::SeqCst),
        4,
        "prefetch 4 with concurrency 10: at most 4 run"
    );
    assert_eq!(
        stats.queues[&s.queue].windows,
        vec![4],
        "one basic.qos of 4"
    );
    assert!(
        stats.queues[&s.queue].peak_held <= 4,
        "held {}",
        stats.queues[&s.queue].peak_held
    );
    match figures {
        Some(figures) => {
            assert_eq!(
                figures,
                (36, 4),
                "rabbitmqctl mid-drain: (ready, unacknowledged)"
            );
        }
        None => {
            eprintln!("note: rabbitmqctl list_queues unavailable; server-side figures not checked")
        }
    }
}

#[tokio::test]
async fn without_any_prefetch_the_whole_backlog_arrives_without_waiting() {
    let s = setup("win_none").await;
    let broker = s.dyn_broker();
    enqueue_n(&s.broker, &s.queue, 500).await;
    broker.subscribe(&s.queue, None).await.expect("subscribe");
    let started = std::time::Instant::now();
    let mut got = 0;
    while got < 500 && started.elapsed() < Duration::from_secs(10) {
        got += held_after(&broker, &s.queue, 20).await.len();
    }
    assert_eq!(
        got, 500,
        "no basic.qos: every message is pushed with none acknowledged"
    );
    if let Some((ready, unacked)) = queue_figures(&s.queue) {
        assert_eq!(
            (ready, unacked),
            (0, 500),
            "rabbitmqctl: all 500 out unacknowledged"
        );
    }
    broker.unsubscribe(&s.queue).await.unwrap();
}

#[tokio::test]
async fn a_queue_prefetch_overrides_the_broker_default() {
    let s = setup_with("win_default", AmqpOptions::new().declare(true).prefetch(5)).await;
    let broker = s.dyn_broker();
    enqueue_n(&s.broker, &s.queue, 30).await;
    // No window from the queue: the broker's default of 5.
    broker.subscribe(&s.queue, None).await.expect("subscribe");
    assert_eq!(
        fetch_until(&broker, &s.queue, 5, 10).await.len(),
        5,
        "broker default 5"
    );
    assert!(
        held_after(&broker, &s.queue, 300).await.is_empty(),
        "no more than 5"
    );
    broker.unsubscribe(&s.queue).await.unwrap();
    // The queue's own prefetch of 2 wins.
    broker
        .subscribe(&s.queue, Some(2))
        .await
        .expect("subscribe");
    assert_eq!(
        fetch_until(&broker, &s.queue, 2, 10).await.len(),
        2,
        "queue prefetch 2"
    );
    assert!(
        held_after(&broker, &s.queue, 300).await.is_empty(),
        "no more than 2"
    );
    broker.unsubscribe(&s.queue).await.unwrap();

    // And through a worker: prefetch 2 on a broker whose default is 5.
    let peak = Arc::new(AtomicUsize::new(0));
    let running = Arc::new(AtomicUsize::new(0));
    let (r, p) = (running.clone(), peak.clone());
    let worker = Worker::builder(broker.clone())
        .queue(
            &s.queue,
            QueueOptions::new()
                .concurrency(8)
                .prefetch(Prefetch::Fixed(2)),
            move |_job: JobContext<u64>| {
                let (r, p) = (r.clone(), p.clone());
                async move {
                    p.fetch_max(r.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    r.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
    wait_for(&worker, 30, "30 jobs", |s| s.completed == 30).await;
    worker.shutdown().await;
    assert_eq!(peak.load(Ordering::SeqCst), 2, "at most 2 ran at once");
}

#[tokio::test]
async fn a_zero_window_is_refused_naming_the_setting() {
    let err = hopper_amqp::AmqpBroker::connect(&format!("{}?prefetch=0", super::support::url()))
        .await
        .unwrap_err();
    assert!(err.is_config(), "{err:?}");
    assert!(err.to_string().starts_with("invalid prefetch `0`"), "{err}");
    let s = setup("win_zero").await;
    let err = s.broker.subscribe(&s.queue, Some(0)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid prefetch of queue {} `0`: allowed: 1..=65535 (leave it unset for no limit)",
            s.queue
        )
    );
    let err = s
        .broker
        .subscribe(&s.queue, Some(70_000))
        .await
        .unwrap_err();
    assert!(err.is_config(), "{err:?}");
}

/// `Prefetch::Auto` re-sends `basic.qos` as the rule sizes it, and the server applies it:
/// with one handler at a time the worker comes to hold more than one delivery, which the
/// server pushes only under a window above 1, and never more than the windows sent allow.
/// On a quiet machine the windows go 1 2 4 8 16 (the demo checks that); a loaded one
/// stretches job times and the rule keeps the window smaller, so this test asserts the
/// rule's bounds rather than the exact sequence.
#[tokio::test]
async fn auto_resends_the_window_and_the_server_applies_it() {
    let s = setup("win_auto").await;
    enqueue_n(&s.broker, &s.queue, 300).await;
    let worker = Worker::builder(s.dyn_broker())
        .queue(
            &s.queue,
            QueueOptions::new().concurrency(1).prefetch(Prefetch::Auto),
            |_job: JobContext<u64>| async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok(())
            },
        )
        .start()
        .unwrap();
    wait_for(&worker, 120, "300 jobs", |st| st.completed == 300).await;
    let stats = worker.shutdown().await;
    let q = &stats.queues[&s.queue];
    let sent = q.windows.clone();
    assert_eq!(sent.first(), Some(&1), "windows sent: {sent:?}");
    assert!(
        sent.windows(2).all(|w| w[1] <= 2 * w[0]) && sent.iter().all(|&n| n <= 16),
        "no window more than twice the one before or above 16: {sent:?}"
    );
    let largest = sent.iter().copied().max().unwrap_or(1) as usize;
    assert!(largest >= 2, "the window never grew: {sent:?}");
    // Just after a re-window the old consumer's deliveries are still held beside the new
    // window's, so at most two windows' worth.
    assert!(
        (2..=2 * largest).contains(&q.peak_held),
        "held at most {} with windows {sent:?}",
        q.peak_held
    );
    assert_eq!(stats.completed, 300);
}
