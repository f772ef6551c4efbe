//! What a broker waiting on empty queues asks of the server, counted by the server itself
//! for a user of the test's own.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, Budget, Clock, FetchRequest, NewJob};
use hopper_mysql::{MySqlBroker, MySqlOptions};
use hopper_testkit::helpers::{enqueue, fetch_request};

use super::support::{CountedUser, TempDatabase};

const TTL: Duration = Duration::from_secs(5);

/// The statements `user` runs for one fetch of up to 10 jobs of queue `q`, and the fetch's
/// jobs' ids and attempts, and its next due time.
async fn counted_fetch(
    broker: &Arc<dyn Broker>,
    user: &CountedUser,
) -> (i64, Vec<(i64, u32)>, Option<i64>) {
    counted(broker, user, FetchRequest::one("q", 10, TTL)).await
}

/// [`counted_fetch`] of `request`.
async fn counted(
    broker: &Arc<dyn Broker>,
    user: &CountedUser,
    request: FetchRequest,
) -> (i64, Vec<(i64, u32)>, Option<i64>) {
    let before = user.statements().await;
    let fetched = fetch_request(broker, request).await;
    // MariaDB adds a statement to the user's statistics after it sends the reply, so a
    // count read at once can miss the last one (seen on a loaded machine). Real time,
    // not the paused clock's.
    std::thread::sleep(Duration::from_millis(20));
    let asked = user.statements().await - before;
    let jobs = fetched.jobs.iter().map(|j| (j.id.0, j.attempt)).collect();
    (asked, jobs, fetched.next_due)
}

/// What each test works with: its database and counted user (both dropped at its end),
/// the paused clock, a broker of the counted user without a wake poller, and a producer of
/// the server's own user: another process, as far as the broker can tell, whose enqueues
/// wake nothing in it.
async fn setup() -> (
    TempDatabase,
    CountedUser,
    Clock,
    Arc<dyn Broker>,
    Arc<dyn Broker>,
) {
    let db = TempDatabase::migrated().await;
    let user = CountedUser::create(&db).await;
    let clock = Clock::tokio();
    let options = || MySqlOptions::default().clock(clock).wake_poll(None);
    let broker = MySqlBroker::connect_with(&user.url, options().connections(1))
        .await
        .expect("connect as the counted user");
    let producer = MySqlBroker::connect_with(&db.url, options()).await.unwrap();
    (db, user, clock, Arc::new(broker), Arc::new(producer))
}

/// Once a queue's claim comes back short, each poll of it is one statement outside a
/// transaction (where it was four or five) until it finds something; a fetch after this
/// broker's own enqueue skips the question; delayed jobs and expired leases are still found.
#[tokio::test(start_paused = true)]
async fn polling_a_queue_found_empty_is_one_statement() {
    let (_db, user, clock, broker, producer) = setup().await;

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
    // again. The reaper's read of expired leases found one, which its UPDATE then returns:
    // one statement more than a reaper that found none.
    tokio::time::advance(TTL + Duration::from_secs(1)).await;
    let (reaped, jobs, _) = counted_fetch(&broker, &user).await;
    assert_eq!(jobs, vec![(due.0, 2)], "the reaper returned the job");
    assert_eq!(
        reaped,
        probed_claim + 1,
        "the same question and claim, and the UPDATE"
    );

    // This broker's own enqueue wakes it: the fetch goes straight to the claim, one
    // statement less than a claim after the question.
    let own = enqueue(&broker, vec![NewJob::new("q", b"own".to_vec())]).await[0];
    tokio::time::advance(TTL + Duration::from_secs(1)).await;
    let (asked, jobs, _) = counted_fetch(&broker, &user).await;
    assert_eq!(jobs, vec![(due.0, 3), (own.0, 1)]);
    assert_eq!(asked, reaped - 1, "no question after a wake-up");
}

/// Over several queues, the question is still one statement: it gives the earliest due time
/// among them, and a job due in any one of them, whatever its priority, sends the fetch on
/// to the claim.
#[tokio::test(start_paused = true)]
async fn polling_several_queues_found_empty_is_one_statement() {
    let (_db, user, clock, broker, producer) = setup().await;
    let request = || FetchRequest {
        budgets: ["a", "b", "c"]
            .map(|queue| Budget {
                queue: queue.into(),
                limit: 5,
            })
            .into(),
        lease_ttl: TTL,
    };
    let now = clock.now_millis();
    let delayed = enqueue(
        &producer,
        vec![
            NewJob::new("a", b"a".to_vec()).delay(Duration::from_secs(30)),
            NewJob::new("b", b"b".to_vec())
                .delay(Duration::from_secs(10))
                .priority(-3),
        ],
    )
    .await;
    let (first, jobs, next_due) = counted(&broker, &user, request()).await;
    assert!(first >= 4, "a claim's transaction: {first} statements");
    assert_eq!((jobs.len(), next_due), (0, Some(now + 10_000)));
    for poll in 0..3 {
        let (asked, jobs, next_due) = counted(&broker, &user, request()).await;
        assert_eq!(
            (asked, jobs.len(), next_due),
            (1, 0, Some(now + 10_000)),
            "poll {poll}"
        );
    }
    let due = enqueue(&producer, vec![NewJob::new("c", b"c".to_vec()).priority(7)]).await[0];
    let (asked, jobs, next_due) = counted(&broker, &user, request()).await;
    assert_eq!((jobs, next_due), (vec![(due.0, 1)], Some(now + 10_000)));
    assert!(
        asked > first,
        "the question and the claim: {asked} against {first}"
    );
    // Time brings the delayed job of `b` due, and expires the lease of `c`'s: the question
    // finds both, and the claim takes both, by priority.
    tokio::time::advance(Duration::from_secs(10)).await;
    let (_, jobs, next_due) = counted(&broker, &user, request()).await;
    assert_eq!(jobs, vec![(due.0, 2), (delayed[1].0, 1)]);
    assert_eq!(next_due, Some(now + 30_000));
}
