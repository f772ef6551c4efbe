//! A fresh schema per test, dropped when the test's broker is dropped.

use std::sync::Arc;

use hopper_core::{Broker, Clock};
use hopper_postgres::{PgBroker, PgOptions};
use hopper_testkit::{WithCleanup, unique_name};

/// The server the tests use.
pub fn url() -> String {
    std::env::var("HOPPER_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Drops `schema` on a thread of its own with a runtime of its own, so it can be called
/// from async code and from a destructor alike.
pub fn drop_schema(schema: String) {
    let _ = std::thread::spawn(move || drop_schema_here(schema)).join();
}

fn drop_schema_here(schema: String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for cleanup");
    rt.block_on(async move {
        use sqlx::Connection;
        if let Ok(mut conn) = sqlx::PgConnection::connect(&url()).await {
            let sql = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
            let _ = sqlx::raw_sql(&sql).execute(&mut conn).await;
            let _ = conn.close().await;
        }
    });
}

/// A migrated schema of its own; the returned options name it.
pub async fn schema() -> PgOptions {
    let options = PgOptions::default().schema(unique_name("hopper_t"));
    hopper_postgres::migrate_with(&url(), &options)
        .await
        .expect("migrate a fresh schema");
    options
}

/// The crate's migrations, to make a schema as an earlier release left it.
const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/0001_create_jobs.sql"),
    include_str!("../../migrations/0002_one_lease_index.sql"),
    include_str!("../../migrations/0003_no_vacuum_truncate.sql"),
    include_str!("../../migrations/0004_range_checks.sql"),
    include_str!("../../migrations/0005_operator_calls.sql"),
    include_str!("../../migrations/0006_workers.sql"),
    include_str!("../../migrations/0007_unique_keys.sql"),
    include_str!("../../migrations/0008_worker_schedules.sql"),
    include_str!("../../migrations/0009_job_unique_keys.sql"),
    include_str!("../../migrations/0010_ordering_keys.sql"),
    include_str!("../../migrations/0011_rate_limits.sql"),
    include_str!("../../migrations/0012_groups.sql"),
    include_str!("../../migrations/0013_ordered_heads_unblocked.sql"),
    include_str!("../../migrations/0014_rate_keys.sql"),
    include_str!("../../migrations/0015_rate_keys_beside_lines.sql"),
    include_str!("../../migrations/0016_rate_claim_by_sets.sql"),
    include_str!("../../migrations/0017_retries_step_aside.sql"),
];

/// A schema of its own migrated to `version` only, as the release that shipped that
/// version left it, for `migrate` to bring up from there. The caller drops it.
pub async fn schema_at(version: usize) -> PgOptions {
    use sqlx::Connection;
    let schema = unique_name("hopper_t");
    let mut conn = sqlx::PgConnection::connect(&url()).await.unwrap();
    let mut setup = format!(
        "CREATE SCHEMA {schema};
         CREATE TABLE {schema}.hopper_migrations (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         );"
    );
    for (i, migration) in MIGRATIONS[..version].iter().enumerate() {
        setup.push_str(&migration.replace("{schema}", &schema));
        setup.push_str(&format!(
            ";\nINSERT INTO {schema}.hopper_migrations (version) VALUES ({});\n",
            i + 1
        ));
    }
    sqlx::raw_sql(&setup).execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    PgOptions::default().schema(schema)
}

/// A broker in a fresh schema, with `options` adjusted by `f`, that drops its schema when
/// the last handle goes.
pub async fn broker_with(f: impl FnOnce(PgOptions) -> PgOptions) -> (Arc<dyn Broker>, PgBroker) {
    let options = f(schema().await);
    let name = options.schema.clone();
    let pg = PgBroker::connect_with(&url(), options)
        .await
        .expect("connect");
    let wrapped: Arc<dyn Broker> = Arc::new(WithCleanup::new(Arc::new(pg.clone()), move || {
        drop_schema(name)
    }));
    (wrapped, pg)
}

/// For the behaviour suite: times from tokio's (paused) clock, no LISTEN connection (its
/// pool keeps timers the paused clock would run early).
pub async fn fresh() -> Arc<dyn Broker> {
    broker_with(|o| o.clock(Clock::tokio()).listen(false))
        .await
        .0
}

/// Stores a pending job `old` of queue `q` in schema `name` as an older version's rows
/// hold it, with SQL alone; its id.
pub async fn insert_old_job(raw: &mut sqlx::PgConnection, name: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "INSERT INTO {name}.hopper_jobs (queue, state, run_at, attempt, max_attempts,
                                         payload, created_at)
         VALUES ('q', 0, 0, 0, 5, 'old', 0) RETURNING id"
    ))
    .fetch_one(raw)
    .await
    .unwrap()
}
