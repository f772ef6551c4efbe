//! Rate limits through real workers: three workers share one window kept by the broker.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper_core::{Clock, Error, JobContext, Millis, NewJob, QueueOptions, RateLimit};

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

/// 3 workers of 20 slots, each given the queue's limit of 10 starts a second per key,
/// drain 3 keys of 200 jobs for 5 s: each key's jobs start 50 ± 2 times in the 5 s from
/// the first start, never more than 10 in one second, by the claim times the broker
/// recorded; the keys go side by side, none waiting for another. A worker asked to keep a
/// limit per key on a broker without refuses to start, by name.
pub async fn rate_limit_per_key_holds_across_workers(target: Target) {
    let Target { broker, queue, .. } = target;
    let limit = RateLimit::new(10, Duration::from_secs(1))
        .expect("a valid limit")
        .per_key();
    if !broker.capabilities().rate_limits_per_key {
        let handler = |_job: JobContext<(String, u64)>| async { Ok(()) };
        let options = QueueOptions::new().rate_limit(limit);
        let worker = builder(&broker)
            .queue(queue.clone(), options, handler)
            .check();
        let Err(Error::Config(e)) = worker else {
            panic!("a worker keeping a limit per key the broker cannot: {worker:?}")
        };
        assert_eq!(e.setting, format!("rate limit of queue {queue}"));
        return skip_for(
            "rate_limit_per_key_holds_across_workers",
            "rate_limits_per_key",
            "the broker keeps a window per key",
        );
    }
    let paused = choose_clock(&broker);
    let clock = if paused {
        Clock::tokio()
    } else {
        Clock::System
    };
    let keys = ["a", "b", "c"];
    let jobs = (0..600u64)
        .map(|i| {
            let key = keys[i as usize % 3];
            NewJob::json(&queue, &(key, i)).map(|j| j.rate_key(key))
        })
        .collect::<hopper_core::Result<Vec<_>>>()
        .unwrap();
    broker.enqueue(jobs).await.unwrap();
    let starts = Arc::new(Mutex::new(Vec::<(String, Millis)>::new()));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (starts, broker) = (starts.clone(), broker.clone());
            builder(&broker)
                .clock(clock)
                .queue(
                    queue.clone(),
                    QueueOptions::new().concurrency(20).rate_limit(limit),
                    move |job: JobContext<(String, u64)>| {
                        let (starts, broker) = (starts.clone(), broker.clone());
                        async move {
                            let record = broker.job(job.job.id).await?;
                            let at = record.and_then(|r| r.started_at);
                            let at = at.expect("a running job's start");
                            starts.lock().unwrap().push((job.payload.0.clone(), at));
                            Ok(())
                        }
                    },
                )
                .start()
                .expect("start")
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    for w in workers {
        w.shutdown().await;
    }
    let starts = starts.lock().unwrap().clone();
    let first = starts.iter().map(|(_, t)| *t).min().expect("jobs started");
    let per = limit.per.as_millis() as Millis;
    for key in keys {
        let mut mine: Vec<Millis> = starts
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, t)| *t)
            .collect();
        mine.sort();
        let in_five = mine.iter().filter(|&&t| t < first + 5_000).count();
        assert!(
            (48..=52).contains(&in_five),
            "{in_five} of key {key} started in 5 s"
        );
        for (i, t) in mine.iter().enumerate() {
            let within = mine[i..].iter().take_while(|&&u| u - t < per).count();
            assert!(
                within <= 10,
                "{within} starts of key {key} in the second from {t} ms"
            );
        }
    }
    let counts = broker.counts(&queue).await.unwrap();
    let waiting = (counts.pending + counts.scheduled) as usize;
    assert_eq!(
        waiting,
        600 - starts.len(),
        "the rest still wait, moved or not"
    );
}
