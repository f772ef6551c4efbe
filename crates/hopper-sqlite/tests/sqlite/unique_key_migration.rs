//! A file from before jobs kept their unique key (schema version 7) gains the column and
//! keeps its jobs: one stored before reads no key, even one that took a key then, and a
//! job enqueued with a key after shows it, in its record and in the listings.

use hopper_core::{Broker, JobId, JobQuery, ListState, NewJob};
use hopper_sqlite::SqliteBroker;

use super::support::{TempDb, file_at_version, file_version};

#[tokio::test]
async fn a_file_from_before_record_keys_gains_the_column_and_keeps_its_jobs() {
    let db = TempDb::new("unique_key_migrate");
    let raw = file_at_version(&db, 7);
    // A job as version 7 stored it, holding key `old` in the key table only.
    raw.execute_batch(
        "INSERT INTO hopper_jobs (id, queue, state, priority, run_at, attempt, max_attempts,
                                  payload, created_at)
         VALUES (1, 'q', 0, 0, 1000, 0, 5, CAST('old' AS BLOB), 1000);
         INSERT INTO hopper_unique (queue, key, job_id, scope, until)
         VALUES ('q', 'old', 1, 1, NULL);",
    )
    .unwrap();
    drop(raw);

    let broker = SqliteBroker::open(db.path()).await.unwrap();
    let old = broker.job(JobId(1)).await.unwrap().unwrap();
    assert_eq!(old.job.payload, b"old");
    assert_eq!(
        old.unique_key, None,
        "the old row was written without the column"
    );

    let keyed = NewJob::new("q", b"new".to_vec()).unique_key("k");
    let plain = NewJob::new("q", b"plain".to_vec());
    let stored = broker.enqueue_reported(vec![keyed, plain]).await.unwrap();
    assert!(stored.iter().all(|e| !e.existing), "{stored:?}");
    let (keyed, plain) = (stored[0].id, stored[1].id);
    let record = broker.job(keyed).await.unwrap().unwrap();
    assert_eq!(record.unique_key.as_deref(), Some("k"));
    let record = broker.job(plain).await.unwrap().unwrap();
    assert_eq!(
        record.unique_key, None,
        "a job without a key in a keyed batch"
    );

    // The listing reads the column as the look-up does, and its cursor, the column after
    // it, still leads to the next page.
    let mut query = JobQuery::new("q", ListState::Pending, 2);
    let mut listed = Vec::new();
    loop {
        let page = broker.list_jobs(&query).await.unwrap();
        listed.extend(page.jobs.into_iter().map(|r| (r.job.id, r.unique_key)));
        let Some(next) = page.next else { break };
        query.after = Some(next);
    }
    assert_eq!(
        listed,
        [(JobId(1), None), (keyed, Some("k".into())), (plain, None)]
    );
    drop(broker);

    assert_eq!(file_version(&db), 12);
}
