//! A file from before groups (schema version 10) gains the jobs' group column and the
//! groups' tables: its jobs stay jobs of no group and settle as before, a group made after
//! the upgrade completes, and the tables refuse counts out of range.

use std::time::Duration;

use hopper_core::group::GroupOutcome;
use hopper_core::{Broker, FetchRequest, JobId, JobState, NewJob, Outcome, Selection, Settlement};
use hopper_sqlite::SqliteBroker;

use super::support::{TempDb, file_at_version, file_version};

const TTL: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_file_from_before_groups_keeps_its_jobs_and_takes_a_group() {
    let db = TempDb::new("groups_migrate");
    let raw = file_at_version(&db, 10);
    // A pending job, one with an ordering key, and a dead letter.
    raw.execute_batch(
        "INSERT INTO hopper_jobs (id, queue, state, priority, run_at, attempt, max_attempts,
                                  payload, headers, created_at, lease_id, lease_expires,
                                  last_error, finished_at, errors, unique_key, ordering_key,
                                  started_at)
         VALUES (1, 'q', 0, 0, 1000, 0, 5, CAST('one' AS BLOB), NULL, 1000,
                 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
                (2, 'q', 0, 0, 1001, 0, 5, CAST('two' AS BLOB), NULL, 1000,
                 NULL, NULL, NULL, NULL, NULL, NULL, 'k', NULL),
                (3, 'q', 3, 0, 1000, 5, 5, CAST('dead' AS BLOB), NULL, 1000, NULL, NULL,
                 'boom', 2000, NULL, NULL, NULL, 1500);",
    )
    .unwrap();
    drop(raw);

    let broker = SqliteBroker::open(db.path()).await.unwrap();
    assert_eq!(file_version(&db), 12);
    assert_eq!(broker.group("g").await.unwrap(), None);
    let back = broker.retry_dead(&Selection::Jobs(vec![JobId(3)])).await;
    assert_eq!(back.unwrap(), 1, "a dead letter from before is re-driven");
    let member = broker
        .enqueue(vec![NewJob::new("q", b"member".to_vec()).group("g")])
        .await
        .unwrap()[0];
    let sealed = broker
        .seal_group("g", NewJob::new("done", b"report".to_vec()))
        .await
        .unwrap();
    assert_eq!((sealed.members, sealed.sealed), (1, true));

    let held = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    let taken: Vec<JobId> = held.jobs.iter().map(|j| j.id).collect();
    assert_eq!(taken, [JobId(1), JobId(2), JobId(3), member]);
    let settled = held
        .jobs
        .iter()
        .map(|j| Settlement {
            job: j.id,
            lease: held.lease,
            outcome: match j.id.0 {
                1 => Outcome::DeadLetter { error: "x".into() },
                2 => Outcome::Cancel,
                _ => Outcome::Ack,
            },
        })
        .collect();
    let report = broker.settle(settled).await.unwrap();
    assert_eq!((report.applied, report.fenced.len()), (4, 0));
    assert_eq!(
        broker.job(JobId(1)).await.unwrap().unwrap().state,
        JobState::Dead
    );
    let status = broker.group("g").await.unwrap().unwrap();
    assert_eq!(
        (status.succeeded, status.dead.len()),
        (1, 0),
        "only the member"
    );
    let done = broker
        .fetch(FetchRequest::one("done", 10, TTL))
        .await
        .unwrap();
    assert_eq!(done.jobs.len(), 1);
    assert_eq!(status.completion, Some(done.jobs[0].id));
    assert_eq!(GroupOutcome::of(&done.jobs[0]).unwrap().members, 1);
    drop(broker);

    let raw = rusqlite::Connection::open(db.path()).unwrap();
    for column in ["members", "succeeded", "dead", "cancelled"] {
        let refused = raw
            .execute(
                &format!("INSERT INTO hopper_groups (name, {column}) VALUES ('bad', -1)"),
                [],
            )
            .unwrap_err()
            .to_string();
        assert!(refused.contains("CHECK"), "{column}: {refused}");
    }
}
