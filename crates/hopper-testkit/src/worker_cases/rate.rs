//! Rate limits through real workers: three workers share one window kept by the broker.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper_core::{Clock, Error, JobContext, QueueOptions, RateLimit};
use tokio::time::Instant;

use super::{Target, builder, choose_clock, skip_for};
use crate::helpers::enqueue_n;

/// 3 workers of 20 slots drain a queue limited to 50 starts a second for 10 s: 500 ± 10
/// jobs start, and no one-second window holds more than 50 starts. A broker without rate
/// limits refuses to set one, by name.
pub async fn rate_limit_holds_across_workers(target: Target) {
    let Target { broker, queue, .. } = target;
    let limit = RateLimit::new(50, Duration::from_secs(1)).expect("a valid limit");
    if !broker.capabilities().rate_limits {
        let refused = broker.set_rate_limit(&queue, Some(limit)).await;
        assert!(
            matches!(refused, Err(Error::NotSupported { .. })),
            "{refused:?}"
        );
        return skip_for(
            "rate_limit_holds_across_workers",
            "rate_limits",
            "the broker keeps the window",
        );
    }
    let paused = choose_clock(&broker);
    let clock = if paused {
        Clock::tokio()
    } else {
        Clock::System
    };
    broker.set_rate_limit(&queue, Some(limit)).await.unwrap();
    enqueue_n(&broker, &queue, 1000).await;
    let starts = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let begun = Instant::now();
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let starts = starts.clone();
            builder(&broker)
                .clock(clock)
                .queue(
                    queue.clone(),
                    QueueOptions::new().concurrency(20),
                    move |_job: JobContext<u64>| {
                        starts.lock().unwrap().push(Instant::now());
                        async { Ok(()) }
                    },
                )
                .start()
                .expect("start")
        })
        .collect();
    // Just short of 10 s: the window opens at 0, 1, …, 9 s.
    tokio::time::sleep(Duration::from_millis(9_990)).await;
    for w in workers {
        w.shutdown().await;
    }
    let mut starts: Vec<Duration> = starts.lock().unwrap().iter().map(|t| *t - begun).collect();
    starts.sort();
    let in_ten: Vec<&Duration> = starts.iter().filter(|t| t.as_millis() < 9_990).collect();
    assert!(
        (490..=510).contains(&in_ten.len()),
        "{} started in 10 s",
        in_ten.len()
    );
    for (i, t) in starts.iter().enumerate() {
        let within = starts[i..]
            .iter()
            .take_while(|u| **u - *t < limit.per)
            .count();
        assert!(within <= 50, "{within} starts in the second from {t:?}");
    }
}
