//! A fresh database per test, dropped when the test's broker is dropped.

use std::sync::Arc;

use hopper_core::{Broker, Clock};
use hopper_mysql::{MySqlBroker, MySqlOptions};
use hopper_testkit::{WithCleanup, unique_name};
use sqlx::{Connection, MySqlConnection};

/// The server the tests use: a URL naming a database that exists.
pub fn server_url() -> String {
    std::env::var("HOPPER_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

/// The server URL with its database replaced by `database`.
pub fn url_for(database: &str) -> String {
    let url = server_url();
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let query = rest[end..].find('?').map_or("", |i| &rest[end + i..]);
    format!("{scheme}://{}/{database}{query}", &rest[..end])
}

/// Runs one statement on the server's own database.
pub async fn admin(sql: String) {
    let mut conn = MySqlConnection::connect(&server_url())
        .await
        .expect("connect to the test server");
    sqlx::raw_sql(&sql)
        .execute(&mut conn)
        .await
        .expect("admin statement");
    let _ = conn.close().await;
}

/// A new, empty database (not migrated); returns its name and URL.
pub async fn empty_database() -> (String, String) {
    let name = unique_name("hopper_t");
    admin(format!("CREATE DATABASE {name}")).await;
    let url = url_for(&name);
    (name, url)
}

/// Drops `database` on a thread of its own with a runtime of its own, so it can be called
/// from async code and from a destructor alike.
pub fn drop_database(database: String) {
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for cleanup");
        rt.block_on(admin(format!("DROP DATABASE IF EXISTS {database}")));
    })
    .join();
}

/// Drops a database when dropped itself.
#[derive(Debug)]
pub struct TempDatabase {
    pub name: String,
    pub url: String,
}

impl TempDatabase {
    /// A new database, migrated.
    pub async fn migrated() -> TempDatabase {
        let db = TempDatabase::empty().await;
        assert_eq!(hopper_mysql::migrate(&db.url).await.expect("migrate"), 1);
        db
    }

    /// A new database, not migrated.
    pub async fn empty() -> TempDatabase {
        let (name, url) = empty_database().await;
        TempDatabase { name, url }
    }
}

impl Drop for TempDatabase {
    fn drop(&mut self) {
        drop_database(self.name.clone());
    }
}

/// A broker on a fresh migrated database, built from `options` adjusted by `f`, that drops
/// its database when the last handle goes. Also returns the database's URL, for more
/// brokers on it.
pub async fn broker_with(
    f: impl FnOnce(MySqlOptions) -> MySqlOptions,
) -> (Arc<dyn Broker>, String) {
    let db = TempDatabase::migrated().await;
    let broker = MySqlBroker::connect_with(&db.url, f(MySqlOptions::default()))
        .await
        .expect("connect");
    let url = db.url.clone();
    let wrapped: Arc<dyn Broker> = Arc::new(WithCleanup::new(Arc::new(broker), move || drop(db)));
    (wrapped, url)
}

/// For the behaviour suite: times from tokio's (paused) clock, and no wake poller, so no
/// timer ever runs the paused clock forward.
pub async fn fresh() -> Arc<dyn Broker> {
    broker_with(|o| o.clock(Clock::tokio()).wake_poll(None))
        .await
        .0
}
