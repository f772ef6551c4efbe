//! Scratch schemas (PostgreSQL) and databases (MySQL, and PostgreSQL's idle rows) made for
//! one run and dropped after it, and the bench's own connection to a SQL server.

use hopper::{Error, Result};
use sqlx::Connection;

/// A schema (PostgreSQL) or database (MySQL) made for one run and dropped after it.
pub(crate) struct Scratch {
    /// The server it was made on, as given.
    pub(crate) server: String,
    /// The schema's or database's name.
    pub(crate) name: String,
    /// The broker URL that works in it.
    pub(crate) url: String,
    /// A database of its own (always on MySQL), not a schema.
    database: bool,
}

impl Scratch {
    /// Whether `server` is a MySQL (or MariaDB) server's URL.
    pub(crate) fn mysql(server: &str) -> bool {
        server.starts_with("mysql:")
    }

    /// A new scratch schema, or database with `database`, on `server`.
    async fn create(server: &str, database: bool) -> Result<Self> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("hopper_bench_{}_{n}", std::process::id());
        // A MySQL database must exist before a broker connects to it; a schema is made by
        // the migration.
        let database = database || Self::mysql(server);
        let url = if database {
            Self::admin(server, &format!("CREATE DATABASE {name}"))
                .await
                .map_err(|e| Error::broker("creating a scratch database", e))?;
            with_database(server, &name)
        } else {
            let sep = if server.contains('?') { '&' } else { '?' };
            format!("{server}{sep}schema={name}")
        };
        Ok(Scratch {
            server: server.to_owned(),
            name,
            url,
            database,
        })
    }

    /// Runs one statement on `server` on a connection of its own.
    async fn admin(server: &str, statement: &str) -> std::result::Result<(), sqlx::Error> {
        let mut conn = AdminConn::connect(server).await?;
        let done = conn.execute(statement).await;
        conn.close().await;
        done
    }

    /// Runs `work` in a scratch schema or database of its own on `server`, dropped
    /// afterwards whatever `work` returned.
    pub(crate) async fn run<T>(
        server: &str,
        work: impl AsyncFnOnce(&Scratch) -> Result<T>,
    ) -> Result<T> {
        Self::run_in(server, false, work).await
    }

    /// [`Scratch::run`], in a database of its own on PostgreSQL too with `database`.
    pub(crate) async fn run_in<T>(
        server: &str,
        database: bool,
        work: impl AsyncFnOnce(&Scratch) -> Result<T>,
    ) -> Result<T> {
        let scratch = Scratch::create(server, database).await?;
        let result = work(&scratch).await;
        scratch.drop().await;
        result
    }

    /// Drops the schema or database, with whatever it holds; a failure is ignored.
    async fn drop(self) {
        let statement = match (self.database, Self::mysql(&self.server)) {
            (true, true) => format!("DROP DATABASE IF EXISTS {}", self.name),
            (true, false) => format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            (false, _) => format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name),
        };
        let _ = Self::admin(&self.server, &statement).await;
    }
}

/// A connection of the bench's own to a SQL server: scratch schemas and databases are made
/// and dropped on it, and [`idle_round_trips`](crate::idle::idle_round_trips) reads the server's counts on it.
pub(crate) enum AdminConn {
    Postgres(sqlx::PgConnection),
    MySql(sqlx::MySqlConnection),
}

impl AdminConn {
    /// A connection to `server`, MySQL's or PostgreSQL's by its URL's scheme.
    pub(crate) async fn connect(server: &str) -> std::result::Result<Self, sqlx::Error> {
        Ok(if Scratch::mysql(server) {
            AdminConn::MySql(sqlx::MySqlConnection::connect(server).await?)
        } else {
            AdminConn::Postgres(sqlx::PgConnection::connect(server).await?)
        })
    }

    /// Runs `statement`, its rows ignored.
    pub(crate) async fn execute(
        &mut self,
        statement: &str,
    ) -> std::result::Result<(), sqlx::Error> {
        match self {
            AdminConn::Postgres(conn) => sqlx::raw_sql(statement).execute(conn).await.map(drop),
            AdminConn::MySql(conn) => sqlx::raw_sql(statement).execute(conn).await.map(drop),
        }
    }

    /// `n` round trips of `SELECT 1`, each timed, in milliseconds.
    pub(crate) async fn round_trips_ms(
        &mut self,
        n: usize,
    ) -> std::result::Result<Vec<f64>, sqlx::Error> {
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let started = std::time::Instant::now();
            self.execute("SELECT 1").await?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(times)
    }

    /// The server's count (PostgreSQL: the transactions of `database`; MySQL: the
    /// statements of `user`, or every statement without one) and the connections open to
    /// `database`.
    pub(crate) async fn counts(
        &mut self,
        database: &str,
        user: Option<&str>,
    ) -> std::result::Result<(i64, i64), sqlx::Error> {
        match self {
            AdminConn::Postgres(conn) => {
                sqlx::query_as(
                    "SELECT (SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database \
                     WHERE datname = $1), \
                     (SELECT count(*) FROM pg_stat_activity WHERE datname = $1)",
                )
                .bind(database)
                .fetch_one(conn)
                .await
            }
            AdminConn::MySql(conn) => {
                let (asked,): (i64,) = match user {
                    Some(user) => sqlx::query_as(
                        "SELECT COALESCE((SELECT CAST(SELECT_COMMANDS + UPDATE_COMMANDS + \
                         OTHER_COMMANDS AS SIGNED) FROM information_schema.USER_STATISTICS \
                         WHERE USER = ?), 0)",
                    )
                    .bind(user),
                    None => sqlx::query_as(
                        "SELECT CAST(VARIABLE_VALUE AS SIGNED) \
                         FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'QUESTIONS'",
                    ),
                }
                .fetch_one(&mut *conn)
                .await?;
                let (conns,): (i64,) = sqlx::query_as(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = ?",
                )
                .bind(database)
                .fetch_one(conn)
                .await?;
                Ok((asked, conns))
            }
        }
    }

    /// Closes the connection; a failure is ignored.
    pub(crate) async fn close(self) {
        let _ = match self {
            AdminConn::Postgres(conn) => conn.close().await,
            AdminConn::MySql(conn) => conn.close().await,
        };
    }
}

/// `server`'s URL naming database `name` instead of its own, its parameters kept.
fn with_database(server: &str, name: &str) -> String {
    let (base, query) = match server.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (server, String::new()),
    };
    let (scheme, rest) = base.split_once("://").unwrap_or(("", base));
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    format!("{scheme}://{authority}/{name}{query}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch database's URL keeps the server's scheme, credentials, host and
    /// parameters, and names the scratch database.
    #[test]
    fn a_scratch_database_keeps_the_rest_of_the_url() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/test", "scratch_1"),
            "postgres://postgres@127.0.0.1:5432/scratch_1"
        );
        assert_eq!(
            with_database("mysql://root:pw@db/test?ssl-mode=disabled", "scratch_2"),
            "mysql://root:pw@db/scratch_2?ssl-mode=disabled"
        );
        assert_eq!(
            with_database("postgres://app@db?sslmode=disable", "s"),
            "postgres://app@db/s?sslmode=disable"
        );
    }
}
