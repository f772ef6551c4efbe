//! Groups on PostgreSQL, beyond the shared suite: two brokers (two pools) settling a
//! group's last members while it is sealed, round after round, enqueue the completion job
//! once per group; the sweep fires a group left sealed and settled without one; the
//! migration that brings groups keeps the jobs stored before it.

use std::collections::BTreeMap;
use std::time::Duration;

use hopper_core::group::GroupOutcome;
use hopper_core::{Broker, Error, FetchRequest, JobId, NewJob, Outcome, Settlement};
use hopper_postgres::{PgBroker, PgOptions};
use sqlx::{Connection, PgConnection};

use super::plans::DropSchema;
use super::support::{broker_with, schema_at, url};

const TTL: Duration = Duration::from_secs(60);

fn member(group: &str, i: usize) -> NewJob {
    NewJob::new("m", format!("{group}-{i}").into_bytes()).group(group)
}

fn completion() -> NewJob {
    NewJob::new("done", b"report".to_vec())
}

fn settle(lease: hopper_core::LeaseId, job: JobId, outcome: Outcome) -> Settlement {
    Settlement {
        job,
        lease,
        outcome,
    }
}

/// Every completion job in `done`, claimed and acknowledged: each one's outcome.
async fn drain_done(broker: &PgBroker) -> Vec<GroupOutcome> {
    let mut out = Vec::new();
    loop {
        let got = broker
            .fetch(FetchRequest::one("done", 500, TTL))
            .await
            .unwrap();
        if got.jobs.is_empty() {
            return out;
        }
        let mut acks = Vec::new();
        for job in &got.jobs {
            out.push(GroupOutcome::of(job).expect("a completion job"));
            acks.push(settle(got.lease, job.id, Outcome::Ack));
        }
        broker.settle(acks).await.unwrap();
    }
}

/// Round after round, a group of five members: four claimed, one pending. Broker A acks
/// two and seals the group while broker B, on pools of its own, acks one, dead-letters
/// one and cancels the pending one, all at once. Whichever settles last, and whether the
/// seal comes before or after, the group's completion job is enqueued exactly once, with
/// the right outcome. A batch naming a sealed group is refused whole, storing nothing,
/// not even the row of a new group beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_settlements_and_seals_complete_each_group_once() {
    let (_keep, a) = broker_with(|o| o.listen(false)).await;
    let options = PgOptions::default()
        .schema(a.schema().to_owned())
        .listen(false);
    let b = PgBroker::connect_with(&url(), options).await.unwrap();
    const ROUNDS: usize = 60;
    for round in 0..ROUNDS {
        let g = format!("g{round}");
        let ids = a
            .enqueue((0..5).map(|i| member(&g, i)).collect())
            .await
            .unwrap();
        let held = a.fetch(FetchRequest::one("m", 4, TTL)).await.unwrap();
        assert_eq!(held.jobs.len(), 4);
        let got: Vec<JobId> = held.jobs.iter().map(|j| j.id).collect();
        let lease = held.lease;
        let pending = *ids.iter().find(|id| !got.contains(id)).unwrap();
        let (a_side, b_side) = (got[..2].to_vec(), got[2..].to_vec());
        let a_settles = async {
            let acks = a_side
                .iter()
                .map(|&id| settle(lease, id, Outcome::Ack))
                .collect();
            a.settle(acks).await.unwrap()
        };
        let a_seals = async { a.seal_group(&g, completion()).await.unwrap() };
        let b_settles = async {
            let report = b
                .settle(vec![settle(lease, b_side[0], Outcome::Ack)])
                .await
                .unwrap();
            let dead = Outcome::DeadLetter { error: "no".into() };
            b.settle(vec![settle(lease, b_side[1], dead)])
                .await
                .unwrap();
            report
        };
        let b_cancels = async { b.cancel(pending).await.unwrap() };
        // Vary who goes first from round to round.
        let (r1, sealed, r2, _) = if round % 2 == 0 {
            tokio::join!(a_settles, a_seals, b_settles, b_cancels)
        } else {
            let (r2, c, r1, s) = tokio::join!(b_settles, b_cancels, a_settles, a_seals);
            (r1, s, r2, c)
        };
        assert_eq!((r1.applied, r2.applied), (2, 1), "round {round}");
        assert!(sealed.sealed);
        let status = b.group(&g).await.unwrap().unwrap();
        assert_eq!(
            (status.members, status.succeeded, status.cancelled),
            (5, 3, 1),
            "round {round}"
        );
        assert_eq!(status.dead, vec![b_side[1]], "round {round}");
        assert!(status.completion.is_some(), "round {round}: fired");
    }
    let outcomes = drain_done(&a).await;
    let mut by_group: BTreeMap<String, Vec<GroupOutcome>> = BTreeMap::new();
    for o in outcomes {
        by_group.entry(o.group.clone()).or_default().push(o);
    }
    assert_eq!(by_group.len(), ROUNDS, "one completion job per group");
    for (g, got) in &by_group {
        assert_eq!(got.len(), 1, "group {g} completed once");
        let o = &got[0];
        assert_eq!(
            (o.members, o.succeeded, o.dead, o.cancelled),
            (5, 3, 1, 1),
            "{g}"
        );
    }

    // A sealed group refuses a batch, whole: the new group beside it is not made either.
    let refused = a.enqueue(vec![member("fresh", 0), member("g0", 9)]).await;
    match refused {
        Err(Error::Config(e)) => assert_eq!(e.setting, "group", "{e}"),
        other => panic!("expected a refusal naming group: {other:?}"),
    }
    assert_eq!(a.group("fresh").await.unwrap(), None, "nothing stored");
    assert_eq!(a.counts("m").await.unwrap().pending, 0);
    b.close().await;
}

