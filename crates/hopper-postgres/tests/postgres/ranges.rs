//! The table's own range checks: a row out of range can no longer be written by any
//! program, and rows written before the checks existed become dead letters naming the
//! column, while every other row is kept.

use hopper_core::{Broker, JobId, JobState};
use hopper_postgres::PgBroker;
use sqlx::Connection;

use super::support::{drop_schema, schema, schema_at, url};

#[tokio::test]
async fn rows_out_of_range_are_refused_by_the_table() {
    let options = schema().await;
    let name = options.schema.clone();
    let mut raw = sqlx::PgConnection::connect(&url()).await.unwrap();
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
            "INSERT INTO {name}.hopper_jobs (queue, state, run_at, attempt, max_attempts,
                                             payload, created_at)
             VALUES ('q', {}, {}, {}, {}, '\\x00', 0)",
            values[0].1, values[1].1, values[2].1, values[3].1
        );
        let err = sqlx::raw_sql(&sql)
            .execute(&mut raw)
            .await
            .expect_err(&format!("{column} = {value} was stored"));
        assert!(
            err.to_string().contains("violates check constraint"),
            "{column} = {value}: {err}"
        );
    }
    let _ = raw.close().await;
    drop_schema(name);
}

#[tokio::test]
async fn a_schema_from_before_the_checks_keeps_its_jobs_and_buries_the_bad_rows() {
    // A schema at version 3, as the release before the checks left it, holding rows that
    // other programs wrote.
    let options = schema_at(3).await;
    let name = options.schema.clone();
    let mut raw = sqlx::PgConnection::connect(&url()).await.unwrap();
    let setup = format!(
        "INSERT INTO {name}.hopper_jobs (id, queue, state, run_at, attempt, max_attempts,
                                         payload, created_at)
         VALUES (1, 'q', 0, 0, 0, 5, 'good', 0),
                (2, 'q', 9, 0, 0, 5, 'state', 0),
                (3, 'q', 1, 0, 0, -1, 'max_attempts', 0),
                (4, 'q', 0, 9223372036854775807, 0, 5, 'run_at', 0);"
    );
    sqlx::raw_sql(&setup).execute(&mut raw).await.unwrap();
    let _ = raw.close().await;
    assert_eq!(
        hopper_postgres::migrate_with(&url(), &options)
            .await
            .unwrap(),
        14
    );

    let broker = PgBroker::connect_with(&url(), options.listen(false))
        .await
        .unwrap();
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
    drop_schema(name);
}

/// `max_payload=` in the URL sets the broker's payload limit, in bytes, KiB or MiB; an
/// enqueue past it is refused whole, naming the payload.
#[tokio::test]
async fn the_url_sets_the_payload_limit() {
    let options = schema().await;
    let name = options.schema.clone();
    let url = format!("{}?max_payload=1KiB&schema={name}", url());
    let broker = PgBroker::connect(&url).await.unwrap();
    assert_eq!(broker.limits().max_payload, 1024);
    let fits = hopper_core::NewJob::new("q", vec![0; 1024]);
    let over = hopper_core::NewJob::new("q", vec![0; 1025]);
    let err = broker.enqueue(vec![fits.clone(), over]).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid payload `1025 bytes`: allowed: at most 1024 bytes (the broker's max_payload)"
    );
    assert_eq!(broker.enqueue(vec![fits]).await.unwrap().len(), 1);
    broker.close().await;
    let err = PgBroker::connect(&format!("{}?max_payload=2GiB", super::support::url()))
        .await
        .unwrap_err();
    assert!(
        err.to_string().starts_with("invalid max_payload `2GiB`"),
        "{err}"
    );
    drop_schema(name);
}
