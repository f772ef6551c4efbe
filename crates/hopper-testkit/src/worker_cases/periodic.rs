//! Periodic jobs through real workers: three workers hold the same schedule and the
//! broker keeps one job per slot.

use std::time::Duration;

use hopper_core::broker::FetchRequest;
use hopper_core::schedule::SLOT_HEADER;
use hopper_core::{Clock, Missed, NewJob, Schedule};

use super::{Target, builder, choose_clock, skip_for};

/// Three workers with a schedule of every second run for 3.5 s: the queue then holds one
/// job per slot, for consecutive slots (none skipped while the workers ran), as many as
/// the workers say they enqueued, and none was missed.
pub async fn periodic_slots_enqueued_once(target: Target) {
    let Target { broker, queue, .. } = target;
    if !broker.capabilities().unique {
        return skip_for(
            "periodic_slots_enqueued_once",
            "unique",
            "a slot's job is unique by its time",
        );
    }
    let paused = choose_clock(&broker);
    let clock = if paused {
        Clock::tokio()
    } else {
        Clock::System
    };
    let job = NewJob::json(&queue, &"tick").unwrap();
    let schedule = Schedule::every("tick", Duration::from_secs(1), job)
        .unwrap()
        .missed(Missed::Skip);
    let workers: Vec<_> = (0..3)
        .map(|_| {
            builder(&broker)
                .clock(clock)
                .schedule(schedule.clone())
                .start()
                .expect("start")
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let (mut enqueued, mut missed) = (0, 0);
    for w in workers {
        let s = w.shutdown().await;
        enqueued += s.slots_enqueued;
        missed += s.slots_missed;
    }
    let fetched = broker
        .fetch(FetchRequest::one(&queue, 100, Duration::from_secs(60)))
        .await
        .expect("fetch");
    let mut slots: Vec<i64> = fetched
        .jobs
        .iter()
        .map(|j| j.headers[SLOT_HEADER].parse().expect("a slot in ms"))
        .collect();
    slots.sort_unstable();
    assert!(slots.len() >= 3, "3.5 s of slots of 1 s: {slots:?}");
    assert!(
        slots.windows(2).all(|w| w[1] - w[0] == 1000),
        "one job per slot, consecutive: {slots:?}"
    );
    assert_eq!(
        (enqueued, missed),
        (slots.len() as u64, 0),
        "enqueued by the workers / missed"
    );
}
