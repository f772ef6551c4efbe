//! The table's own range checks: a row out of range can no longer be written by any
//! program, and rows written before the checks existed become dead letters naming the
//! column, while every other row is kept. A migration run again after it stopped between
//! its constraints and its record counts as applied.

use hopper_core::{Broker, JobId, JobState};
use hopper_mysql::MySqlBroker;
use sqlx::{Connection, Executor};

use super::support::TempDatabase;

async fn raw(db: &TempDatabase) -> sqlx::MySqlConnection {
    sqlx::MySqlConnection::connect(&db.url).await.unwrap()
}

#[tokio::test]
async fn rows_out_of_range_are_refused_by_the_table() {
    let db = TempDatabase::migrated().await;
    let mut conn = raw(&db).await;
    for (column, value) in [
        ("state", "5"),
        ("state", "-1"),
        ("run_at", "253402300800000"),
        ("run_at", "-62135596800001"),
        ("attempt", "-1"),
        ("max_attempts", "0"),
    ] {
        let mut values = [
            ("state", "0"),
            ("run_at", "0"),
            ("attempt", "0"),
            ("max_attempts", "1"),
        ];
        values.iter_mut().find(|(c, _)| *c == column).unwrap().1 = value;
        let sql = format!(
            "INSERT INTO hopper_jobs (queue, state, run_at, attempt, max_attempts, payload,
                                      created_at)
             VALUES ('q', {}, {}, {}, {}, x'00', 0)",
            values[0].1, values[1].1, values[2].1, values[3].1
        );
        let err = conn
            .execute(sqlx::raw_sql(&sql))
            .await
            .expect_err(&format!("{column} = {value} was stored"));
        assert!(
            err.to_string().contains("CONSTRAINT `hopper_jobs_"),
            "{column} = {value}: {err}"
        );
    }
    let _ = conn.close().await;
}

#[tokio::test]
async fn a_database_from_before_the_checks_keeps_its_jobs_and_buries_the_bad_rows() {
    let db = TempDatabase::migrated().await;
    let mut conn = raw(&db).await;
    // Back to version 1, as the previous release left it, holding rows other programs wrote.
    // Version 3's column and index, the tables of versions 4 and 5, the columns of versions
    // 6 and 7, version 8's column and index and version 9's table and column stay: their
    // second runs find them and count as applied (version 8's range check of `run_at` is the
    // one dropped here).
    conn.execute(sqlx::raw_sql(
        "ALTER TABLE hopper_jobs DROP CONSTRAINT hopper_jobs_state,
             DROP CONSTRAINT hopper_jobs_run_at_or_blocked, DROP CONSTRAINT hopper_jobs_attempt,
             DROP CONSTRAINT hopper_jobs_max_attempts;
         DELETE FROM hopper_migrations WHERE version >= 2;
         INSERT INTO hopper_jobs (id, queue, state, run_at, attempt, max_attempts, payload,
                                  created_at)
         VALUES (1, 'q', 0, 0, 0, 5, 'good', 0),
                (2, 'q', 9, 0, 0, 5, 'state', 0),
                (3, 'q', 1, 0, 0, -1, 'max_attempts', 0),
                (4, 'q', 0, 9223372036854775807, 0, 5, 'run_at', 0);",
    ))
    .await
    .unwrap();
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 10);

    let broker = MySqlBroker::connect(&db.url).await.unwrap();
    let counts = broker.counts("q").await.unwrap();
    assert_eq!(
        (counts.pending, counts.leased, counts.dead),
        (1, 0, 3),
        "{counts:?}"
    );
    let good = broker.job(JobId(1)).await.unwrap().unwrap();
    assert_eq!(good.state, JobState::Pending);
    hopper_testkit::helpers::assert_dead_letters(
        &broker,
        "q",
        &[
            (
                "max_attempts",
                "the row cannot be read as a job: column max_attempts: -1 out of range",
            ),
            (
                "run_at",
                "the row cannot be read as a job: column run_at: 9223372036854775807 out of range",
            ),
            (
                "state",
                "the row cannot be read as a job: column state: 9 out of range",
            ),
        ],
    )
    .await;
    broker.close().await;

    // A run that stopped after the constraints but before recording version 2 (and so
    // before the versions after it).
    conn.execute(sqlx::raw_sql(
        "DELETE FROM hopper_migrations WHERE version >= 2",
    ))
    .await
    .unwrap();
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 10);
    let _ = conn.close().await;
}
