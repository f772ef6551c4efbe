//! Enqueueing: ids, records, refused queue names, and the wake signal new work moves.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, Error, JobId, JobState, LeaseId, NewJob, Outcome, QueueCounts, job};

use super::{counts, counts_of, one, record, settle, skip_if_pushed};
use crate::helpers::{TTL, enqueue, enqueue_n, fetch, skip};

/// Enqueueing one job and then many returns distinct ids in ascending order, the counts
/// see them all, and a job's record keeps what the producer gave it.
pub async fn enqueue_one_and_many(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "enqueue_one_and_many") {
        return;
    }
    let first = NewJob::new("q", vec![0u8, 159, 146, 150])
        .priority(3)
        .max_attempts(7)
        .header("trace", "abc")
        .header("tenant", "t1");
    let one = enqueue(&broker, vec![first.clone()]).await;
    let many = enqueue_n(&broker, "q", 5).await;
    let all: Vec<JobId> = one.iter().chain(&many).copied().collect();
    assert_eq!(
        all.iter().collect::<HashSet<_>>().len(),
        6,
        "ids are not distinct: {all:?}"
    );
    assert!(
        all.windows(2).all(|w| w[0] < w[1]),
        "ids are not in enqueue order: {all:?}"
    );
    assert_eq!(
        counts(&broker, "q").await,
        counts_of(6, 0, 0, 0),
        "counts after 6 enqueued"
    );
    assert!(
        broker
            .enqueue(Vec::new())
            .await
            .expect("empty enqueue")
            .is_empty(),
        "an empty enqueue returns no ids"
    );

    let rec = record(&broker, one[0]).await;
    assert_eq!(rec.state, JobState::Pending, "state of a new job");
    assert_eq!(rec.last_error, None, "last_error of a new job");
    assert_eq!(rec.job.id, one[0]);
    assert_eq!(rec.job.queue, "q");
    assert_eq!(rec.job.payload, first.payload, "payload kept");
    assert_eq!(rec.job.priority, 3, "priority kept");
    assert_eq!(rec.job.max_attempts, 7, "max_attempts kept");
    assert_eq!(rec.job.headers, first.headers, "headers kept");
    assert_eq!(rec.job.attempt, 0, "attempt of a new job");
    assert_eq!(rec.job.lease, LeaseId(0), "lease of a pending job");
    assert_eq!(
        rec.job.run_at, rec.job.created_at,
        "a job for now runs at its creation"
    );

    let fetched = fetch(&broker, "q", 1, TTL).await;
    let job = &fetched.jobs[0];
    assert_eq!(job.id, one[0], "the priority-3 job comes first");
    assert_eq!(
        (
            &job.payload,
            &job.headers,
            job.priority,
            job.max_attempts,
            job.created_at
        ),
        (&first.payload, &first.headers, 3, 7, rec.job.created_at),
        "a fetched job carries what was enqueued"
    );

    assert_eq!(
        counts(&broker, "nowhere").await,
        QueueCounts::default(),
        "unknown queue"
    );
    assert!(
        broker.job(JobId(i64::MAX)).await.expect("job()").is_none(),
        "unknown id"
    );
    assert!(
        broker
            .dead_letters("nowhere", 10)
            .await
            .expect("dead_letters()")
            .is_empty(),
        "dead letters of an unknown queue"
    );
}

/// A bad queue name refuses the whole enqueue with an error naming `queue`; nothing of it
/// is stored.
pub async fn bad_queue_name(broker: Arc<dyn Broker>) {
    let long = "q".repeat(129);
    for bad in ["bad queue!", "", long.as_str(), "ünïcode"] {
        let err = broker
            .enqueue(vec![NewJob::new("good", "a"), NewJob::new(bad, "b")])
            .await
            .expect_err(&format!("queue name {bad:?} accepted"));
        assert!(
            err.is_config(),
            "queue name {bad:?}: not a config error: {err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("queue") && text.contains(bad),
            "the error for {bad:?} names neither the setting nor the value: {text}"
        );
    }
    assert_eq!(
        counts(&broker, "good").await,
        QueueCounts::default(),
        "a refused enqueue stored its valid jobs"
    );
    let fine = enqueue(&broker, vec![NewJob::new("A-z_0.9:x", "ok")]).await;
    assert_eq!(fine.len(), 1, "every allowed character");
}