/// Two brokers seal different groups at once, each group's members racing their
/// settlements on the other broker: no deadlock, and each completes once. Groups locked
/// in name order by every statement that counts several at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_of_many_groups_settled_at_once_count_without_deadlock() {
    let (_keep, a) = broker_with(|o| o.listen(false)).await;
    let options = PgOptions::default()
        .schema(a.schema().to_owned())
        .listen(false);
    let b = PgBroker::connect_with(&url(), options).await.unwrap();
    let groups: Vec<String> = (0..8).map(|i| format!("x{i}")).collect();
    for g in &groups {
        a.enqueue((0..6).map(|i| member(g, i)).collect())
            .await
            .unwrap();
        a.seal_group(g, completion()).await.unwrap();
    }
    let held = a.fetch(FetchRequest::one("m", 100, TTL)).await.unwrap();
    assert_eq!(held.jobs.len(), 48);
    // Each broker settles members of every group in one statement, in opposite orders.
    let mut mine: Vec<Settlement> = Vec::new();
    let mut theirs: Vec<Settlement> = Vec::new();
    for (i, job) in held.jobs.iter().enumerate() {
        let s = settle(held.lease, job.id, Outcome::Ack);
        if i % 2 == 0 {
            mine.push(s)
        } else {
            theirs.push(s)
        }
    }
    theirs.reverse();
    let (ra, rb) = tokio::join!(a.settle(mine), b.settle(theirs));
    assert_eq!(ra.unwrap().applied + rb.unwrap().applied, 48);
    let outcomes = drain_done(&a).await;
    assert_eq!(outcomes.len(), 8, "each group once");
    assert!(outcomes.iter().all(|o| o.succeeded == 6 && o.members == 6));
    b.close().await;
}

