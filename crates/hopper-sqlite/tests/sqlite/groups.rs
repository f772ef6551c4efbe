//! Groups on a file: members settled through two brokers of one file at the same moment
//! complete each group once; a completion job's time and ordering key are kept through the
//! seal; jobs of no group never reach the groups' tables.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Barrier;

use hopper_core::group::GroupOutcome;
use hopper_core::{Broker, FetchRequest, JobId, NewJob, Outcome, Settlement};
use hopper_sqlite::SqliteBroker;

use super::support::{TempDb, open_tokio};

const TTL: Duration = Duration::from_secs(60);
const ROUNDS: usize = 60;

fn member(group: &str, i: usize) -> NewJob {
    NewJob::new("q", vec![i as u8]).group(group)
}

fn completion() -> NewJob {
    NewJob::new("done", b"report".to_vec())
}

fn settlement(fetched: &hopper_core::Fetched, outcome: Outcome) -> Settlement {
    assert_eq!(fetched.jobs.len(), 1, "one member each");
    Settlement {
        job: fetched.jobs[0].id,
        lease: fetched.lease,
        outcome,
    }
}

/// The outcomes of a round's two members, by round: each way a member settles, against
/// each other.
fn outcomes(round: usize) -> (Outcome, Outcome) {
    let dead = || Outcome::DeadLetter {
        error: "boom".into(),
    };
    match round % 4 {
        0 => (Outcome::Ack, Outcome::Ack),
        1 => (Outcome::Ack, dead()),
        2 => (Outcome::Cancel, Outcome::Ack),
        _ => (dead(), Outcome::Cancel),
    }
}

/// Each round a group of two members, one claimed through each broker of the file; both
/// settle at once, each on its own broker's thread and connection, and in every other
/// round the seal goes at the same moment too. Whichever transaction counts the last
/// member (or seals), each group gets exactly one completion job, with its counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_brokers_settling_the_last_members_at_once_complete_each_group_once() {
    let db = TempDb::new("groups_shared");
    let one: Arc<dyn Broker> = Arc::new(SqliteBroker::open(db.path()).await.unwrap());
    let two: Arc<dyn Broker> = Arc::new(SqliteBroker::open(db.path()).await.unwrap());
    for round in 0..ROUNDS {
        let group = format!("g{round}");
        one.enqueue(vec![member(&group, 0), member(&group, 1)])
            .await
            .unwrap();
        let sealed_first = round % 2 == 0;
        if sealed_first {
            two.seal_group(&group, completion()).await.unwrap();
        }
        let a = one.fetch(FetchRequest::one("q", 1, TTL)).await.unwrap();
        let b = two.fetch(FetchRequest::one("q", 1, TTL)).await.unwrap();
        let (x, y) = outcomes(round);
        let (a, b) = (settlement(&a, x), settlement(&b, y));
        // The two settlements, and the seal when it was not made first, start together,
        // each from a task of its own.
        let start = Arc::new(Barrier::new(3));
        let settle = |broker: &Arc<dyn Broker>, s: Settlement| {
            let (broker, start) = (broker.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                broker.settle(vec![s]).await.unwrap()
            })
        };
        let (settle_a, settle_b) = (settle(&one, a), settle(&two, b));
        let seal = {
            let (broker, start, group) = (one.clone(), start.clone(), group.clone());
            tokio::spawn(async move {
                start.wait().await;
                if !sealed_first {
                    broker.seal_group(&group, completion()).await.unwrap();
                }
            })
        };
        let (ra, rb, sealed) = tokio::join!(settle_a, settle_b, seal);
        sealed.unwrap();
        assert_eq!((ra.unwrap().applied, rb.unwrap().applied), (1, 1));
    }

    let done = one
        .fetch(FetchRequest::one("done", 10 * ROUNDS, TTL))
        .await
        .unwrap();
    assert_eq!(done.jobs.len(), ROUNDS, "one completion job per group");
    let mut seen = BTreeSet::new();
    for job in &done.jobs {
        let outcome = GroupOutcome::of(job).expect("a completion job");
        let round: usize = outcome.group[1..].parse().unwrap();
        assert!(seen.insert(round), "{} completed twice", outcome.group);
        let (x, y) = outcomes(round);
        let of = |o: &Outcome| match o {
            Outcome::Ack => (1, 0, 0),
            Outcome::DeadLetter { .. } => (0, 1, 0),
            _ => (0, 0, 1),
        };
        let (p, q) = (of(&x), of(&y));
        assert_eq!(
            (
                outcome.members,
                outcome.succeeded,
                outcome.dead,
                outcome.cancelled
            ),
            (2, p.0 + q.0, p.1 + q.1, p.2 + q.2),
            "{}",
            outcome.group
        );
        let status = two.group(&outcome.group).await.unwrap().unwrap();
        assert_eq!(status.completion, Some(job.id));
        assert_eq!(status.unsettled(), 0);
    }
    assert_eq!(one.counts("q").await.unwrap().pending, 0);
}

