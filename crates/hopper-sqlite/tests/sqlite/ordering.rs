//! Ordering keys past what the suite covers: jobs without a key never reach the ordering
//! index, brokers sharing a file keep one order, blocked jobs list as scheduled with their
//! own time, and a key moves on past an unreadable head, a re-drive of several of its dead
//! letters, keys another program wrote in something other than UTF-8, and own times
//! before 1970.

use std::time::{Duration, SystemTime};

use hopper_core::admin::{JobQuery, ListState};
use hopper_core::job::BLOCKED;
use hopper_core::{
    Broker, CancelOutcome, FetchRequest, JobId, JobState, LeaseId, NewJob, Outcome, Selection,
    Settlement,
};
use hopper_sqlite::SqliteBroker;
use tokio::time::advance;

use super::support::{TempDb, open_tokio};

const TTL: Duration = Duration::from_secs(30);

fn keyed(key: &str, payload: &str) -> NewJob {
    NewJob::new("q", payload.as_bytes().to_vec()).ordering_key(key)
}

/// Fetches up to 10 jobs of `q`: the lease and the ids taken.
async fn take(broker: &SqliteBroker) -> (LeaseId, Vec<JobId>) {
    let held = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    (held.lease, held.jobs.iter().map(|j| j.id).collect())
}

async fn settle(broker: &SqliteBroker, lease: LeaseId, ids: &[JobId], outcome: Outcome) {
    let settlements = ids
        .iter()
        .map(|&job| Settlement {
            job,
            lease,
            outcome: outcome.clone(),
        })
        .collect();
    let report = broker.settle(settlements).await.unwrap();
    assert_eq!((report.applied, report.fenced), (ids.len(), Vec::new()));
}

/// With the ordering index gone from the file, every call a plain job goes through still
/// works: its enqueue, claims and the reaper, each settlement, a fenced one too,
/// cancelling, re-drives, counts and listings. A job with a key, whose statements name the
/// index, fails, so the test would notice a plain path that ran one of them.
#[tokio::test(start_paused = true)]
async fn jobs_without_keys_never_reach_the_ordering_index() {
    let db = TempDb::new("no_ordering_index");
    drop(open_tokio(&db).await);
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    raw.execute_batch("DROP INDEX hopper_jobs_ordering")
        .unwrap();
    drop(raw);
    let broker = open_tokio(&db).await;

    let jobs = (0..9).map(|i| NewJob::new("q", vec![i]).max_attempts(1));
    let ids = broker.enqueue(jobs.collect()).await.unwrap();
    let held = broker.fetch(FetchRequest::one("q", 7, TTL)).await.unwrap();
    assert_eq!(held.jobs.len(), 7);
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
    let settlements = ids.iter().zip(outcomes).map(|(&job, outcome)| Settlement {
        job,
        lease: held.lease,
        outcome,
    });
    let report = broker.settle(settlements.collect()).await.unwrap();
    assert_eq!((report.applied, report.fenced.len()), (6, 0));
    let stale = Settlement::ack(&held.jobs[0]);
    assert_eq!(broker.settle(vec![stale]).await.unwrap().fenced, [ids[0]]);
    assert_eq!(
        broker.cancel(ids[8]).await.unwrap(),
        CancelOutcome::Cancelled
    );
    // The seventh job's lease runs out on its one attempt: the reaper dead-letters it.
    advance(TTL + Duration::from_secs(1)).await;
    let again = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    assert_eq!(
        again.jobs.len(),
        4,
        "retried, released, snoozed, never taken"
    );
    let dead = Selection::Queue {
        queue: "q".into(),
        at_most: 10,
    };
    assert_eq!(broker.retry_dead(&dead).await.unwrap(), 2);
    broker.queue_stats("q").await.unwrap();
    for state in [ListState::Pending, ListState::Leased, ListState::Cancelled] {
        let query = JobQuery::new("q", state, 10);
        broker.list_jobs(&query).await.unwrap();
    }

    let refused = broker.enqueue(vec![keyed("k", "k")]).await.unwrap_err();
    assert!(
        format!("{refused:?}").contains("hopper_jobs_ordering"),
        "a job with a key reads the index: {refused:?}"
    );
}