/// A sealed group with nothing unsettled and no completion job, as a process lost between
/// the count and the enqueue would leave it (made here by hand): a background sweep (the
/// other broker's at its first fetch, or one the first broker started late) enqueues the
/// job once, and wakes a fetch for it.
#[tokio::test]
async fn a_group_left_unfired_is_swept() {
    let (_keep, pg) = broker_with(|o| o.listen(false)).await;
    let ids = pg
        .enqueue(vec![member("s", 0), member("s", 1)])
        .await
        .unwrap();
    pg.seal_group("s", completion()).await.unwrap();
    let held = pg.fetch(FetchRequest::one("m", 10, TTL)).await.unwrap();
    let acks = ids
        .iter()
        .map(|&id| settle(held.lease, id, Outcome::Ack))
        .collect();
    pg.settle(acks).await.unwrap();
    let fired = pg.group("s").await.unwrap().unwrap().completion.unwrap();
    // Undo the enqueue: the group is settled and sealed, without its job.
    let schema = pg.schema().to_owned();
    let mut raw = PgConnection::connect(&url()).await.unwrap();
    let undone = sqlx::raw_sql(&format!(
        "DELETE FROM {schema}.hopper_jobs WHERE id = {};
         UPDATE {schema}.hopper_groups SET completion_id = NULL WHERE name = 's';",
        fired.0
    ))
    .execute(&mut raw)
    .await
    .unwrap();
    raw.close().await.unwrap();
    // Counted from the statements themselves: a read of the group afterwards would race
    // with the round `pg`'s first fetch started, whose sweep may already have fired it
    // again (it then leaves the other broker nothing to fire, and one job all the same).
    assert_eq!(
        undone.rows_affected(),
        2,
        "the job deleted, the group unfired"
    );

    let options = PgOptions::default().schema(schema).listen(false);
    let other = PgBroker::connect_with(&url(), options).await.unwrap();
    let mut swept = Vec::new();
    for _ in 0..200 {
        swept = drain_done(&other).await;
        if !swept.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(swept.len(), 1, "the sweep enqueued it");
    assert_eq!((swept[0].group.as_str(), swept[0].succeeded), ("s", 2));
    let status = other.group("s").await.unwrap().unwrap();
    assert!(status.completion.is_some_and(|id| id != fired));
    // A second sweep finds nothing to do; nor does a fire called again, as a sweep on
    // another broker that read the group before this one fired it calls it: under the
    // group's lock it finds the completion job there.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut raw = PgConnection::connect(&url()).await.unwrap();
    let again: bool = sqlx::query_scalar(&format!(
        "SELECT {}.hopper_group_fire('s', NULL, NULL)",
        other.schema()
    ))
    .fetch_one(&mut raw)
    .await
    .unwrap();
    raw.close().await.unwrap();
    assert!(!again, "fired once");
    assert!(drain_done(&other).await.is_empty(), "once");
    other.close().await;
}

/// A schema at version 11, as the release before groups left it, with a job stored then:
/// `migrate` adds the column and tables, the old job runs and settles as a plain job, and
/// groups work in it after.
#[tokio::test]
async fn a_schema_from_before_groups_keeps_its_jobs_and_counts_groups() {
    let options = schema_at(11).await;
    let name = options.schema.clone();
    let _cleanup = DropSchema(name.clone());
    let mut raw = PgConnection::connect(&url()).await.unwrap();
    let old = super::support::insert_old_job(&mut raw, &name).await;
    let applied = hopper_postgres::migrate_with(&url(), &options)
        .await
        .unwrap();
    assert_eq!(applied, 6);
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables
         WHERE schemaname = $1 AND tablename LIKE 'hopper_group%' ORDER BY 1",
    )
    .bind(&name)
    .fetch_all(&mut raw)
    .await
    .unwrap();
    assert_eq!(tables, ["hopper_group_dead", "hopper_groups"]);
    raw.close().await.unwrap();

    let broker = PgBroker::connect_with(&url(), options.listen(false))
        .await
        .unwrap();
    assert!(broker.capabilities().groups);
    let held = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    assert_eq!(
        held.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        [JobId(old)]
    );
    let report = broker
        .settle(vec![settle(held.lease, JobId(old), Outcome::Ack)])
        .await
        .unwrap();
    assert_eq!(report.applied, 1);
    let ids = broker.enqueue(vec![member("after", 0)]).await.unwrap();
    broker.seal_group("after", completion()).await.unwrap();
    let held = broker.fetch(FetchRequest::one("m", 10, TTL)).await.unwrap();
    broker
        .settle(vec![settle(held.lease, ids[0], Outcome::Ack)])
        .await
        .unwrap();
    let done = drain_done(&broker).await;
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].members, done[0].succeeded), (1, 1));
    broker.close().await;
}
