//! The database clock: with no clock of its own, a broker stamps and schedules jobs with
//! the server's time, in real time.

use std::time::{Duration, SystemTime};

use hopper_core::job::to_millis;
use hopper_core::{FetchRequest, NewJob};

use super::support::broker_with;

const TTL: Duration = Duration::from_secs(30);

#[tokio::test]
async fn times_come_from_the_database_clock() {
    let (broker, _) = broker_with(|o| o.wake_poll(None)).await;
    let ids = broker
        .enqueue(vec![
            NewJob::json("q", &1).unwrap(),
            NewJob::json("q", &2).unwrap().delay(Duration::from_secs(1)),
        ])
        .await
        .unwrap();
    let now = to_millis(SystemTime::now());
    let first = broker.job(ids[0]).await.unwrap().unwrap();
    assert!(
        (first.job.created_at - now).abs() < 5_000,
        "created_at {} vs the system's {now}",
        first.job.created_at
    );
    assert_eq!(first.job.run_at, first.job.created_at, "due at creation");
    let delayed = broker.job(ids[1]).await.unwrap().unwrap();
    assert_eq!(delayed.job.run_at - delayed.job.created_at, 1_000);

    let at_once = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    assert_eq!(at_once.jobs.len(), 1, "only the job due now");
    assert_eq!(at_once.jobs[0].id, ids[0]);
    assert_eq!(at_once.next_due, Some(delayed.job.run_at));
    let counts = broker.counts("q").await.unwrap();
    assert_eq!((counts.scheduled, counts.leased), (1, 1));

    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let later = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    assert_eq!(later.jobs.len(), 1, "the delayed job is due after 1.2 s");
    assert_eq!(later.jobs[0].id, ids[1]);
}

#[tokio::test]
async fn leases_expire_by_the_database_clock() {
    let (broker, _) = broker_with(|o| o.wake_poll(None)).await;
    let id = broker
        .enqueue(vec![NewJob::json("q", &1).unwrap()])
        .await
        .unwrap()[0];
    let held = broker
        .fetch(FetchRequest::one("q", 1, Duration::from_millis(300)))
        .await
        .unwrap();
    assert_eq!(held.jobs.len(), 1);
    assert!(
        broker
            .renew(&[held.lease], Duration::from_millis(300))
            .await
            .unwrap()
            .is_empty()
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // The reaper runs at most once a second per broker; 1.1 s after the first fetch it does.
    let again = broker.fetch(FetchRequest::one("q", 1, TTL)).await.unwrap();
    assert_eq!(
        again
            .jobs
            .iter()
            .map(|j| (j.id, j.attempt))
            .collect::<Vec<_>>(),
        vec![(id, 2)]
    );
    assert_eq!(
        broker.renew(&[held.lease], TTL).await.unwrap(),
        vec![held.lease],
        "the expired lease is reported lost"
    );
}
