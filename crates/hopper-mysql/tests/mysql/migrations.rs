//! Versioned migrations, the version check at connect, and refusals that name the URL
//! without its password.

use hopper_mysql::{MySqlBroker, MySqlOptions};

use super::support::{TempDatabase, admin, url_for};

#[tokio::test]
async fn an_unmigrated_database_is_refused_with_what_to_run() {
    let db = TempDatabase::empty().await;
    let err = MySqlBroker::connect(&db.url).await.unwrap_err();
    assert!(err.is_broker(), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "broker error: the hopper schema in {url} is at version 0 but this build needs 2: \
             run `hopper migrate --broker {url}`",
            url = db.url
        )
    );
}

#[tokio::test]
async fn migrating_twice_applies_nothing_the_second_time() {
    let db = TempDatabase::empty().await;
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 2);
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 0);
    let broker = MySqlBroker::connect(&db.url).await.unwrap();
    assert_eq!(broker.url(), db.url);
    broker.close().await;
}

#[tokio::test]
async fn concurrent_migrations_apply_each_version_once() {
    let db = TempDatabase::empty().await;
    let (a, b) = tokio::join!(
        hopper_mysql::migrate(&db.url),
        hopper_mysql::migrate(&db.url)
    );
    let mut applied = [a.unwrap(), b.unwrap()];
    applied.sort();
    assert_eq!(applied, [0, 2]);
}

#[tokio::test]
async fn a_schema_newer_than_this_build_is_refused() {
    let db = TempDatabase::migrated().await;
    admin(format!(
        "INSERT INTO {}.hopper_migrations (version, applied_at) VALUES (99, 0)",
        db.name
    ))
    .await;
    let err = MySqlBroker::connect(&db.url).await.unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "the hopper schema in {} is at version 99, newer than this build (2): upgrade hopper",
            db.url
        )),
        "{err}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_named_without_its_password() {
    for url in [
        "mysql://root:s3cret@127.0.0.1:1/test".to_owned(),
        url_for("hopper_no_such_database").replacen("://root@", "://root:s3cret@", 1),
    ] {
        let shown = url.replace(":s3cret@", ":***@");
        let connect = MySqlBroker::connect(&url).await.unwrap_err();
        let migrate = hopper_mysql::migrate(&url).await.unwrap_err();
        for err in [connect, migrate] {
            assert!(err.is_broker(), "{err:?}");
            let text = format!("{err} {err:?}");
            assert!(
                text.contains(&format!("cannot connect to {shown}")),
                "{text}"
            );
            assert!(!text.contains("s3cret"), "{text}");
        }
    }
}

#[tokio::test]
async fn bad_urls_and_options_are_refused_with_the_setting_named() {
    let err = MySqlBroker::connect("mysql://root:s3cret@127.0.0.1:port/test")
        .await
        .unwrap_err();
    assert!(err.is_config(), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with("invalid broker URL `mysql://root:***@127.0.0.1:port/test`"),
        "{text}"
    );
    assert!(!text.contains("s3cret"), "{text}");

    let err = MySqlBroker::connect("mysql://root@127.0.0.1:3306")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("naming the database"), "{err}");

    for n in [0, 65] {
        let err = MySqlBroker::connect_with(
            "mysql://root@127.0.0.1/test",
            MySqlOptions::default().connections(n),
        )
        .await
        .unwrap_err();
        assert!(err.is_config(), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!("invalid connections `{n}`: allowed: 1..=64")
        );
    }
}