/// A value outside the ranges every broker shares refuses the whole enqueue with an error
/// naming the setting, whatever the broker: a payload past its own limit, attempts of 0, a
/// delay that would wrap, a NUL in a header, headers past their size. Nothing is stored.
pub async fn values_out_of_range(broker: Arc<dyn Broker>) {
    let job = || NewJob::new("q", "x");
    let cases = [
        (
            "payload",
            NewJob::new("q", vec![7u8; broker.limits().max_payload + 1]),
        ),
        ("max_attempts", job().max_attempts(0)),
        ("delay", job().delay(Duration::MAX)),
        ("delay", job().delay(Duration::from_millis(i64::MAX as u64))),
        ("header", job().header("k", "a\0b")),
        (
            "headers",
            job().header("k", "v".repeat(job::MAX_HEADERS_BYTES)),
        ),
    ];
    for (setting, bad) in cases {
        let err = broker
            .enqueue(vec![job(), bad])
            .await
            .expect_err(&format!("{setting} out of range accepted"));
        match &err {
            Error::Config(c) => assert_eq!(c.setting, setting, "{err}"),
            other => panic!("{setting}: not a config error: {other:?}"),
        }
    }
    assert_eq!(
        counts(&broker, "q").await,
        QueueCounts::default(),
        "a refused enqueue stored its valid jobs"
    );
}

/// Values at the very ends of the ranges are stored and read back exactly: the schema's
/// columns and checks hold every value core accepts.
pub async fn values_at_the_edges(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "values_at_the_edges") {
        return;
    }
    let latest = job::from_millis(job::MAX_RUN_AT);
    let payload = vec![1u8; broker.limits().max_payload];
    let jobs = vec![
        NewJob::new("q", payload.clone()).priority(i32::MAX),
        NewJob::new("q", "b")
            .priority(i32::MIN)
            .max_attempts(job::MAX_ATTEMPTS),
        NewJob::new("q", "c")
            .run_at(latest)
            .header("h".repeat(255), "v"),
        NewJob::new("q", "d").delay(job::MAX_DELAY),
    ];
    let ids = enqueue(&broker, jobs).await;
    let a = record(&broker, ids[0]).await.job;
    assert_eq!((a.priority, a.payload.len()), (i32::MAX, payload.len()));
    let b = record(&broker, ids[1]).await.job;
    assert_eq!((b.priority, b.max_attempts), (i32::MIN, job::MAX_ATTEMPTS));
    let c = record(&broker, ids[2]).await.job;
    assert_eq!((c.run_at, c.headers.len()), (job::MAX_RUN_AT, 1));
    let d = record(&broker, ids[3]).await.job;
    let delay = job::MAX_DELAY.as_millis() as i64;
    assert!(d.run_at >= delay, "a 100-year delay stored as {}", d.run_at);
    assert_eq!(counts(&broker, "q").await, counts_of(2, 2, 0, 0));
}

/// The wake signal changes after an enqueue, a release and a retry.
pub async fn wake_signal_on_new_work(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "wake_signal_on_new_work") {
        return;
    }
    let Some(mut wake) = broker.wake_signal() else {
        return skip("wake_signal_on_new_work", "the broker has no wake signal");
    };
    wake.borrow_and_update();
    let id = enqueue_n(&broker, "q", 1).await[0];
    assert!(
        wake.has_changed().expect("signal alive"),
        "no wake after enqueue"
    );
    wake.borrow_and_update();

    let held = fetch(&broker, "q", 1, TTL).await;
    settle(&broker, one(id, held.lease, Outcome::Release)).await;
    assert!(
        wake.has_changed().expect("signal alive"),
        "no wake after release"
    );
    wake.borrow_and_update();

    let held = fetch(&broker, "q", 1, TTL).await;
    let retry = Outcome::Retry {
        delay: Duration::ZERO,
        error: "e".into(),
        step_aside: false,
    };
    settle(&broker, one(id, held.lease, retry)).await;
    assert!(
        wake.has_changed().expect("signal alive"),
        "no wake after retry"
    );
}
