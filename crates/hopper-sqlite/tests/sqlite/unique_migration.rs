//! A file from before unique keys (schema version 5) gains their table and keeps its jobs,
//! which hold no key: a job with a key is stored beside them, and the next is its
//! duplicate.

use hopper_core::{Broker, Enqueued, JobId, NewJob};
use hopper_sqlite::SqliteBroker;

use super::support::{TempDb, file_at_version, file_version};

#[tokio::test]
async fn a_file_from_before_unique_keys_gains_their_table_and_keeps_its_jobs() {
    let db = TempDb::new("unique_migrate");
    let raw = file_at_version(&db, 5);
    raw.execute_batch(
        "INSERT INTO hopper_jobs (id, queue, state, priority, run_at, attempt, max_attempts,
                                  payload, created_at)
         VALUES (1, 'q', 0, 0, 1000, 0, 5, CAST('old' AS BLOB), 1000);",
    )
    .unwrap();
    drop(raw);

    let broker = SqliteBroker::open(db.path()).await.unwrap();
    assert!(broker.capabilities().unique);
    let old = broker.job(JobId(1)).await.unwrap().unwrap();
    assert_eq!(old.job.payload, b"old");
    let keyed = || NewJob::new("q", b"new".to_vec()).unique_key("k");
    let first = broker.enqueue_reported(vec![keyed()]).await.unwrap();
    assert!(!first[0].existing, "no job of the old file holds a key");
    assert_eq!(first[0].id, JobId(2), "ids go on from the old jobs'");
    let second = broker.enqueue_reported(vec![keyed()]).await.unwrap();
    assert_eq!(second, vec![Enqueued::existing(first[0].id)]);
    assert_eq!(broker.counts("q").await.unwrap().pending, 2);
    drop(broker);

    assert_eq!(file_version(&db), 12);
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    let held: (String, String, i64, i64, Option<i64>) = raw
        .query_row(
            "SELECT queue, key, job_id, scope, until FROM hopper_unique",
            [],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            },
        )
        .unwrap();
    assert_eq!(held, ("q".into(), "k".into(), 2, 1, None));
}
