//! Unique keys past what the suite covers: jobs without a key never reach the keys' table,
//! whatever becomes of them, and worker reports sweep away the keys whose hold ended.

use std::time::Duration;

use hopper_core::admin::{JobQuery, ListState};
use hopper_core::{
    Broker, FetchRequest, JobState, NewJob, Outcome, QueueBeat, Selection, Settlement, UniqueScope,
    WorkerBeat, WorkerInfo,
};
use tokio::time::advance;

use super::support::{TempDb, open_tokio};

const TTL: Duration = Duration::from_secs(30);

fn settlement(
    job: hopper_core::JobId,
    lease: hopper_core::LeaseId,
    outcome: Outcome,
) -> Settlement {
    Settlement {
        job,
        lease,
        outcome,
    }
}

/// With the keys' table gone from the file, every call a plain job goes through still
/// works: its enqueue, claims and the reaper, each settlement, cancelling, re-drives,
/// counts and purges. None of them so much as names the table. A job with a key, which
/// must read it, fails, so the test would notice a plain path that read it too.
#[tokio::test(start_paused = true)]
async fn jobs_without_keys_never_touch_the_keys_table() {
    let db = TempDb::new("no_keys_table");
    drop(open_tokio(&db).await);
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    raw.execute_batch("DROP TABLE hopper_unique").unwrap();
    drop(raw);
    let broker = open_tokio(&db).await;

    let jobs = (0..9).map(|i| NewJob::new("q", vec![i]).max_attempts(1));
    let ids = broker.enqueue(jobs.collect()).await.unwrap();
    let held = broker.fetch(FetchRequest::one("q", 7, TTL)).await.unwrap();
    assert_eq!(held.jobs.len(), 7);
    let lease = held.lease;
    let error = || "no".to_owned();
    let outcomes = [
        Outcome::Ack,
        Outcome::Retry {
            delay: Duration::from_secs(1),
            error: error(),
            step_aside: false,
        },
        Outcome::DeadLetter { error: error() },
        Outcome::Release,
        Outcome::Snooze {
            delay: Duration::from_secs(1),
        },
        Outcome::Cancel,
    ];
    let settlements = ids.iter().zip(outcomes);
    let settlements = settlements
        .map(|(id, o)| settlement(*id, lease, o))
        .collect();
    let report = broker.settle(settlements).await.unwrap();
    assert_eq!((report.applied, report.fenced.len()), (6, 0));
    assert_eq!(
        broker.cancel(ids[8]).await.unwrap(),
        hopper_core::CancelOutcome::Cancelled
    );
    // The seventh job's lease runs out: the next fetch's reaper dead-letters it (its one
    // attempt was charged), and the fetch takes the jobs back in the queue.
    advance(TTL + Duration::from_secs(1)).await;
    let again = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    assert_eq!(
        again.jobs.len(),
        4,
        "retried, released, snoozed, never taken"
    );
    let reaped = broker.job(ids[6]).await.unwrap().unwrap();
    assert_eq!(reaped.state, JobState::Dead);
    let dead = Selection::Queue {
        queue: "q".into(),
        at_most: 10,
    };
    assert_eq!(broker.retry_dead(&dead).await.unwrap(), 2);
    broker.queue_stats("q").await.unwrap();
    for state in [ListState::Pending, ListState::Leased, ListState::Cancelled] {
        broker
            .list_jobs(&JobQuery::new("q", state, 10))
            .await
            .unwrap();
    }
    assert_eq!(
        broker.purge("q").await.unwrap(),
        8,
        "all but the acknowledged"
    );

    let keyed = NewJob::new("q", b"k".to_vec()).unique_key("k");
    let refused = broker.enqueue(vec![keyed]).await.unwrap_err();
    assert!(
        format!("{refused:?}").contains("hopper_unique"),
        "a job with a key reads the table: {refused:?}"
    );
}

/// A worker report deletes the keys whose hold ended, and only those.
#[tokio::test(start_paused = true)]
async fn worker_reports_sweep_keys_whose_hold_ended() {
    let db = TempDb::new("sweep_keys");
    let broker = open_tokio(&db).await;
    let keyed = |queue: &str, scope| NewJob::new(queue, b"k".to_vec()).unique("k", scope);
    let minute = UniqueScope::For(Duration::from_secs(60));
    let second = UniqueScope::For(Duration::from_secs(1));
    let ids = broker
        .enqueue(vec![
            keyed("waiting", UniqueScope::Unfinished),
            keyed("acked", UniqueScope::Unfinished),
            keyed("taken", UniqueScope::Queued),
            keyed("running", UniqueScope::Unfinished),
            keyed("minute", minute),
            keyed("second", second),
        ])
        .await
        .unwrap();
    for (queue, id, ack) in [
        ("acked", ids[1], true),
        ("taken", ids[2], false),
        ("running", ids[3], false),
        ("minute", ids[4], true),
    ] {
        let held = broker
            .fetch(FetchRequest::one(queue, 1, TTL))
            .await
            .unwrap();
        if ack {
            let done = settlement(id, held.lease, Outcome::Ack);
            broker.settle(vec![done]).await.unwrap();
        }
    }
    advance(Duration::from_secs(2)).await;
    assert_eq!(held_keys(&db).len(), 6, "nothing swept before a report");

    let beat = WorkerBeat {
        worker: WorkerInfo::this_process(0, vec![QueueBeat::default()]),
        ttl: TTL,
        settled: Vec::new(),
    };
    broker.heartbeat(&beat).await.unwrap();
    assert_eq!(held_keys(&db), ["minute", "running", "waiting"]);
}

/// The queues whose key `k` is in the keys' table, in order.
fn held_keys(db: &TempDb) -> Vec<String> {
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    let mut keys = raw
        .prepare("SELECT queue FROM hopper_unique WHERE key = 'k' ORDER BY queue")
        .unwrap();
    keys.query_map([], |row| row.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}