/// Two brokers on one file, as two processes would be: a key's jobs enqueued through one
/// and claimed through either still run one at a time, and the acknowledgement through
/// one lets the next go for the other.
#[tokio::test(start_paused = true)]
async fn brokers_sharing_a_file_keep_one_order() {
    let db = TempDb::new("ordering_shared");
    let (a, b) = (open_tokio(&db).await, open_tokio(&db).await);
    let ids = a
        .enqueue(vec![keyed("k", "1"), keyed("k", "2"), keyed("k", "3")])
        .await
        .unwrap();
    let (lease, taken) = take(&b).await;
    assert_eq!(taken, [ids[0]]);
    assert!(take(&a).await.1.is_empty(), "2 waits for 1, whoever asks");
    settle(&a, lease, &taken, Outcome::Ack).await;
    let (lease, taken) = take(&a).await;
    assert_eq!(taken, [ids[1]]);
    settle(&b, lease, &taken, Outcome::Cancel).await;
    assert_eq!(take(&b).await.1, [ids[2]]);
}

/// A blocked job counts as scheduled, and lists among the scheduled jobs after every one
/// that falls due at a time, with its own time and `blocked` in its record; pages of one
/// job walk through them and back.
#[tokio::test(start_paused = true)]
async fn blocked_jobs_list_as_scheduled_with_their_own_time() {
    let db = TempDb::new("ordering_listing");
    let broker = open_tokio(&db).await;
    let hour = Duration::from_secs(3600);
    let ids = broker
        .enqueue(vec![
            keyed("k", "head"),
            keyed("k", "later").delay(Duration::from_secs(60)),
            keyed("k", "next"),
            NewJob::new("q", b"plain".to_vec()).delay(hour),
        ])
        .await
        .unwrap();
    let counts = broker.counts("q").await.unwrap();
    assert_eq!((counts.pending, counts.scheduled), (1, 3));

    let head = broker.job(ids[0]).await.unwrap().unwrap();
    let mut query = JobQuery::new("q", ListState::Scheduled, 1);
    let mut listed = Vec::new();
    loop {
        let page = broker.list_jobs(&query).await.unwrap();
        for r in &page.jobs {
            let delay = r.job.run_at - head.job.run_at;
            listed.push((r.job.id, delay, r.blocked, r.ordering_key.clone()));
        }
        let Some(next) = page.next else { break };
        query.after = Some(next);
    }
    let k = Some("k".to_owned());
    assert_eq!(
        listed,
        [
            (ids[3], 3_600_000, false, None),
            (ids[2], 0, true, k.clone()),
            (ids[1], 60_000, true, k.clone()),
        ],
        "the blocked jobs after every real time, by their own time"
    );
    let mut newest = JobQuery::new("q", ListState::Scheduled, 2);
    newest.newest_first = true;
    let page = broker.list_jobs(&newest).await.unwrap();
    newest.after = page.next;
    let rest = broker.list_jobs(&newest).await.unwrap();
    let back: Vec<JobId> = page
        .jobs
        .iter()
        .chain(&rest.jobs)
        .map(|r| r.job.id)
        .collect();
    assert_eq!(back, [ids[1], ids[2], ids[3]]);
    assert_eq!((head.blocked, head.ordering_key), (false, k));
}