/// The completion job's time is reckoned when it is enqueued, not at the seal; its
/// ordering key is kept, so it waits behind a job of its key.
#[tokio::test(start_paused = true)]
async fn a_completion_keeps_its_delay_and_its_ordering_key() {
    let db = TempDb::new("groups_completion");
    let broker = open_tokio(&db).await;
    let ids = broker
        .enqueue(vec![
            member("g", 0),
            member("g", 1),
            NewJob::new("done", b"first".to_vec()).ordering_key("k"),
        ])
        .await
        .unwrap();
    let late = completion()
        .delay(Duration::from_secs(60))
        .ordering_key("k");
    let sealed = broker.seal_group("g", late).await.unwrap();
    assert_eq!((sealed.members, sealed.completion), (2, None));
    tokio::time::advance(Duration::from_secs(3600)).await;
    let held = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    let acks: Vec<Settlement> = held.jobs.iter().map(Settlement::ack).collect();
    assert_eq!(broker.settle(acks).await.unwrap().applied, 2);
    // The broker's now, as it stamps a job (the clock is paused).
    let probe = broker
        .enqueue(vec![NewJob::new("probe", b"now".to_vec())])
        .await
        .unwrap()[0];
    let fired_at = broker.job(probe).await.unwrap().unwrap().job.created_at;
    let status = broker.group("g").await.unwrap().unwrap();
    assert_eq!(status.succeeded, 2);
    let done: JobId = status.completion.expect("completed");
    let record = broker.job(done).await.unwrap().unwrap();
    assert_eq!(
        record.job.run_at,
        fired_at + 60_000,
        "delayed from its enqueue"
    );
    assert_eq!(
        (record.ordering_key.as_deref(), record.blocked),
        (Some("k"), true),
        "behind the key's first job"
    );
    assert_eq!(GroupOutcome::of(&record.job).unwrap().succeeded, 2);
    assert_ne!(ids[2], done);
}

/// Jobs of no group, settled every way that ends one, never make a row in the groups'
/// tables, and their rows carry no group.
#[tokio::test(start_paused = true)]
async fn jobs_of_no_group_never_touch_the_groups_tables() {
    let db = TempDb::new("groups_plain");
    let broker = open_tokio(&db).await;
    let jobs = (0..4).map(|i| NewJob::new("q", vec![i]).max_attempts(1));
    let ids = broker.enqueue(jobs.collect()).await.unwrap();
    let held = broker.fetch(FetchRequest::one("q", 3, TTL)).await.unwrap();
    let outcomes = [
        Outcome::Ack,
        Outcome::DeadLetter { error: "x".into() },
        Outcome::Cancel,
    ];
    let settlements = held
        .jobs
        .iter()
        .zip(outcomes)
        .map(|(j, outcome)| Settlement {
            job: j.id,
            lease: held.lease,
            outcome,
        })
        .collect();
    assert_eq!(broker.settle(settlements).await.unwrap().applied, 3);
    broker.cancel(ids[3]).await.unwrap();
    broker.purge("q").await.unwrap();
    drop(broker);
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    let rows: i64 = raw
        .query_row(
            "SELECT (SELECT count(*) FROM hopper_groups)
                  + (SELECT count(*) FROM hopper_group_dead)",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(rows, 0);
}

/// A group's completion job is enqueued once even if a member is counted after it was:
/// here a row another program gave the completed group, claimed and acknowledged. The
/// group keeps the job it has (`completion_id`), and counts the stray member.
#[tokio::test(start_paused = true)]
async fn a_completed_group_never_completes_again() {
    let db = TempDb::new("groups_once");
    let broker = open_tokio(&db).await;
    let sealed = broker.seal_group("g", completion()).await.unwrap();
    let first = sealed
        .completion
        .expect("an empty group completes at its seal");
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    raw.execute(
        "INSERT INTO hopper_jobs (queue, state, run_at, max_attempts, payload, created_at,
                                  group_name)
         VALUES ('q', 0, 0, 1, x'00', 0, 'g')",
        [],
    )
    .unwrap();
    drop(raw);
    let held = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    let acks: Vec<Settlement> = held.jobs.iter().map(Settlement::ack).collect();
    assert_eq!(broker.settle(acks).await.unwrap().applied, 1);
    let status = broker.group("g").await.unwrap().unwrap();
    assert_eq!((status.succeeded, status.completion), (1, Some(first)));
    let done = broker
        .fetch(FetchRequest::one("done", 10, TTL))
        .await
        .unwrap();
    assert_eq!(done.jobs.len(), 1, "the one from the seal");
}
