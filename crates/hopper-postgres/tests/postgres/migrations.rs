//! Versioned migrations and the version check at connect.

use hopper_postgres::{PgBroker, PgOptions};
use hopper_testkit::unique_name;

use super::support::{drop_schema, url};

#[tokio::test]
async fn an_unmigrated_schema_is_refused_with_what_to_run() {
    let schema = unique_name("hopper_t");
    let err = PgBroker::connect_with(&url(), PgOptions::default().schema(&schema))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "the hopper schema {schema} in {} is at version 0 but this build needs 4: run `hopper migrate --broker {}`",
            url(),
            url()
        )),
        "{err}"
    );
}

#[tokio::test]
async fn migrate_applies_once_even_when_run_concurrently() {
    let schema = unique_name("hopper_t");
    let options = PgOptions::default().schema(&schema);
    let url = url();
    let (a, b) = tokio::join!(
        hopper_postgres::migrate_with(&url, &options),
        hopper_postgres::migrate_with(&url, &options)
    );
    let mut applied = [a.unwrap(), b.unwrap()];
    applied.sort();
    assert_eq!(applied, [0, 4]);
    assert_eq!(
        hopper_postgres::migrate_with(&url, &options).await.unwrap(),
        0
    );
    let broker = PgBroker::connect_with(&url, options).await.unwrap();
    assert_eq!(broker.schema(), schema);
    broker.close().await;
    drop_schema(schema);
}

#[tokio::test]
async fn the_url_can_name_the_schema_and_passwords_stay_hidden() {
    let schema = unique_name("hopper_t");
    let with_schema = format!("{}?schema={schema}", url());
    assert_eq!(hopper_postgres::migrate(&with_schema).await.unwrap(), 4);
    let broker = PgBroker::connect(&with_schema).await.unwrap();
    assert_eq!(broker.schema(), schema);
    let debug = format!("{broker:?}");
    assert!(debug.contains("Connections"), "{debug}");
    broker.close().await;
    drop_schema(schema);

    let err = PgBroker::connect("postgres://postgres:s3cret@127.0.0.1:1/test")
        .await
        .unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(
        shown.contains("postgres://postgres:***@127.0.0.1:1/test"),
        "{shown}"
    );
    assert!(!err.to_string().contains("s3cret"));
    let err = PgBroker::connect_with(&url(), PgOptions::default().schema("Bad-Name"))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "invalid schema `Bad-Name`: allowed: 1 to 63 of a-z 0-9 _, not starting with a digit"
    );
    let err = PgBroker::connect_with(&url(), PgOptions::default().vacuum_after(Some(0)))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "invalid vacuum_after `0`: allowed: at least 1, or None"
    );
}

/// A vacuum that finds empty pages at the end of the jobs table must not give them back:
/// that takes a lock every claim would queue behind. Jobs fill some 2,000 pages and are
/// purged; a plain VACUUM, which follows the table's own setting as autovacuum does,
/// then leaves the table its size. Without the setting it shrank the table to nothing.
#[tokio::test]
async fn vacuum_leaves_the_empty_end_of_the_table_in_place() {
    use hopper_core::{Broker, NewJob};
    use sqlx::Connection;

    let options = super::support::schema().await;
    let schema = options.schema.clone();
    let broker = PgBroker::connect_with(&url(), options.listen(false))
        .await
        .unwrap();
    let payload = "x".repeat(500);
    for _ in 0..10 {
        let jobs = (0..2_000)
            .map(|_| NewJob::json("q", &payload).unwrap())
            .collect();
        broker.enqueue(jobs).await.unwrap();
    }
    assert_eq!(broker.purge("q").await.unwrap(), 20_000);
    broker.close().await;
    let mut conn = sqlx::PgConnection::connect(&url()).await.unwrap();
    let size = format!("SELECT pg_relation_size('{schema}.hopper_jobs') / 8192");
    let pages = sqlx::query_scalar::<_, i64>(&size);
    let before = pages.fetch_one(&mut conn).await.unwrap();
    assert!(before > 1_000, "{before} pages");
    sqlx::raw_sql(&format!("VACUUM {schema}.hopper_jobs"))
        .execute(&mut conn)
        .await
        .unwrap();
    let after = sqlx::query_scalar::<_, i64>(&size)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(after, before, "the table was truncated");
    conn.close().await.unwrap();
    drop_schema(schema);
}

/// A broker error's first line carries the server's own message, not only what the broker
/// was doing: `{error}` alone in a log says why.
#[tokio::test]
async fn the_servers_message_is_in_the_first_line() {
    let missing = unique_name("no_such_db");
    let url = url().replace("/test", &format!("/{missing}"));
    let err = PgBroker::connect(&url).await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("database \"{missing}\" does not exist")),
        "{err}"
    );
}