/// A head that cannot be read as a job is dead-lettered by the claim that meets it, and
/// the next job of its key goes.
#[tokio::test(start_paused = true)]
async fn an_unreadable_head_is_buried_and_its_key_moves_on() {
    let db = TempDb::new("ordering_unreadable");
    let broker = open_tokio(&db).await;
    let ids = broker
        .enqueue(vec![keyed("k", "1"), keyed("k", "2")])
        .await
        .unwrap();
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    raw.execute(
        "UPDATE hopper_jobs SET headers = '[1]' WHERE id = ?1",
        [ids[0].0],
    )
    .unwrap();
    drop(raw);
    let mut taken = take(&broker).await.1;
    if taken.is_empty() {
        // The claim read its candidates before the burial unblocked the next one.
        taken = take(&broker).await.1;
    }
    assert_eq!(taken, [ids[1]]);
    let buried = broker.job(ids[0]).await.unwrap().unwrap();
    assert_eq!(buried.state, JobState::Dead);
}

/// Dead letters of one key re-driven together, with no job of the key left, run one at a
/// time, the smallest id first.
#[tokio::test(start_paused = true)]
async fn re_driven_dead_letters_of_a_key_run_in_id_order() {
    let db = TempDb::new("ordering_redrive");
    let broker = open_tokio(&db).await;
    let ids = broker
        .enqueue(vec![keyed("k", "1"), keyed("k", "2")])
        .await
        .unwrap();
    for id in &ids {
        let (lease, taken) = take(&broker).await;
        assert_eq!(taken, [*id]);
        let died = Outcome::DeadLetter { error: "no".into() };
        settle(&broker, lease, &taken, died).await;
    }
    let both = Selection::Jobs(vec![ids[1], ids[0]]);
    assert_eq!(broker.retry_dead(&both).await.unwrap(), 2);
    let (lease, taken) = take(&broker).await;
    assert_eq!(taken, [ids[0]], "the first alone");
    assert!(broker.job(ids[1]).await.unwrap().unwrap().blocked);
    settle(&broker, lease, &taken, Outcome::Ack).await;
    assert_eq!(take(&broker).await.1, [ids[1]]);
}

/// Another program's key that is not UTF-8 text still moves on when its head ends: the
/// broker binds back the bytes it read.
#[tokio::test(start_paused = true)]
async fn a_key_not_in_utf8_still_moves_on() {
    let db = TempDb::new("ordering_bytes");
    drop(open_tokio(&db).await);
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    raw.execute(
        "INSERT INTO hopper_jobs (id, queue, run_at, max_attempts, payload, created_at,
                                  ordering_key)
         VALUES (1, 'q', 0, 5, x'', 0, CAST(x'ff' AS TEXT)),
                (2, 'q', ?1, 5, x'', 0, CAST(x'ff' AS TEXT))",
        [BLOCKED],
    )
    .unwrap();
    drop(raw);
    let broker = open_tokio(&db).await;
    let (lease, taken) = take(&broker).await;
    assert_eq!(taken, [JobId(1)]);
    settle(&broker, lease, &taken, Outcome::Ack).await;
    assert_eq!(take(&broker).await.1, [JobId(2)]);
}

/// A job blocked with its own time before 1970 sits below `BLOCKED`
/// (`hopper_core::job::is_blocked` would call it unblocked): the broker still tells it
/// blocked, shows its own time, and unblocks it when the head ends.
#[tokio::test(start_paused = true)]
async fn a_job_due_before_1970_waits_and_goes() {
    let db = TempDb::new("ordering_1969");
    let broker = open_tokio(&db).await;
    let before_1970 = SystemTime::UNIX_EPOCH - Duration::from_secs(1);
    let ids = broker
        .enqueue(vec![
            keyed("k", "head"),
            keyed("k", "old").run_at(before_1970),
        ])
        .await
        .unwrap();
    let old = broker.job(ids[1]).await.unwrap().unwrap();
    assert_eq!((old.blocked, old.job.run_at), (true, -1000));
    let (lease, taken) = take(&broker).await;
    assert_eq!(taken, [ids[0]]);
    settle(&broker, lease, &taken, Outcome::Ack).await;
    assert_eq!(take(&broker).await.1, [ids[1]]);
}
