//! Held acks: an ack above a delivery still unsettled waits for it and one `multiple` frame
//! covers both; held acks go out one by one at half the window, after the hold, and before
//! the channel closes. Each step is read off what the server pushes next under the window.

use std::sync::Arc;
use std::time::Duration;

use hopper_amqp::AmqpOptions;
use hopper_core::{Broker, Job, Settlement};

use super::support::{
    Setup, enqueue_n, eventually, fetch_until, held_after, queue_figures, setup_with,
};

const WINDOW: u32 = 6;

/// A queue of 20 with a subscription of window 6 (so at most 3 acks held) whose six
/// deliveries have arrived, in delivery order.
async fn six_held(prefix: &str, hold: Duration) -> (Setup, Arc<dyn Broker>, Vec<Job>) {
    let s = setup_with(prefix, AmqpOptions::new().declare(true).ack_hold(hold)).await;
    let broker = s.dyn_broker();
    enqueue_n(&s.broker, &s.queue, 20).await;
    broker
        .subscribe(&s.queue, Some(WINDOW))
        .await
        .expect("subscribe");
    let held = fetch_until(&broker, &s.queue, WINDOW as usize, 10).await;
    assert_eq!(held.len(), WINDOW as usize, "the window's worth arrives");
    (s, broker, held)
}

async fn ack(broker: &Arc<dyn Broker>, jobs: &[&Job]) {
    let report = broker
        .settle(jobs.iter().map(|j| Settlement::ack(j)).collect())
        .await
        .expect("settle");
    assert_eq!(report.applied, jobs.len(), "acks applied (held or sent)");
    assert!(report.fenced.is_empty());
}

#[tokio::test]
async fn an_ack_above_an_unsettled_delivery_waits_for_it_then_one_frame_frees_both() {
    let (s, broker, held) = six_held("acks_wait", Duration::from_secs(10)).await;
    ack(&broker, &[&held[1]]).await;
    assert_eq!(
        held_after(&broker, &s.queue, 400).await.len(),
        0,
        "the ack of the second delivery is held while the first still runs"
    );
    if let Some((ready, unacked)) = queue_figures(&s.queue) {
        assert_eq!((ready, unacked), (14, 6), "rabbitmqctl: nothing acked yet");
    }
    ack(&broker, &[&held[0]]).await;
    let more = fetch_until(&broker, &s.queue, 2, 10).await;
    assert_eq!(more.len(), 2, "one multiple ack freed two places");
    assert_eq!(
        held_after(&broker, &s.queue, 300).await.len(),
        0,
        "and no more"
    );
    broker.unsubscribe(&s.queue).await.unwrap();
}

#[tokio::test]
async fn held_acks_reaching_half_the_window_go_out_one_by_one() {
    let (s, broker, held) = six_held("acks_half", Duration::from_secs(10)).await;
    ack(&broker, &[&held[1], &held[2]]).await;
    assert_eq!(
        held_after(&broker, &s.queue, 400).await.len(),
        0,
        "two held acks are below half the window (3)"
    );
    ack(&broker, &[&held[4]]).await;
    let more = fetch_until(&broker, &s.queue, 3, 10).await;
    assert_eq!(more.len(), 3, "the third held ack sends all three");
    assert_eq!(
        held_after(&broker, &s.queue, 300).await.len(),
        0,
        "and no more"
    );
    broker.unsubscribe(&s.queue).await.unwrap();
}

#[tokio::test]
async fn a_held_ack_goes_out_alone_once_the_hold_is_over() {
    let (s, broker, held) = six_held("acks_hold", Duration::from_millis(200)).await;
    ack(&broker, &[&held[3]]).await;
    // Nothing else settles: only the hold's own timer can send it.
    let more = fetch_until(&broker, &s.queue, 1, 10).await;
    assert_eq!(more.len(), 1, "the held ack went out after the hold");
    assert_eq!(
        held_after(&broker, &s.queue, 400).await.len(),
        0,
        "just one"
    );
    broker.unsubscribe(&s.queue).await.unwrap();
}

#[tokio::test]
async fn without_a_hold_an_ack_goes_at_once() {
    let (s, broker, held) = six_held("acks_nohold", Duration::ZERO).await;
    ack(&broker, &[&held[2]]).await;
    let more = fetch_until(&broker, &s.queue, 1, 10).await;
    assert_eq!(more.len(), 1, "sent alone at once");
    broker.unsubscribe(&s.queue).await.unwrap();
}

