//! A file from before ordering keys (schema version 8) is rebuilt with the key column and a
//! `run_at` range that holds blocked times: it keeps every job as it was, its ids going on
//! past those of jobs long acknowledged, its indexes and its other range checks, and takes
//! jobs with keys at once.

use hopper_core::job::BLOCKED;
use hopper_core::{Broker, FetchRequest, JobId, JobState, NewJob, Settlement};
use hopper_sqlite::SqliteBroker;

use super::support::{TempDb, file_at_version, file_version};

#[tokio::test]
async fn a_file_from_before_ordering_keys_is_rebuilt_with_its_jobs() {
    let db = TempDb::new("ordering_migrate");
    let raw = file_at_version(&db, 8);
    // A pending job with a unique key, a leased one and a dead letter with its history;
    // the jobs up to id 10 were acknowledged and are gone.
    raw.execute_batch(
        "INSERT INTO hopper_jobs (id, queue, state, priority, run_at, attempt, max_attempts,
                                  payload, headers, created_at, lease_id, lease_expires,
                                  last_error, finished_at, errors, unique_key)
         VALUES (1, 'q', 0, 3, 1000, 0, 5, CAST('pending' AS BLOB), '{\"h\":\"v\"}', 1000,
                 NULL, NULL, NULL, NULL, NULL, 'u'),
                (2, 'q', 1, 0, 1000, 1, 5, CAST('leased' AS BLOB), NULL, 1000,
                 77, 4102444800000, NULL, NULL, NULL, NULL),
                (3, 'q', 3, 0, 1000, 5, 5, CAST('dead' AS BLOB), NULL, 1000, NULL, NULL,
                 'boom', 2000, '[{\"attempt\":5,\"at\":2000,\"error\":\"boom\"}]', NULL);
         UPDATE sqlite_sequence SET seq = 10 WHERE name = 'hopper_jobs';",
    )
    .unwrap();
    drop(raw);

    let broker = SqliteBroker::open(db.path()).await.unwrap();
    let pending = broker.job(JobId(1)).await.unwrap().unwrap();
    assert_eq!(
        (
            pending.job.payload.as_slice(),
            pending.job.priority,
            pending.job.run_at,
            pending.job.headers["h"].as_str(),
            pending.unique_key.as_deref(),
            pending.ordering_key.as_deref(),
            pending.blocked,
        ),
        (&b"pending"[..], 3, 1000, "v", Some("u"), None, false)
    );
    let leased = broker.job(JobId(2)).await.unwrap().unwrap();
    assert_eq!((leased.state, leased.job.lease.0), (JobState::Leased, 77));
    let dead = broker.job(JobId(3)).await.unwrap().unwrap();
    assert_eq!(
        (dead.state, dead.last_error.as_deref(), dead.errors.len()),
        (JobState::Dead, Some("boom"), 1)
    );

    // Jobs with a key, after the jobs of old: the ids go on from the sequence.
    let stored = broker
        .enqueue(vec![
            NewJob::new("q", b"k1".to_vec()).ordering_key("k"),
            NewJob::new("q", b"k2".to_vec()).ordering_key("k"),
        ])
        .await
        .unwrap();
    assert_eq!(stored, [JobId(11), JobId(12)]);
    assert!(broker.job(stored[1]).await.unwrap().unwrap().blocked);
    let held = broker
        .fetch(FetchRequest::one(
            "q",
            10,
            std::time::Duration::from_secs(30),
        ))
        .await
        .unwrap();
    let taken: Vec<JobId> = held.jobs.iter().map(|j| j.id).collect();
    assert_eq!(
        taken,
        [JobId(1), stored[0]],
        "the old pending job and k1, not k2"
    );
    let acks = held.jobs.iter().map(Settlement::ack).collect();
    broker.settle(acks).await.unwrap();
    assert!(!broker.job(stored[1]).await.unwrap().unwrap().blocked);
    drop(broker);
    assert_eq!(file_version(&db), 12);

    // The rebuilt table still refuses a time out of range, blocked or not, and a blocked
    // time on a job without a key; its indexes are all there.
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    let insert = |run_at: i64, key: Option<&str>| {
        raw.execute(
            "INSERT INTO hopper_jobs (queue, run_at, max_attempts, payload, created_at,
                                      ordering_key)
             VALUES ('r', ?1, 1, x'', 0, ?2)",
            rusqlite::params![run_at, key],
        )
    };
    insert(BLOCKED + 1000, Some("k")).unwrap();
    for (run_at, key) in [
        (BLOCKED + 1000, None),
        (i64::MAX, Some("k")),
        (253_402_300_800_000, Some("k")),
    ] {
        let refused = insert(run_at, key).unwrap_err().to_string();
        assert!(refused.contains("CHECK"), "{run_at} {key:?}: {refused}");
    }
    let mut indexes = raw
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'hopper_jobs' ORDER BY name")
        .unwrap()
        .query_map([], |row| row.get::<_, String>(0))
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap();
    indexes.retain(|name| !name.starts_with("sqlite_autoindex"));
    assert_eq!(
        indexes,
        [
            "hopper_jobs_finished",
            "hopper_jobs_lease_expiry",
            "hopper_jobs_ordering",
            "hopper_jobs_ready"
        ]
    );
}
