//! The idle round-trip rows (PostgreSQL, MySQL): what a worker waiting on an empty queue
//! asks of the server, as the server counts it, in a database of its own.

use std::time::{Duration, Instant};

use hopper::{Error, JobContext, QueueOptions, Result, Worker};

use crate::scratch::{AdminConn, Scratch};
use crate::table::Row;

/// How long [`idle_round_trips`] watches an idle worker (times `--scale`, at least
/// [`IDLE_WATCHED_MIN`]).
pub(crate) const IDLE_WATCHED: Duration = Duration::from_secs(10);
/// The shortest watch, whatever `--scale`.
pub(crate) const IDLE_WATCHED_MIN: Duration = Duration::from_secs(2);

/// What an idle worker asks of a SQL server: the statements (MySQL) or transactions
/// (PostgreSQL) the server counts over `watch`, with the worker's connections. The
/// worker runs in a database of its own. PostgreSQL counts a session's transactions in
/// `pg_stat_database` only when the session reports them, at its next transaction a second
/// or more after the last report or after 10 s idle, so the watch starts 11 s after the
/// worker, once its start's transactions are in. On MariaDB the worker connects as a user
/// of its own, whose statements the server's user statistics count (`userstat`, turned on
/// for the row and back off after it if it was off); where that cannot be done (MySQL has
/// no `userstat`), the count is the whole server's `Questions`, with nothing else running.
/// The watch starts once the wake poller has backed off (3 s). The counts are read on a
/// connection of their own, twice before the watch: what one reading adds to them (nothing,
/// counted by user) is taken off.
pub(crate) async fn idle_round_trips(name: &str, server: &str, watch: Duration) -> Result<Row> {
    let mysql = Scratch::mysql(server);
    Scratch::run_in(server, true, async |s| {
        hopper::migrate(&s.url).await?;
        let read_err = |e| Error::broker(format!("{name}: reading the server's counts"), e);
        let mut counts = AdminConn::connect(server).await.map_err(read_err)?;
        let user = if mysql {
            CountedUser::create(&mut counts, &s.name).await
        } else {
            None
        };
        let url = user.as_ref().map_or(s.url.clone(), |u| u.url(&s.url));
        let by_user = user.as_ref().map(|u| u.name.clone());
        let by_user = by_user.as_deref();
        // The user goes, and `userstat` back, whatever the watch returned.
        let watched = async {
            let worker = Worker::builder(hopper::connect(&url).await?)
                .queue(
                    "idle",
                    QueueOptions::new().concurrency(1),
                    |_job: JobContext<u64>| async { Ok(()) },
                )
                .start()?;
            tokio::time::sleep(Duration::from_secs(if mysql { 3 } else { 11 })).await;
            let read = async {
                let (first, _) = counts.counts(&s.name, by_user).await?;
                let (before, _) = counts.counts(&s.name, by_user).await?;
                let started = Instant::now();
                tokio::time::sleep(watch).await;
                let (after, conns) = counts.counts(&s.name, by_user).await?;
                Ok((after - before - (before - first), conns, started.elapsed()))
            }
            .await;
            worker.shutdown().await;
            read.map_err(read_err)
        }
        .await;
        if let Some(user) = user {
            user.drop(&mut counts).await;
        }
        counts.close().await;
        let (asked, conns, took) = watched?;
        let secs = took.as_secs_f64();
        let what = match (mysql, by_user) {
            (false, _) => "transactions",
            (true, Some(_)) => "statements",
            (true, None) => "statements (the server's Questions)",
        };
        Ok(Row {
            workload: format!("{name} idle worker, {} s", watch.as_secs()),
            idle_per_s: Some(asked as f64 / secs),
            note: format!(
                "{asked} {what} in {secs:.1} s ({:.2} a second) over the worker's {conns} \
                 connections, as the server counts them",
                asked as f64 / secs,
            ),
            ..Row::default()
        })
    })
    .await
}

/// A MariaDB user of an idle row's own, whose statements the server counts apart from
/// everyone else's (user statistics).
struct CountedUser {
    name: String,
    password: String,
    /// `userstat` was off before the row turned it on.
    userstat_was_off: bool,
}

impl CountedUser {
    /// The user, allowed `database`; `None` where the server keeps no user statistics or
    /// the bench's user may not make users.
    async fn create(admin: &mut AdminConn, database: &str) -> Option<CountedUser> {
        let AdminConn::MySql(conn) = admin else {
            return None;
        };
        let was: i64 = sqlx::query_scalar("SELECT CAST(@@GLOBAL.userstat AS SIGNED)")
            .fetch_one(&mut *conn)
            .await
            .ok()?;
        let user = CountedUser {
            name: database.to_owned(),
            // Random per process (std's hasher keys are), and the user lives for the row.
            password: format!(
                "{:016x}",
                std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), database)
            ),
            userstat_was_off: was == 0,
        };
        let made = async {
            admin.execute("SET GLOBAL userstat = 1").await?;
            admin
                .execute(&format!(
                    "CREATE USER '{}'@'%' IDENTIFIED BY '{}'",
                    user.name, user.password
                ))
                .await?;
            admin
                .execute(&format!("GRANT ALL ON {database}.* TO '{}'@'%'", user.name))
                .await
        }
        .await;
        if made.is_err() {
            user.drop(admin).await;
            return None;
        }
        Some(user)
    }

    /// `url` connecting as this user.
    fn url(&self, url: &str) -> String {
        with_user(url, &self.name, &self.password)
    }

    async fn drop(self, admin: &mut AdminConn) {
        let _ = admin
            .execute(&format!("DROP USER IF EXISTS '{}'@'%'", self.name))
            .await;
        if self.userstat_was_off {
            let _ = admin.execute("SET GLOBAL userstat = 0").await;
        }
    }
}

/// `url` connecting as `user` with `password` instead of its own credentials.
fn with_user(url: &str, user: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let host = rest.find('/').map_or(rest, |end| &rest[..end]);
    let host_at = host.rfind('@').map_or(0, |at| at + 1);
    format!("{scheme}://{user}:{password}@{}", &rest[host_at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counted user's URL replaces the credentials only.
    #[test]
    fn a_counted_user_keeps_the_rest_of_the_url() {
        assert_eq!(
            with_user("mysql://root:pw@db:3306/s?ssl-mode=disabled", "u", "p"),
            "mysql://u:p@db:3306/s?ssl-mode=disabled"
        );
        assert_eq!(with_user("mysql://db/s", "u", "p"), "mysql://u:p@db/s");
    }
}