#[tokio::test]
async fn closing_a_subscription_sends_its_held_acks_first() {
    let (s, broker, held) = six_held("acks_close", Duration::from_secs(10)).await;
    ack(&broker, &[&held[1], &held[5]]).await;
    broker.unsubscribe(&s.queue).await.unwrap();
    // The other four go back to the queue; the two acked ones are gone for good.
    let started = std::time::Instant::now();
    let mut pending = 0;
    while started.elapsed() < Duration::from_secs(10) {
        pending = broker.counts(&s.queue).await.expect("counts").pending;
        if pending >= 18 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(pending, 18, "20 enqueued, 4 handed back, 2 acked on close");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        broker.counts(&s.queue).await.expect("counts").pending,
        18,
        "and the acked two never come back"
    );
}

/// Settlement batches of one subscription sent at once from many tasks, each acking a
/// scattered handful of its deliveries, while every tenth delivery is never settled (its
/// handler still running). A `multiple` ack covers every earlier tag, so one that covered
/// an unsettled delivery would lose that job. 400 jobs under a window of 100: each arrives
/// once, every ack is applied, the server ends holding exactly the 40 unsettled ones, and
/// once the subscription closes those 40, and no other, come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_settlement_batches_never_cover_an_unsettled_delivery() {
    const N: usize = 400;
    let s = setup_with("acks_concurrent", AmqpOptions::new().declare(true)).await;
    let broker = s.dyn_broker();
    enqueue_n(&s.broker, &s.queue, N).await;
    broker
        .subscribe(&s.queue, Some(100))
        .await
        .expect("subscribe");
    let running = |i: usize| i % 10 == 3;
    let mut runs = vec![0u32; N];
    let mut batches = 0;
    // xorshift64: the same scattering on every run.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |below: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % below as u64) as usize
    };
    let started = std::time::Instant::now();
    while runs.contains(&0) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{} of {N} arrived",
            runs.iter().filter(|&&n| n > 0).count()
        );
        let mut jobs = fetch_until(&broker, &s.queue, 1, 10).await;
        for job in &jobs {
            runs[job.decode::<usize>().expect("an index")] += 1;
        }
        jobs.retain(|j| !running(j.decode::<usize>().expect("an index")));
        for i in (1..jobs.len()).rev() {
            jobs.swap(i, next(i + 1));
        }
        let mut settles = Vec::new();
        while !jobs.is_empty() {
            let take = (1 + next(6)).min(jobs.len());
            let chunk: Vec<Settlement> = jobs.drain(..take).map(|j| Settlement::ack(&j)).collect();
            let (broker, len) = (broker.clone(), chunk.len());
            settles.push(tokio::spawn(
                async move { (len, broker.settle(chunk).await) },
            ));
            batches += 1;
        }
        for settle in settles {
            let (len, report) = settle.await.expect("a settle task");
            let report = report.expect("settle");
            assert_eq!((report.applied, report.fenced.len()), (len, 0));
        }
    }
    assert!(batches >= 360 / 6, "{batches} settlement batches");
    assert_eq!(
        runs.iter().filter(|&&n| n != 1).count(),
        0,
        "every job arrives once"
    );
    assert_eq!(
        held_after(&broker, &s.queue, 300).await.len(),
        0,
        "nothing more arrives"
    );
    if queue_figures(&s.queue).is_some() {
        eventually(10, "the server to hold just the 40 unsettled", || {
            queue_figures(&s.queue) == Some((0, 40))
        })
        .await;
    }
    broker.unsubscribe(&s.queue).await.unwrap();
    broker
        .subscribe(&s.queue, Some(100))
        .await
        .expect("subscribe again");
    let back = fetch_until(&broker, &s.queue, 40, 10).await;
    let mut back: Vec<usize> = back.iter().map(|j| j.decode().expect("an index")).collect();
    back.sort_unstable();
    let expected: Vec<usize> = (0..N).filter(|&i| running(i)).collect();
    assert_eq!(
        back, expected,
        "the unsettled deliveries come back, and only they"
    );
    assert_eq!(
        held_after(&broker, &s.queue, 300).await.len(),
        0,
        "nothing else"
    );
    broker.unsubscribe(&s.queue).await.unwrap();
}
