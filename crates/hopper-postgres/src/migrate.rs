//! Versioned migrations: `hopper migrate` applies them; a broker checks the version at
//! connect and says what to run when the schema is behind.

use hopper_core::{Error, Result};
use sqlx::postgres::PgConnection;
use sqlx::{Connection, Executor};

use crate::options::PgOptions;
use crate::sql::statement;
use crate::url::BrokerUrl;

/// The migrations, in order; a schema at version N has the first N applied.
pub(crate) const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_create_jobs.sql"),
    include_str!("../migrations/0002_one_lease_index.sql"),
    include_str!("../migrations/0003_no_vacuum_truncate.sql"),
    include_str!("../migrations/0004_range_checks.sql"),
    include_str!("../migrations/0005_operator_calls.sql"),
    include_str!("../migrations/0006_workers.sql"),
    include_str!("../migrations/0007_unique_keys.sql"),
    include_str!("../migrations/0008_worker_schedules.sql"),
    include_str!("../migrations/0009_job_unique_keys.sql"),
    include_str!("../migrations/0010_ordering_keys.sql"),
    include_str!("../migrations/0011_rate_limits.sql"),
    include_str!("../migrations/0012_groups.sql"),
    include_str!("../migrations/0013_ordered_heads_unblocked.sql"),
    include_str!("../migrations/0014_rate_keys.sql"),
    include_str!("../migrations/0015_rate_keys_beside_lines.sql"),
    include_str!("../migrations/0016_rate_claim_by_sets.sql"),
    include_str!("../migrations/0017_retries_step_aside.sql"),
];

/// The schema version this build needs: the number of its migrations.
fn needed_version() -> i32 {
    MIGRATIONS.len() as i32
}

/// Serialises concurrent `migrate` runs across processes.
const MIGRATE_LOCK: i64 = 0x686f_7070_6572; // "hopper"

/// Brings the schema named by the URL (`?schema=`, default `hopper`) up to this build's
/// version. Returns how many migrations it applied; safe to run from many processes at once.
pub async fn migrate(url: &str) -> Result<u32> {
    let parsed = BrokerUrl::parse(url)?;
    let options = PgOptions::default().schema(
        parsed
            .schema
            .clone()
            .unwrap_or_else(|| PgOptions::default().schema),
    );
    migrate_with(url, &options).await
}

/// [`migrate`] with the schema taken from `options`.
pub async fn migrate_with(url: &str, options: &PgOptions) -> Result<u32> {
    options.validate()?;
    let parsed = BrokerUrl::parse(url)?;
    let mut conn = parsed.connect().await?;
    let result = apply(&mut conn, &options.schema).await;
    let _ = conn.close().await;
    result.map_err(|e| {
        Error::broker(
            format!("migrating schema {} of {}", options.schema, parsed.shown),
            e,
        )
    })
}

async fn apply(conn: &mut PgConnection, schema: &str) -> Result<u32, sqlx::Error> {
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(MIGRATE_LOCK)
        .execute(&mut *conn)
        .await?;
    let result = apply_locked(conn, schema).await;
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(MIGRATE_LOCK)
        .execute(&mut *conn)
        .await?;
    result
}

async fn apply_locked(conn: &mut PgConnection, schema: &str) -> Result<u32, sqlx::Error> {
    conn.execute(&*statement(
        "CREATE SCHEMA IF NOT EXISTS {schema};
             CREATE TABLE IF NOT EXISTS {schema}.hopper_migrations (
                 version integer PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT now()
             );",
        schema,
    ))
    .await?;
    let current: i32 = sqlx::query_scalar(&statement(
        include_str!("../sql/schema_version.sql"),
        schema,
    ))
    .fetch_one(&mut *conn)
    .await?;
    let mut applied = 0;
    for (i, migration) in MIGRATIONS.iter().enumerate() {
        let version = i as i32 + 1;
        if version <= current {
            continue;
        }
        let mut tx = conn.begin().await?;
        tx.execute(&*statement(migration, schema)).await?;
        sqlx::query(&statement(
            "INSERT INTO {schema}.hopper_migrations (version) VALUES ($1)",
            schema,
        ))
        .bind(version)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        applied += 1;
    }
    Ok(applied)
}

/// The schema's version: 0 when Hopper was never migrated there.
pub(crate) async fn version(conn: &mut PgConnection, schema: &str) -> Result<i32, sqlx::Error> {
    let sql = statement(include_str!("../sql/schema_version.sql"), schema);
    match sqlx::query_scalar::<_, i32>(&sql).fetch_one(conn).await {
        Ok(v) => Ok(v),
        // 42P01 undefined_table, 3F000 invalid_schema_name: never migrated.
        Err(sqlx::Error::Database(e)) if matches!(e.code().as_deref(), Some("42P01" | "3F000")) => {
            Ok(0)
        }
        Err(e) => Err(e),
    }
}

/// Refuses a schema that is not at this build's version, saying what to do.
pub(crate) fn check_version(found: i32, schema: &str, shown_url: &str) -> Result<()> {
    let needed = needed_version();
    if found < needed {
        return Err(Error::broker_msg(format!(
            "the hopper schema {schema} in {shown_url} is at version {found} but this build needs \
             {needed}: run `hopper migrate --broker {shown_url}`"
        )));
    }
    if found > needed {
        return Err(Error::broker_msg(format!(
            "the hopper schema {schema} in {shown_url} is at version {found}, newer than this build \
             ({needed}): upgrade hopper"
        )));
    }
    Ok(())
}
