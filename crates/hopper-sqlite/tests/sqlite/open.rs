//! Refusals at open.

use hopper_sqlite::{SqliteBroker, SqliteOptions};

use super::support::TempDb;

#[tokio::test]
async fn a_bad_path_is_named_in_the_error() {
    let path = std::env::temp_dir()
        .join(format!("hopper-no-such-dir-{}", std::process::id()))
        .join("jobs.db");
    let err = SqliteBroker::open(&path).await.unwrap_err();
    assert!(err.is_broker(), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&path.display().to_string()),
        "the error does not name the path: {text}"
    );
}

#[tokio::test]
async fn a_zero_group_commit_limit_is_refused() {
    let db = TempDb::new("limit");
    let err = SqliteBroker::open_with(db.path(), SqliteOptions::default().group_commit_limit(0))
        .await
        .unwrap_err();
    assert!(err.is_config(), "{err:?}");
    assert_eq!(
        err.to_string(),
        "invalid group_commit_limit `0`: allowed: at least 1"
    );
}

#[tokio::test]
async fn a_schema_newer_than_this_build_is_refused() {
    let db = TempDb::new("newer");
    drop(SqliteBroker::open(db.path()).await.unwrap());
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    raw.pragma_update(None, "user_version", 99).unwrap();
    drop(raw);
    let err = SqliteBroker::open(db.path()).await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("schema version 99"), "{text}");
    assert!(text.contains(&db.path().display().to_string()), "{text}");
}

#[tokio::test]
async fn reopening_applies_no_migration_twice() {
    let db = TempDb::new("migrate");
    for _ in 0..3 {
        drop(SqliteBroker::open(db.path()).await.unwrap());
    }
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    let version: i64 = raw
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, 12);
    let mode: String = raw
        .pragma_query_value(None, "journal_mode", |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}
