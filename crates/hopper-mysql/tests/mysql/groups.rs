//! Groups on the real server: two brokers (two pools) settling a group's last members
//! while one of them seals it, round after round, enqueue exactly one completion job per
//! group; and a database of the previous version gains groups, its jobs plain.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, GroupOutcome, JobId, NewJob, Outcome, Settlement};
use hopper_mysql::{MySqlBroker, MySqlOptions};
use hopper_testkit::helpers::{enqueue, fetch};
use sqlx::{Connection, MySqlConnection};

use super::migrations::database_at;
use super::support::{TempDatabase, broker_with};

const TTL: Duration = Duration::from_secs(30);

fn member(group: &str, name: &str) -> NewJob {
    NewJob::new("m", name.as_bytes().to_vec()).group(group)
}

async fn second_broker(url: &str) -> Arc<dyn Broker> {
    Arc::new(
        MySqlBroker::connect_with(url, MySqlOptions::default().wake_poll(None))
            .await
            .unwrap(),
    )
}

/// Each round, a group of three: broker A holds one member, broker B two; A acks its
/// member, B dead-letters one and cancels the other (as a settlement), and the seal comes
/// from A or B, all at once (the seal put off by up to 2.5 ms, so that it is also last). Whichever settles last, or the seal, enqueues the completion
/// job: exactly once per group, with the group's outcome, and the group names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_settlements_and_seals_complete_each_group_once() {
    let (a, url) = broker_with(|o| o.wake_poll(None)).await;
    let b = second_broker(&url).await;
    const ROUNDS: usize = 60;
    for round in 0..ROUNDS {
        let group = format!("g{round}");
        let made = enqueue(
            &a,
            vec![
                member(&group, "x"),
                member(&group, "y"),
                member(&group, "z"),
            ],
        )
        .await;
        let held_a = fetch(&a, "m", 1, TTL).await;
        let held_b = fetch(&b, "m", 2, TTL).await;
        assert_eq!(held_a.jobs.len() + held_b.jobs.len(), 3, "round {round}");
        let ack = vec![Settlement::ack(&held_a.jobs[0])];
        let die = vec![Settlement {
            job: held_b.jobs[0].id,
            lease: held_b.lease,
            outcome: Outcome::DeadLetter {
                error: "boom".into(),
            },
        }];
        let cancel = vec![Settlement {
            job: held_b.jobs[1].id,
            lease: held_b.lease,
            outcome: Outcome::Cancel,
        }];
        let sealer = if round % 2 == 0 { a.clone() } else { b.clone() };
        let pause = Duration::from_micros((round % 6) as u64 * 500);
        let completion = NewJob::new("done", group.as_bytes().to_vec());
        let (a2, b2, b3) = (a.clone(), b.clone(), b.clone());
        let g2 = group.clone();
        let tasks = (
            tokio::spawn(async move { a2.settle(ack).await.unwrap() }),
            tokio::spawn(async move { b2.settle(die).await.unwrap() }),
            tokio::spawn(async move { b3.settle(cancel).await.unwrap() }),
            tokio::spawn(async move {
                // From at once to about when the settlements commit, so that the seal
                // comes first, between them, or last.
                tokio::time::sleep(pause).await;
                sealer.seal_group(&g2, completion).await.unwrap()
            }),
        );
        for report in [
            tasks.0.await.unwrap(),
            tasks.1.await.unwrap(),
            tasks.2.await.unwrap(),
        ] {
            assert_eq!(report.applied, 1, "round {round}");
        }
        let sealed = tasks.3.await.unwrap();
        assert!(
            sealed.sealed && sealed.members == 3,
            "round {round}: {sealed:?}"
        );
        let status = a.group(&group).await.unwrap().unwrap();
        assert_eq!(
            (status.members, status.succeeded, status.cancelled),
            (3, 1, 1),
            "round {round}"
        );
        assert_eq!(status.dead, [held_b.jobs[0].id], "round {round}");
        assert!(status.completion.is_some(), "round {round}: {status:?}");
        assert!(made.contains(&status.dead[0]));
    }
    // Every completion job, once each, with its group's outcome.
    let done = fetch(&b, "done", 10 * ROUNDS, TTL).await;
    assert_eq!(done.jobs.len(), ROUNDS, "one completion job per group");
    let mut groups: Vec<String> = Vec::new();
    for job in &done.jobs {
        let outcome = GroupOutcome::of(job).expect("a completion job");
        assert_eq!(outcome.group.as_bytes(), job.payload.as_slice());
        assert_eq!(
            (
                outcome.members,
                outcome.succeeded,
                outcome.dead,
                outcome.cancelled
            ),
            (3, 1, 1, 1)
        );
        let status = a.group(&outcome.group).await.unwrap().unwrap();
        assert_eq!(status.completion, Some(job.id));
        groups.push(outcome.group);
    }
    groups.sort();
    groups.dedup();
    assert_eq!(groups.len(), ROUNDS);
}

