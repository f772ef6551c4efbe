//! What only a server shows: ids of concurrent and chunked enqueues, long errors, settling
//! under every outcome at once, and the UNION ALL claim over several queues.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, Budget, FetchRequest, JobState, NewJob, Outcome, Settlement};
use sqlx::Connection;

use super::support::broker_with;

const TTL: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_enqueues_return_the_ids_of_their_own_jobs() {
    let (broker, _) = broker_with(|o| o.wake_poll(None).connections(8)).await;
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let broker = broker.clone();
        tasks.push(tokio::spawn(async move {
            let mut made = Vec::new();
            for round in 0..10u64 {
                let values: Vec<u64> = (0..(1 + round * 7))
                    .map(|i| t * 1_000_000 + round * 1_000 + i)
                    .collect();
                let jobs = values
                    .iter()
                    .map(|v| NewJob::json("q", v).unwrap())
                    .collect();
                let ids = broker.enqueue(jobs).await.unwrap();
                made.extend(ids.into_iter().zip(values));
            }
            made
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    assert_eq!(
        all.iter().map(|(id, _)| *id).collect::<HashSet<_>>().len(),
        all.len()
    );
    for (id, value) in all.iter().step_by(7) {
        let rec = broker
            .job(*id)
            .await
            .unwrap()
            .expect("the job of a returned id");
        assert_eq!(
            rec.job.payload,
            serde_json::to_vec(value).unwrap(),
            "job {id}"
        );
    }
}

#[tokio::test]
async fn a_large_enqueue_is_chunked_in_one_transaction_and_keeps_its_order() {
    let (broker, _) = broker_with(|o| o.wake_poll(None)).await;
    let jobs: Vec<NewJob> = (0..2_500u32)
        .map(|i| NewJob::json("q", &i).unwrap())
        .collect();
    let ids = broker.enqueue(jobs).await.unwrap();
    assert_eq!(ids.len(), 2_500);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids in enqueue order");
    for i in [0usize, 999, 1_000, 2_499] {
        let rec = broker.job(ids[i]).await.unwrap().unwrap();
        assert_eq!(rec.job.payload, serde_json::to_vec(&i).unwrap(), "job {i}");
    }
    // A bad name anywhere refuses the whole call.
    let mut jobs: Vec<NewJob> = (0..1_500u32)
        .map(|i| NewJob::json("r", &i).unwrap())
        .collect();
    jobs.push(NewJob::new("bad name", "x"));
    assert!(broker.enqueue(jobs).await.unwrap_err().is_config());
    assert_eq!(broker.counts("r").await.unwrap().pending, 0);
}

#[tokio::test]
async fn every_outcome_in_one_settle_and_a_long_error_is_kept_whole() {
    let (broker, _) = broker_with(|o| o.wake_poll(None)).await;
    let ids = broker
        .enqueue((0..6).map(|i| NewJob::json("q", &i).unwrap()).collect())
        .await
        .unwrap();
    let held = broker.fetch(FetchRequest::one("q", 6, TTL)).await.unwrap();
    let long = "é".repeat(40_000);
    let outcomes = [
        Outcome::Ack,
        Outcome::Retry {
            delay: Duration::from_secs(60),
            error: "later".into(),
            step_aside: false,
        },
        Outcome::DeadLetter {
            error: long.clone(),
        },
        Outcome::Release,
        Outcome::Cancel,
        Outcome::Ack,
    ];
    let settlements: Vec<Settlement> = ids
        .iter()
        .zip(outcomes)
        .map(|(id, outcome)| Settlement {
            job: *id,
            lease: held.lease,
            outcome,
        })
        .collect();
    let report = broker.settle(settlements.clone()).await.unwrap();
    assert_eq!((report.applied, report.fenced.len()), (6, 0));
    assert!(broker.job(ids[0]).await.unwrap().is_none());
    let states: Vec<_> = [1, 2, 3, 4].iter().map(|&i| ids[i]).collect::<Vec<_>>();
    let mut got = Vec::new();
    for id in states {
        let rec = broker.job(id).await.unwrap().unwrap();
        got.push((rec.state, rec.job.attempt));
    }
    assert_eq!(
        got,
        vec![
            (JobState::Pending, 1),
            (JobState::Dead, 1),
            (JobState::Pending, 0),
            (JobState::Cancelled, 1)
        ]
    );
    let dead = broker.dead_letters("q", 10).await.unwrap();
    assert_eq!(
        dead[0].last_error.as_deref(),
        Some(long.as_str()),
        "the error is kept whole"
    );

    // The same settlements again are all fenced, and a job named twice applies once.
    let report = broker.settle(settlements).await.unwrap();
    assert_eq!((report.applied, report.fenced), (0, ids.clone()));
    let again = broker.fetch(FetchRequest::one("q", 6, TTL)).await.unwrap();
    assert_eq!(again.jobs.len(), 1, "the released job");
    let twice = vec![
        Settlement {
            job: again.jobs[0].id,
            lease: again.lease,
            outcome: Outcome::Ack,
        },
        Settlement {
            job: again.jobs[0].id,
            lease: again.lease,
            outcome: Outcome::Release,
        },
    ];
    let report = broker.settle(twice).await.unwrap();
    assert_eq!((report.applied, report.fenced), (1, vec![again.jobs[0].id]));
    assert!(
        broker.job(again.jobs[0].id).await.unwrap().is_none(),
        "the first (ack) won"
    );
}

#[tokio::test]
async fn one_fetch_serves_many_queues_and_a_queue_named_twice() {
    let (broker, _) = broker_with(|o| o.wake_poll(None)).await;
    for q in ["a", "b", "c"] {
        broker
            .enqueue((0..5).map(|i| NewJob::json(q, &i).unwrap()).collect())
            .await
            .unwrap();
    }
    let budget = |queue: &str, limit| Budget {
        queue: queue.into(),
        limit,
    };
    let fetched = broker
        .fetch(FetchRequest {
            budgets: vec![
                budget("a", 2),
                budget("b", 1),
                budget("a", 1),
                budget("c", 0),
                budget("none", 3),
            ],
            lease_ttl: TTL,
        })
        .await
        .unwrap();
    let queues: Vec<&str> = fetched.jobs.iter().map(|j| j.queue.as_str()).collect();
    assert_eq!(queues.iter().filter(|q| **q == "a").count(), 3);
    assert_eq!(queues.iter().filter(|q| **q == "b").count(), 1);
    assert_eq!(fetched.jobs.len(), 4);
    assert_eq!(
        fetched.next_due, None,
        "the short queue has nothing scheduled"
    );
    let mut ids: Vec<_> = fetched.jobs.iter().map(|j| j.id).collect();
    let sorted = {
        let mut s = ids.clone();
        s.sort();
        s
    };
    assert_eq!(ids, sorted, "equal priority and run_at: by id");
    ids.dedup();
    assert_eq!(ids.len(), 4, "no job twice");
}

#[tokio::test]
async fn queue_names_are_case_sensitive() {
    let (broker, _) = broker_with(|o| o.wake_poll(None)).await;
    let b: Arc<dyn Broker> = broker.clone();
    b.enqueue(vec![NewJob::new("Q", "upper")]).await.unwrap();
    assert_eq!(b.counts("q").await.unwrap().pending, 0);
    assert!(
        b.fetch(FetchRequest::one("q", 1, TTL))
            .await
            .unwrap()
            .jobs
            .is_empty()
    );
    assert_eq!(b.counts("Q").await.unwrap().pending, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_abandoned_halfway_leave_no_lock_and_no_broken_connection() {
    let (broker, _) = broker_with(|o| o.wake_poll(None).connections(2)).await;
    broker
        .enqueue(
            (0..200u32)
                .map(|i| NewJob::json("q", &i).unwrap())
                .collect(),
        )
        .await
        .unwrap();
    // Give up on fetches and settles at every stage of their transactions.
    let mut taken = 0;
    for i in 0..60u64 {
        // Both connections open, so that the calls below are cut mid-transaction rather
        // than while connecting.
        for _ in 0..2 {
            broker.counts("q").await.unwrap();
        }
        let give_up = Duration::from_micros(20 + 20 * i);
        let fetch = broker.fetch(FetchRequest::one("q", 2, TTL));
        if let Ok(Ok(fetched)) = tokio::time::timeout(give_up, fetch).await {
            let acks = fetched
                .jobs
                .iter()
                .map(|j| Settlement {
                    job: j.id,
                    lease: fetched.lease,
                    outcome: Outcome::Ack,
                })
                .collect();
            let done = tokio::time::timeout(give_up, broker.settle(acks)).await;
            taken += fetched.jobs.len();
            let _ = done;
        }
    }
    // The server rolls back an abandoned call's transaction when it sees its connection
    // close; give it a moment, then every job is either held or free to take.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let counts = broker.counts("q").await.unwrap();
    let gone = 200 - counts.pending - counts.leased;
    assert!(gone as usize <= taken, "{gone} acked of {taken} taken");
    let rest = broker
        .fetch(FetchRequest::one("q", 500, TTL))
        .await
        .unwrap();
    assert_eq!(
        rest.jobs.len() as u64,
        counts.pending,
        "no pending job is still locked"
    );
}

#[tokio::test]
async fn a_connection_the_server_closed_is_replaced() {
    let (broker, url) = broker_with(|o| o.wake_poll(None).connections(1)).await;
    let database = url.rsplit('/').next().unwrap().to_owned();
    let kill = || async {
        let mut admin = sqlx::MySqlConnection::connect(&super::support::server_url())
            .await
            .unwrap();
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT CAST(id AS SIGNED) FROM information_schema.processlist WHERE db = ?",
        )
        .bind(&database)
        .fetch_all(&mut admin)
        .await
        .unwrap();
        assert!(!ids.is_empty(), "the broker holds a connection");
        for id in ids {
            // A connection may end between the list and the kill (another test's cleanup
            // on the same server, say): "unknown thread id" is not a failure here.
            let _ = sqlx::query(&format!("KILL CONNECTION {id}"))
                .execute(&mut admin)
                .await;
        }
        admin.close().await.unwrap();
    };
    broker
        .enqueue(vec![NewJob::json("q", &1).unwrap()])
        .await
        .unwrap();

    kill().await;
    assert_eq!(
        broker.counts("q").await.unwrap().pending,
        1,
        "a read runs again"
    );
    kill().await;
    let fetched = broker.fetch(FetchRequest::one("q", 1, TTL)).await.unwrap();
    assert_eq!(fetched.jobs.len(), 1, "a fetch's transaction runs again");
    kill().await;
    // An insert may have been applied when its connection broke, so it is not repeated;
    // the next call opens a new connection.
    if let Err(e) = broker.enqueue(vec![NewJob::json("q", &2).unwrap()]).await {
        assert!(e.is_broker(), "{e:?}");
    }
    broker
        .enqueue(vec![NewJob::json("q", &3).unwrap()])
        .await
        .unwrap();
}

/// After a short claim a broker claims level by level, looking the levels up in the claim's
/// own transaction: jobs another broker (as another process would) enqueues at a new, higher
/// level are claimed first, whole batches of them; past sixteen levels the claim reads the
/// whole queue, and still in priority order.
#[tokio::test]
async fn claims_by_level_follow_every_level_in_priority_order() {
    let (broker, url) = broker_with(|o| o.wake_poll(None)).await;
    let other = hopper_mysql::MySqlBroker::connect(&url).await.unwrap();
    let fetch = |limit: usize| {
        let broker = broker.clone();
        async move {
            let f = broker
                .fetch(FetchRequest::one("q", limit, Duration::from_secs(30)))
                .await
                .unwrap();
            f.jobs.iter().map(|j| j.priority).collect::<Vec<i32>>()
        }
    };
    let at = |priority: i32, n: usize| -> Vec<NewJob> {
        (0..n)
            .map(|i| NewJob::json("q", &i).unwrap().priority(priority))
            .collect()
    };
    let delayed: Vec<NewJob> = (0..50)
        .map(|i| {
            NewJob::json("q", &i)
                .unwrap()
                .delay(Duration::from_secs(3600))
        })
        .collect();
    broker.enqueue(delayed).await.unwrap();
    broker.enqueue(at(0, 1)).await.unwrap();
    assert_eq!(fetch(10).await, [0], "the one due job: a short claim");

    // Claimed by level now. A new level above the known one fills the whole batch.
    other.enqueue(at(0, 3)).await.unwrap();
    other.enqueue(at(9, 10)).await.unwrap();
    assert_eq!(fetch(10).await, [9; 10], "the new, higher level first");
    assert_eq!(fetch(10).await, [0; 3], "then the level below; short again");

    // Seventeen more levels: more than a claim by level reads, so the whole queue.
    for p in 1..=17 {
        other.enqueue(at(p, 1)).await.unwrap();
    }
    let want: Vec<i32> = (8..=17).rev().collect();
    assert_eq!(fetch(10).await, want, "the ten highest of eighteen levels");
    let want: Vec<i32> = (1..=7).rev().collect();
    assert_eq!(fetch(10).await, want, "and the rest");
}
