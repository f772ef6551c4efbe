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
    admin_from_anywhere(format!("DROP DATABASE IF EXISTS {database}"));
}

/// [`admin`] on a thread of its own with a runtime of its own.
fn admin_from_anywhere(sql: String) {
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for cleanup");
        rt.block_on(admin(sql));
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
        assert_eq!(hopper_mysql::migrate(&db.url).await.expect("migrate"), 11);
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

/// A user of a test's own on its database, whose statements the server counts apart from
/// every other test's: MariaDB's user statistics (`userstat`, turned on here; it only
/// counts, and stays on for the other tests that count).
pub struct CountedUser {
    name: String,
    /// The database's URL, connecting as this user.
    pub url: String,
}

impl CountedUser {
    pub async fn create(db: &TempDatabase) -> CountedUser {
        Self::granted(db, None).await
    }

    /// A user that may read and write `tables` of the database only.
    pub async fn with_tables(db: &TempDatabase, tables: &[&str]) -> CountedUser {
        Self::granted(db, Some(tables)).await
    }

    async fn granted(db: &TempDatabase, tables: Option<&[&str]>) -> CountedUser {
        let name = unique_name("hopper_u");
        let password = unique_name("pw");
        admin("SET GLOBAL userstat = 1".into()).await;
        admin(format!(
            "CREATE USER '{name}'@'%' IDENTIFIED BY '{password}'"
        ))
        .await;
        match tables {
            None => admin(format!("GRANT ALL ON {}.* TO '{name}'@'%'", db.name)).await,
            Some(tables) => {
                for table in tables {
                    admin(format!(
                        "GRANT SELECT, INSERT, UPDATE, DELETE ON {}.{table} TO '{name}'@'%'",
                        db.name
                    ))
                    .await;
                }
            }
        }
        let (scheme, rest) = db.url.split_once("://").expect("a URL with a scheme");
        let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
        let url = format!("{scheme}://{name}:{password}@{host}");
        CountedUser { name, url }
    }

    /// The statements this user has run, as the server counts them.
    ///
    /// MariaDB counts a statement after its reply, so a statement just answered may not be
    /// counted yet: the count is read until two readings 30 ms apart agree (up to 2 s), so
    /// that a loaded machine does not move a statement from one call's count to the next.
    pub async fn statements(&self) -> i64 {
        let read = || self.statistic("SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS");
        let mut last = read().await;
        for _ in 0..66 {
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
            let now = read().await;
            if now == last {
                return now;
            }
            last = now;
        }
        last
    }

    /// The rows this user's statements have read, as the server counts them.
    pub async fn rows_read(&self) -> i64 {
        self.statistic("ROWS_READ").await
    }

    async fn statistic(&self, expression: &str) -> i64 {
        let mut conn = MySqlConnection::connect(&server_url()).await.unwrap();
        let n: Option<i64> = sqlx::query_scalar(&format!(
            "SELECT CAST({expression} AS SIGNED) \
             FROM information_schema.USER_STATISTICS WHERE USER = ?"
        ))
        .bind(&self.name)
        .fetch_optional(&mut conn)
        .await
        .expect("reading the user statistics")
        .flatten();
        let _ = conn.close().await;
        n.unwrap_or(0)
    }
}

impl Drop for CountedUser {
    fn drop(&mut self) {
        admin_from_anywhere(format!("DROP USER IF EXISTS '{}'@'%'", self.name));
    }
}