/// Two brokers enqueueing members while a third call seals: the seal and each batch take
/// turns on the group's row, so a batch is either counted before the seal or refused
/// whole, and the completion job, enqueued once, counts exactly the members stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn enqueues_racing_a_seal_are_counted_or_refused_whole() {
    let (a, url) = broker_with(|o| o.wake_poll(None)).await;
    let b = second_broker(&url).await;
    for round in 0..20 {
        let group = format!("e{round}");
        let batch = |n: &str| vec![member(&group, n), member(&group, n)];
        let (ea, eb) = (a.clone(), b.clone());
        let (ba, bb) = (batch("a"), batch("b"));
        let tasks = (
            tokio::spawn(async move { ea.enqueue(ba).await }),
            tokio::spawn(async move { eb.enqueue(bb).await }),
        );
        let sealed = a
            .seal_group(&group, NewJob::new("done", "x"))
            .await
            .unwrap();
        let stored: u64 = [tasks.0.await.unwrap(), tasks.1.await.unwrap()]
            .into_iter()
            .map(|r| match r {
                Ok(done) => done.len() as u64,
                Err(e) => {
                    assert!(e.to_string().contains("group"), "{e}");
                    0
                }
            })
            .sum();
        let status = a.group(&group).await.unwrap().unwrap();
        assert_eq!(status.members, stored, "round {round}: {sealed:?}");
        assert_eq!(status.completion.is_some(), stored == 0, "round {round}");
    }
    // Settle every member: each group completes once, counting what was stored.
    loop {
        let held = fetch(&a, "m", 100, TTL).await;
        if held.jobs.is_empty() {
            break;
        }
        a.settle(held.jobs.iter().map(Settlement::ack).collect())
            .await
            .unwrap();
    }
    let done = fetch(&b, "done", 100, TTL).await;
    assert_eq!(done.jobs.len(), 20);
    for job in &done.jobs {
        let outcome = GroupOutcome::of(job).unwrap();
        let status = a.group(&outcome.group).await.unwrap().unwrap();
        assert_eq!(
            (outcome.members, outcome.succeeded),
            (status.members, status.members)
        );
        assert_eq!(status.completion, Some(job.id));
    }
}

/// A database at version 9, as the previous release left it, holding jobs: the broker
/// refuses it until migrated; migrating adds groups and leaves its jobs plain (claimed and
/// acknowledged under plain leases, counted in no group); a run that stopped before
/// recording version 10 finds the column there and counts it as applied.
#[tokio::test]
async fn a_database_of_the_previous_version_gains_groups() {
    let db = TempDatabase::empty().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    database_at(&mut conn, 9).await;
    sqlx::raw_sql(
        "INSERT INTO hopper_jobs (id, queue, state, run_at, attempt, max_attempts, payload,
                                  created_at)
         VALUES (1, 'q', 0, 0, 0, 5, 'a', 0), (2, 'q', 0, 0, 0, 5, 'b', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let err = MySqlBroker::connect(&db.url).await.unwrap_err().to_string();
    assert!(
        err.contains("at version 9 but this build needs 11"),
        "{err}"
    );
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 2);

    let broker = second_broker(&db.url).await;
    let held = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(held.jobs.len(), 2);
    assert_eq!(held.lease.0 & 1, 0, "a plain lease: no member taken");
    broker
        .settle(held.jobs.iter().map(Settlement::ack).collect())
        .await
        .unwrap();
    let made = enqueue(&broker, vec![member("g", "x")]).await;
    broker
        .seal_group("g", NewJob::new("done", "c"))
        .await
        .unwrap();
    let held = fetch(&broker, "m", 10, TTL).await;
    assert_eq!(held.jobs[0].id, made[0]);
    broker
        .settle(vec![Settlement::ack(&held.jobs[0])])
        .await
        .unwrap();
    let status = broker.group("g").await.unwrap().unwrap();
    assert_eq!((status.members, status.succeeded), (1, 1));
    let completion = status.completion.expect("completed");

    sqlx::raw_sql("DELETE FROM hopper_migrations WHERE version >= 10")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 2);
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 0);
    let status = broker.group("g").await.unwrap().unwrap();
    assert_eq!(status.completion, Some(completion), "kept");
    assert_eq!(broker.job(JobId(1)).await.unwrap(), None, "acknowledged");
    let _ = conn.close().await;
}

/// Names are bytes, up to 255 of them in any UTF-8 (`MAX_GROUP`): a long name of
/// two-byte characters is kept whole, and names differing in case or a trailing space are
/// other groups.
#[tokio::test]
async fn names_are_kept_whole_and_compared_byte_for_byte() {
    let (broker, _) = broker_with(|o| o.wake_poll(None)).await;
    let long = "é".repeat(127) + "x";
    assert_eq!(long.len(), hopper_core::group::MAX_GROUP);
    let names = [long.as_str(), "g", "G", "g "];
    for name in names {
        enqueue(&broker, vec![member(name, name)]).await;
    }
    broker
        .seal_group(&long, NewJob::new("done", "c"))
        .await
        .unwrap();
    for name in names {
        let status = broker.group(name).await.unwrap().unwrap();
        assert_eq!(
            (status.members, status.sealed),
            (1, name == long),
            "{name:?}"
        );
    }
    let held = fetch(&broker, "m", 10, TTL).await;
    broker
        .settle(held.jobs.iter().map(Settlement::ack).collect())
        .await
        .unwrap();
    let done = fetch(&broker, "done", 10, TTL).await;
    assert_eq!(done.jobs.len(), 1);
    let outcome = GroupOutcome::of(&done.jobs[0]).unwrap();
    assert_eq!(
        (outcome.group.as_str(), outcome.succeeded),
        (long.as_str(), 1)
    );
}
