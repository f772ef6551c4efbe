//! Rate limits through real workers: three workers share one window kept by the broker.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper_core::{Clock, Error, JobContext, Millis, QueueOptions, RateLimit};

use super::{Target, builder, choose_clock, skip_for};
use crate::helpers::enqueue_n;

/// 3 workers of 20 slots, each given the queue's limit of 50 starts a second, drain it for
/// 10 s: 500 ± 10 jobs start, and no one-second window holds more than 50 starts, by the
/// claim times the broker recorded. A broker without rate limits refuses to set one, and a
/// worker asked to keep one refuses to start, by name.
pub async fn rate_limit_holds_across_workers(target: Target) {
    let Target { broker, queue, .. } = target;
    let limit = RateLimit::new(50, Duration::from_secs(1)).expect("a valid limit");
    if !broker.capabilities().rate_limits {
        let refused = broker.set_rate_limit(&queue, Some(limit)).await;
        assert!(
            matches!(refused, Err(Error::NotSupported { .. })),
            "{refused:?}"
        );
        let handler = |_job: JobContext<u64>| async { Ok(()) };
        let options = QueueOptions::new().rate_limit(limit);
        let worker = builder(&broker)
            .queue(queue.clone(), options, handler)
            .check();
        let Err(Error::Config(e)) = worker else {
            panic!("a worker keeping a limit the broker cannot: {worker:?}")
        };
        assert_eq!(e.setting, format!("rate limit of queue {queue}"));
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
    enqueue_n(&broker, &queue, 1000).await;
    // Each start as the broker recorded it, its claim time: a handler's own clock would
    // add the hand-off's lag, which differs from job to job.
    let starts = Arc::new(Mutex::new(Vec::<Millis>::new()));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (starts, broker) = (starts.clone(), broker.clone());
            builder(&broker)
                .clock(clock)
                .queue(
                    queue.clone(),
                    QueueOptions::new().concurrency(20).rate_limit(limit),
                    move |job: JobContext<u64>| {
                        let (starts, broker) = (starts.clone(), broker.clone());
                        async move {
                            let record = broker.job(job.job.id).await?;
                            let at = record.and_then(|r| r.started_at);
                            starts
                                .lock()
                                .unwrap()
                                .push(at.expect("a running job's start"));
                            Ok(())
                        }
                    },
                )
                .start()
                .expect("start")
        })
        .collect();
    // Ten windows from the first start, and a little more for the last claims to run.
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    for w in workers {
        w.shutdown().await;
    }
    let mut starts = starts.lock().unwrap().clone();
    starts.sort();
    let first = *starts.first().expect("jobs started");
    let in_ten = starts.iter().filter(|&&t| t < first + 10_000).count();
    assert!((490..=510).contains(&in_ten), "{in_ten} started in 10 s");
    let per = limit.per.as_millis() as Millis;
    for (i, t) in starts.iter().enumerate() {
        let within = starts[i..].iter().take_while(|&&u| u - t < per).count();
        assert!(within <= 50, "{within} starts in the second from {t} ms");
    }
    let counts = broker.counts(&queue).await.unwrap();
    assert_eq!(
        counts.pending as usize,
        1000 - starts.len(),
        "the rest still wait"
    );
}
