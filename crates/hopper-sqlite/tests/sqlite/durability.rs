//! What is written survives closing and reopening the file.

use std::time::Duration;

use hopper_core::{Broker, FetchRequest, JobState, NewJob, Outcome, QueueCounts, Settlement};
use hopper_sqlite::SqliteBroker;

use super::support::{TempDb, open_tokio};

const TTL: Duration = Duration::from_secs(30);

#[tokio::test(start_paused = true)]
async fn jobs_survive_closing_and_reopening_the_file() {
    let db = TempDb::new("reopen");
    let made = vec![
        NewJob::new("q", vec![1u8, 2, 3, 255])
            .priority(7)
            .max_attempts(3)
            .header("trace", "abc")
            .header("tenant", "t1"),
        NewJob::new("q", Vec::new()),
        NewJob::json("q", &serde_json::json!({"to": "ada@example.com"})).unwrap(),
        NewJob::new("q", "later").delay(Duration::from_secs(3600)),
    ];
    let ids = {
        let broker = open_tokio(&db).await;
        broker.enqueue(made.clone()).await.unwrap()
    };

    let broker = open_tokio(&db).await;
    assert_eq!(
        broker.counts("q").await.unwrap(),
        QueueCounts {
            pending: 3,
            scheduled: 1,
            leased: 0,
            dead: 0
        }
    );
    let fetched = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    let got: Vec<_> = fetched.jobs.iter().map(|j| j.id).collect();
    assert_eq!(got, ids[..3].to_vec(), "the due jobs, priority 7 first");
    for (job, new) in fetched.jobs.iter().zip(&made) {
        assert_eq!(job.payload, new.payload, "payload of job {}", job.id);
        assert_eq!(job.headers, new.headers, "headers of job {}", job.id);
        assert_eq!(job.priority, new.priority, "priority of job {}", job.id);
        assert_eq!(
            job.max_attempts, new.max_attempts,
            "max_attempts of job {}",
            job.id
        );
        assert_eq!(job.attempt, 1, "attempt of job {}", job.id);
    }
    let lease = fetched.lease;
    let first = ids[0];
    drop(broker);

    // Leases are in the file too: after a reopen nobody else can take the held jobs, and
    // their holder can still settle them.
    let broker = open_tokio(&db).await;
    let again = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    assert!(
        again.jobs.is_empty(),
        "held jobs were fetched again after reopening"
    );
    let record = broker.job(first).await.unwrap().expect("job kept");
    assert_eq!(record.state, JobState::Leased);
    assert_eq!(record.job.lease, lease);
    let report = broker
        .settle(vec![Settlement {
            job: first,
            lease,
            outcome: Outcome::Ack,
        }])
        .await
        .unwrap();
    assert_eq!(
        report.applied, 1,
        "settled under the lease taken before the reopen"
    );
    drop(broker);

    let broker = open_tokio(&db).await;
    assert!(
        broker.job(first).await.unwrap().is_none(),
        "the ack was lost"
    );
    assert_eq!(broker.counts("q").await.unwrap().leased, 2);
}

#[tokio::test]
async fn a_clone_keeps_the_broker_open() {
    let db = TempDb::new("clone");
    let broker = SqliteBroker::open(db.path()).await.unwrap();
    let clone = broker.clone();
    drop(broker);
    let ids = clone.enqueue(vec![NewJob::new("q", "x")]).await.unwrap();
    assert_eq!(clone.counts("q").await.unwrap().pending, 1);
    assert_eq!(ids.len(), 1);
    assert_eq!(clone.path(), db.path());
}

/// A fetch takes expired leases back at most once a second, as on PostgreSQL: the reaper's
/// two statements ran on every fetch before, even when nothing had expired.
#[tokio::test(start_paused = true)]
async fn expired_leases_are_taken_back_at_most_once_a_second() {
    let db = TempDb::new("reap-pace");
    let broker = open_tokio(&db).await;
    let ids = broker
        .enqueue(vec![NewJob::new("q", "a"), NewJob::new("q", "b")])
        .await
        .unwrap();
    let short = Duration::from_millis(300);
    // t = 0: the reaper runs (nothing to take back), and job a goes out for 300 ms.
    let first = broker
        .fetch(FetchRequest::one("q", 1, short))
        .await
        .unwrap();
    assert_eq!(first.jobs[0].id, ids[0]);

    // t = 400 ms: a's lease has expired, but the reaper ran less than a second ago, so the
    // fetch finds only b.
    tokio::time::advance(Duration::from_millis(400)).await;
    let second = broker.fetch(FetchRequest::one("q", 2, TTL)).await.unwrap();
    let got: Vec<_> = second.jobs.iter().map(|j| j.id).collect();
    assert_eq!(got, [ids[1]]);

    // t = 1 s: the reaper is due again and a comes back on its second attempt.
    tokio::time::advance(Duration::from_millis(600)).await;
    let third = broker.fetch(FetchRequest::one("q", 2, TTL)).await.unwrap();
    let got: Vec<_> = third.jobs.iter().map(|j| (j.id, j.attempt)).collect();
    assert_eq!(got, [(ids[0], 2)]);
}
