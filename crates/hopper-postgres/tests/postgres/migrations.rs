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
            "the hopper schema {schema} in {} is at version 0 but this build needs 2: run `hopper migrate --broker {}`",
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
    assert_eq!(applied, [0, 2]);
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
    assert_eq!(hopper_postgres::migrate(&with_schema).await.unwrap(), 2);
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
