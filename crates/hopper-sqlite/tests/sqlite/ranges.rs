//! The table's own range checks: a row out of range can no longer be written by any
//! program, and rows written before the checks existed become dead letters naming the
//! column, while every other row and the id sequence carry over.

use hopper_core::{Broker, JobState, NewJob};
use hopper_sqlite::SqliteBroker;

use super::support::TempDb;

/// The schema as version 2 left it, built from the migrations themselves.
const BEFORE_CHECKS: [&str; 2] = [
    include_str!("../../migrations/0001_create_jobs.sql"),
    include_str!("../../migrations/0002_one_lease_index.sql"),
];

#[tokio::test]
async fn rows_out_of_range_are_refused_by_the_table() {
    let db = TempDb::new("ranges");
    drop(SqliteBroker::open(db.path()).await.unwrap());
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    // A valid row with one column's value replaced.
    let insert = |column: &str, value: i64| {
        let columns = ["state", "priority", "run_at", "attempt", "max_attempts"];
        let mut values = [0, 0, 0, 0, 1];
        values[columns.iter().position(|c| *c == column).unwrap()] = value;
        raw.execute(
            "INSERT INTO hopper_jobs (queue, state, priority, run_at, attempt, max_attempts,
                                      payload, created_at)
             VALUES ('q', ?1, ?2, ?3, ?4, ?5, x'00', 0)",
            values,
        )
    };
    for (column, value) in [
        ("state", 5),
        ("state", -1),
        ("priority", i64::from(i32::MAX) + 1),
        ("priority", i64::from(i32::MIN) - 1),
        ("run_at", hopper_core::job::MAX_RUN_AT + 1),
        ("run_at", hopper_core::job::MIN_RUN_AT - 1),
        ("attempt", -1),
        ("max_attempts", 0),
        ("max_attempts", i64::from(i32::MAX) + 1),
    ] {
        let err = insert(column, value).expect_err(&format!("{column} = {value} was stored"));
        assert!(
            err.to_string().contains("CHECK constraint failed"),
            "{column} = {value}: {err}"
        );
    }
    insert("priority", i64::from(i32::MAX)).expect("the edge of the range is stored");
    let stored: i64 = raw
        .query_row("SELECT count(*) FROM hopper_jobs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, 1);
}

#[tokio::test]
async fn a_file_from_before_the_checks_keeps_its_jobs_and_buries_the_bad_rows() {
    let db = TempDb::new("ranges_migrate");
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    for m in BEFORE_CHECKS {
        raw.execute_batch(m).unwrap();
    }
    raw.execute_batch(
        "PRAGMA user_version = 2;
         INSERT INTO hopper_jobs (id, queue, priority, run_at, max_attempts, payload, created_at)
         VALUES (1, 'q', 3, 0, 5, CAST('good' AS BLOB), 0),
                (2, 'q', 2147483648, 0, 5, CAST('priority' AS BLOB), 0),
                (3, 'q', 0, 0, -1, CAST('max_attempts' AS BLOB), 0);
         INSERT INTO hopper_jobs (id, queue, state, run_at, max_attempts, payload, created_at)
         VALUES (4, 'q', 9, 0, 5, CAST('state' AS BLOB), 0);
         -- Jobs up to 1000 were enqueued and acknowledged (deleted) before.
         UPDATE sqlite_sequence SET seq = 1000 WHERE name = 'hopper_jobs';",
    )
    .unwrap();
    drop(raw);

    let broker = SqliteBroker::open(db.path()).await.unwrap();
    let counts = broker.counts("q").await.unwrap();
    assert_eq!((counts.pending, counts.dead), (1, 3), "{counts:?}");
    let good = broker.job(hopper_core::JobId(1)).await.unwrap().unwrap();
    assert_eq!((good.state, good.job.priority), (JobState::Pending, 3));
    hopper_testkit::helpers::assert_dead_letters(
        &broker,
        "q",
        &[
            (
                "max_attempts",
                "the row cannot be read as a job: column max_attempts: -1 out of range",
            ),
            (
                "priority",
                "the row cannot be read as a job: column priority: 2147483648 out of range",
            ),
            (
                "state",
                "the row cannot be read as a job: column state: 9 out of range",
            ),
        ],
    )
    .await;
    let ids = broker.enqueue(vec![NewJob::new("q", "new")]).await.unwrap();
    assert_eq!(
        ids[0].0, 1001,
        "an id of a deleted job was handed out again"
    );
}
