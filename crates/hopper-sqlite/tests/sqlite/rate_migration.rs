//! A file from before rate limits (schema version 9) gains the limits table and the jobs'
//! start column: its jobs stay as they were, with no start known for those claimed before,
//! a limit holds on its queue at once, and the table refuses a limit out of range.

use std::time::Duration;

use hopper_core::{Broker, FetchRequest, JobId, JobState, NewJob, RateLimit};
use hopper_sqlite::SqliteBroker;

use super::support::{TempDb, file_at_version, file_version};

#[tokio::test]
async fn a_file_from_before_rate_limits_keeps_its_jobs_and_takes_a_limit() {
    let db = TempDb::new("rate_migrate");
    let raw = file_at_version(&db, 9);
    // Two pending jobs, one with an ordering key, a leased one and a dead letter.
    raw.execute_batch(
        "INSERT INTO hopper_jobs (id, queue, state, priority, run_at, attempt, max_attempts,
                                  payload, headers, created_at, lease_id, lease_expires,
                                  last_error, finished_at, errors, unique_key, ordering_key)
         VALUES (1, 'q', 0, 0, 1000, 0, 5, CAST('one' AS BLOB), NULL, 1000,
                 NULL, NULL, NULL, NULL, NULL, NULL, NULL),
                (2, 'q', 0, 0, 1001, 0, 5, CAST('two' AS BLOB), NULL, 1000,
                 NULL, NULL, NULL, NULL, NULL, NULL, 'k'),
                (3, 'q', 1, 0, 1000, 1, 5, CAST('leased' AS BLOB), NULL, 1000,
                 77, 4102444800000, NULL, NULL, NULL, NULL, NULL),
                (4, 'q', 3, 0, 1000, 5, 5, CAST('dead' AS BLOB), NULL, 1000, NULL, NULL,
                 'boom', 2000, '[{\"attempt\":5,\"at\":2000,\"error\":\"boom\"}]', NULL, NULL);",
    )
    .unwrap();
    drop(raw);

    let broker = SqliteBroker::open(db.path()).await.unwrap();
    let leased = broker.job(JobId(3)).await.unwrap().unwrap();
    assert_eq!(
        (leased.state, leased.job.lease.0, leased.started_at),
        (JobState::Leased, 77, None),
        "claimed before starts were kept"
    );
    let dead = broker.job(JobId(4)).await.unwrap().unwrap();
    assert_eq!(
        (dead.state, dead.errors.len(), dead.started_at),
        (JobState::Dead, 1, None)
    );
    let stats = broker.queue_stats("q").await.unwrap();
    assert_eq!(
        (stats.counts.pending, stats.counts.leased, stats.rate_limit),
        (2, 1, None)
    );

    let two_an_hour = RateLimit::new(2, Duration::from_secs(3600)).unwrap();
    broker.set_rate_limit("q", Some(two_an_hour)).await.unwrap();
    broker
        .enqueue(vec![NewJob::new("q", b"new".to_vec())])
        .await
        .unwrap();
    let hour = Duration::from_secs(3600);
    let fetched = broker
        .fetch(FetchRequest::one("q", 10, hour))
        .await
        .unwrap();
    let taken: Vec<JobId> = fetched.jobs.iter().map(|j| j.id).collect();
    assert_eq!(taken, [JobId(1), JobId(2)], "the old jobs, two of three");
    let started = broker.job(JobId(1)).await.unwrap().unwrap().started_at;
    let started = started.expect("a claim stamps the start");
    assert_eq!(fetched.next_due, Some(started + 3_600_000));
    let again = broker
        .fetch(FetchRequest::one("q", 10, hour))
        .await
        .unwrap();
    assert!(again.jobs.is_empty(), "the window is full");
    assert_eq!(
        broker.queue_stats("q").await.unwrap().rate_limit,
        Some(two_an_hour)
    );
    drop(broker);
    assert_eq!(file_version(&db), 12);

    let raw = rusqlite::Connection::open(db.path()).unwrap();
    for (max, per) in [
        (0i64, 1000i64),
        (100_001, 1000),
        (1, 0),
        (1, 3_153_600_000_001),
    ] {
        let refused = raw
            .execute(
                "INSERT INTO hopper_rate_limits (queue, max, per_ms) VALUES ('r', ?1, ?2)",
                [max, per],
            )
            .unwrap_err()
            .to_string();
        assert!(refused.contains("CHECK"), "{max}/{per}: {refused}");
    }
}
