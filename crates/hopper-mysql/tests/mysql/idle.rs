//! What a broker waiting on empty queues asks of the server, counted by the server itself
//! for a user of the test's own.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, Clock, NewJob};
use hopper_mysql::{MySqlBroker, MySqlOptions};
use hopper_testkit::helpers::{enqueue, fetch};

use super::support::{CountedUser, TempDatabase};

const TTL: Duration = Duration::from_secs(5);

/// The statements `user` runs for one fetch of up to 10 jobs of queue `q`, and the fetch's
/// jobs' ids and attempts.
async fn counted_fetch(
    broker: &Arc<dyn Broker>,
    user: &CountedUser,
) -> (i64, Vec<(i64, u32)>, Option<i64>) {
    let before = user.statements().await;
    let fetched = fetch(broker, "q", 10, TTL).await;
    let asked = user.statements().await - before;
    let jobs = fetched.jobs.iter().map(|j| (j.id.0, j.attempt)).collect();
    (asked, jobs, fetched.next_due)
}

/// Once a queue's claim comes back short, each poll of it is one statement outside a
/// transaction (where it was five) until it finds something; a fetch after this broker's
/// own enqueue skips the question; delayed jobs and expired leases are still found.
#[tokio::test(start_paused = true)]
async fn polling_a_queue_found_empty_is_one_statement() {
    let db = TempDatabase::migrated().await;
    let user = CountedUser::create(&db).await;
    let clock = Clock::tokio();
    let options = || MySqlOptions::default().clock(clock).wake_poll(None);
    let broker: Arc<dyn Broker> = Arc::new(
        MySqlBroker::connect_with(&user.url, options().connections(1))
            .await
            .expect("connect as the counted user"),
    );
    // Another process, as far as `broker` can tell: its enqueues wake nothing here.
    let producer: Arc<dyn Broker> =
        Arc::new(MySqlBroker::connect_with(&db.url, options()).await.unwrap());

    // The first claim opens a transaction to find the queue empty ...
    let (first, jobs, _) = counted_fetch(&broker, &user).await;
    assert!(jobs.is_empty());
    assert!(first >= 4, "a claim's transaction: {first} statements");
    // ... and each poll after it asks one question.
    for poll in 0..5 {
        let (asked, jobs, next_due) = counted_fetch(&broker, &user).await;
        assert_eq!((asked, jobs.len(), next_due), (1, 0, None), "poll {poll}");
    }

    // A delayed job: still one statement, which says when it is due.
    let now = clock.now_millis();
    enqueue(
        &producer,
        vec![NewJob::new("q", b"later".to_vec()).delay(Duration::from_secs(60))],
    )
    .await;
    let (asked, jobs, next_due) = counted_fetch(&broker, &user).await;
    assert_eq!((asked, jobs.len()), (1, 0));
    assert_eq!(next_due, Some(now + 60_000));

    // A job due now, enqueued elsewhere: the question, then the claim takes it. The clock
    // moves a reaper's period first, so that this claim and the next both return leases.
    let due = enqueue(&producer, vec![NewJob::new("q", b"now".to_vec())]).await[0];
    tokio::time::advance(Duration::from_secs(2)).await;
    let (probed_claim, jobs, next_due) = counted_fetch(&broker, &user).await;
    assert_eq!(jobs, vec![(due.0, 1)]);
    assert_eq!(next_due, Some(now + 60_000));

    // The lease expires: the question sees it, and the claim returns the job and takes it
    // again.
    tokio::time::advance(TTL + Duration::from_secs(1)).await;
    let (asked, jobs, _) = counted_fetch(&broker, &user).await;
    assert_eq!(jobs, vec![(due.0, 2)], "the reaper returned the job");
    assert_eq!(asked, probed_claim, "the same question and claim");

    // This broker's own enqueue wakes it: the fetch goes straight to the claim, one
    // statement less than a claim after the question.
    let own = enqueue(&broker, vec![NewJob::new("q", b"own".to_vec())]).await[0];
    tokio::time::advance(TTL + Duration::from_secs(1)).await;
    let (asked, jobs, _) = counted_fetch(&broker, &user).await;
    assert_eq!(jobs, vec![(due.0, 3), (own.0, 1)]);
    assert_eq!(asked, probed_claim - 1, "no question after a wake-up");
}
