//! Versioned migrations: [`migrate()`] (the `hopper migrate` command) applies them; a broker
//! checks the version at connect and says what to run when the schema is behind.
//!
//! Applied versions are rows of `hopper_migrations`. MySQL commits DDL at once, so a
//! migration cannot share a transaction with its record; instead concurrent runs on one
//! database are serialised with a named lock, and each migration is written to be run
//! again harmlessly should a run stop between the two.

use hopper_core::{Error, Result};
use sqlx::mysql::MySqlConnection;
use sqlx::{Connection, Executor};

use crate::conn::{open, server_error_number};
use crate::sql::{self, fixed};
use crate::url::BrokerUrl;

/// The migrations, in order; a schema at version N has the first N applied.
pub(crate) const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_create_jobs.sql"),
    include_str!("../migrations/0002_range_checks.sql"),
    include_str!("../migrations/0003_errors_and_pauses.sql"),
    include_str!("../migrations/0004_workers.sql"),
    include_str!("../migrations/0005_unique_keys.sql"),
    include_str!("../migrations/0006_worker_schedules.sql"),
    include_str!("../migrations/0007_record_unique_keys.sql"),
    include_str!("../migrations/0008_ordering_keys.sql"),
    include_str!("../migrations/0009_rate_limits.sql"),
    include_str!("../migrations/0010_groups.sql"),
    include_str!("../migrations/0011_rate_keys.sql"),
];

/// The schema version this build needs: the number of its migrations.
fn needed_version() -> u32 {
    MIGRATIONS.len() as u32
}

/// MySQL's error number for a missing table.
const ER_NO_SUCH_TABLE: u16 = 1146;
/// What a migration adds already exists (a column, an index, a CHECK constraint: MariaDB's
/// number, then MySQL 8's), or what it drops is already gone (MariaDB's "can't drop",
/// MySQL's "constraint not found"). A migration makes these changes in its last statement,
/// one `ALTER` that applies whole or not at all, so finding them means a run stopped after
/// it but before its version was recorded. Which of them a server reports first depends
/// on the server: MariaDB checks the drops of an `ALTER` before its additions.
const ER_ALREADY_APPLIED: [u16; 6] = [1060, 1061, 1091, 1826, 3822, 3940];

/// Brings the database named by the URL up to this build's schema version. Returns how
/// many migrations it applied (0 when already up to date). Safe to run from several
/// processes at once: they take turns, and each migration is applied once.
///
/// # Errors
/// A configuration error for a malformed URL; a broker error naming the URL (password
/// hidden) when the server cannot be reached, another `migrate` held the database for
/// 30 s, or a migration fails.
pub async fn migrate(url: &str) -> Result<u32> {
    let parsed = BrokerUrl::parse(url)?;
    let mut conn = open(&parsed.options, &parsed.shown, parsed.connect_timeout).await?;
    let result = apply(&mut conn, &parsed.shown).await;
    let _ = conn.close().await;
    result
}

async fn apply(conn: &mut MySqlConnection, shown: &str) -> Result<u32> {
    let failed = |e| Error::broker(format!("migrating the hopper schema in {shown}"), e);
    let locked: Option<i64> = sqlx::query_scalar(fixed(&sql::MIGRATE_LOCK))
        .fetch_one(&mut *conn)
        .await
        .map_err(failed)?;
    if locked != Some(1) {
        return Err(Error::broker_msg(format!(
            "migrating the hopper schema in {shown}: another `hopper migrate` held it for 30 s"
        )));
    }
    let result = apply_locked(conn).await.map_err(failed);
    let unlocked = sqlx::query(fixed(&sql::MIGRATE_UNLOCK))
        .execute(&mut *conn)
        .await;
    let applied = result?;
    unlocked.map_err(failed)?;
    Ok(applied)
}

async fn apply_locked(conn: &mut MySqlConnection) -> Result<u32, sqlx::Error> {
    conn.execute(fixed(&sql::MIGRATIONS_TABLE)).await?;
    let current = version(conn).await?;
    let mut applied = 0;
    for (i, migration) in MIGRATIONS.iter().enumerate() {
        let target = i as u32 + 1;
        if target <= current {
            continue;
        }
        let migration: &'static str = migration;
        match conn.execute(sqlx::raw_sql(migration)).await {
            Err(e) if server_error_number(&e).is_some_and(|n| ER_ALREADY_APPLIED.contains(&n)) => {}
            other => {
                other?;
            }
        }
        sqlx::query(fixed(&sql::RECORD_MIGRATION))
            .bind(target)
            .execute(&mut *conn)
            .await?;
        applied += 1;
    }
    Ok(applied)
}

/// The schema's version: 0 when Hopper was never migrated there.
pub(crate) async fn version(conn: &mut MySqlConnection) -> Result<u32, sqlx::Error> {
    match sqlx::query_scalar::<_, i64>(fixed(&sql::SCHEMA_VERSION))
        .fetch_one(conn)
        .await
    {
        Ok(v) => Ok(v.max(0) as u32),
        Err(e) if server_error_number(&e) == Some(ER_NO_SUCH_TABLE) => Ok(0),
        Err(e) => Err(e),
    }
}

/// Refuses a schema that is not at this build's version, saying what to do.
pub(crate) fn check_version(found: u32, shown_url: &str) -> Result<()> {
    let needed = needed_version();
    if found < needed {
        return Err(Error::broker_msg(format!(
            "the hopper schema in {shown_url} is at version {found} but this build needs \
             {needed}: run `hopper migrate --broker {shown_url}`"
        )));
    }
    if found > needed {
        return Err(Error::broker_msg(format!(
            "the hopper schema in {shown_url} is at version {found}, newer than this build \
             ({needed}): upgrade hopper"
        )));
    }
    Ok(())
}
