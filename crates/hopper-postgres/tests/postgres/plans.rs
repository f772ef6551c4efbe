//! The plans the server picks for the hot statements, and the broker's own vacuum.
//!
//! The broker runs its statements as generic plans (`plan_cache_mode =
//! force_generic_plan`), planned once per connection whatever the table holds later. A
//! queue table swings from empty to millions of rows between two `ANALYZE`s, so these
//! tests plan each statement against statistics that mislead on purpose (taken while no
//! job was leased) and check that jobs are still read by key, never by scanning the table.

use std::time::Duration;

use hopper_core::Settlement;
use hopper_testkit::helpers::{enqueue_n, fetch};
use sqlx::{Connection, PgConnection};

use super::support::{broker_with, drop_schema, schema, url};

/// Drops the test's schema when the test ends, however it ends.
pub(super) struct DropSchema(pub(super) String);

impl Drop for DropSchema {
    fn drop(&mut self) {
        drop_schema(self.0.clone());
    }
}

/// `EXPLAIN (ANALYZE)` of one execution of `statement`, prepared as the broker prepares it
/// and planned generically as the broker's connections plan it.
pub(super) async fn explain(
    conn: &mut PgConnection,
    name: &str,
    statement: &str,
    args: &str,
) -> String {
    sqlx::raw_sql(&format!("PREPARE {name} AS {statement}"))
        .execute(&mut *conn)
        .await
        .unwrap();
    let args = if args.is_empty() {
        String::new()
    } else {
        format!("({args})")
    };
    let rows: Vec<(String,)> = sqlx::query_as(&format!(
        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) EXECUTE {name}{args}"
    ))
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    rows.into_iter().map(|r| r.0 + "\n").collect()
}

/// The most rows any node of `plan` read and threw away. A statement that reads by key
/// throws away at most the batch it was given (100); one that walks the 2,000 leased or
/// 20,000 pending jobs throws away thousands.
pub(super) fn most_removed(plan: &str) -> u64 {
    plan.lines()
        .filter_map(|l| l.trim().strip_prefix("Rows Removed by "))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// Asserts that `plan` (of `what`) scans no table, throws away no more than its batch,
/// and reads jobs by key: it shows `by_key`.
fn assert_reads_by_key(plan: &str, what: &str, by_key: &str) {
    assert!(
        !plan.contains("Seq Scan"),
        "{what} scanned the table:\n{plan}"
    );
    assert!(
        most_removed(plan) < 1000,
        "{what} read thousands of rows it did not want:\n{plan}"
    );
    assert!(
        plan.contains(by_key),
        "{what} did not read jobs by key:\n{plan}"
    );
}

/// How many jobs of `schema` lease `lease` holds.
async fn leased_by(conn: &mut PgConnection, schema: &str, lease: i64) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {schema}.hopper_jobs WHERE state = 1 AND lease_id = $1"
    ))
    .bind(lease)
    .fetch_one(conn)
    .await
    .unwrap()
}

pub(super) fn rendered(template: &str, schema: &str) -> String {
    template.replace("{schema}", schema)
}

#[tokio::test]
async fn claims_and_settlements_read_jobs_by_key_under_misleading_statistics() {
    // Statistics taken while no job was leased, then 2,000 of the 20,000 jobs leased.
    let (schema, _cleanup, mut conn) = filled(&[("0", "0", 20_000)]).await;
    sqlx::raw_sql(&format!(
        "UPDATE {schema}.hopper_jobs SET state = 1, lease_id = 7, lease_expires = 9e15
         WHERE id <= 2000"
    ))
    .execute(&mut conn)
    .await
    .unwrap();

    let claim = rendered(include_str!("../../sql/claim.sql"), &schema);
    let plan = explain(
        &mut conn,
        "claim",
        &claim,
        "'{q}', '{100}', NULL, 8, 60000, true, 100, 20, NULL",
    )
    .await;
    assert_reads_by_key(&plan, "a claim", "Index Cond: (id = ANY");
    assert_eq!(leased_by(&mut conn, &schema, 8).await, 100);

    // Settle 100 of the 2,000 leased jobs: each is found by its primary key, not by
    // walking every leased job for each settlement.
    let settle = rendered(include_str!("../../sql/settle.sql"), &schema);
    let ids: Vec<String> = (1..=100).map(|i| i.to_string()).collect();
    let args = format!(
        "'{{{}}}', '{{{}}}', '{{{}}}', '{{{}}}', '{{}}', NULL, false, '{{}}', '{{}}', 20, NULL",
        ids.join(","),
        vec!["7"; 100].join(","),
        vec!["0"; 100].join(","),
        vec!["0"; 100].join(","),
    );
    let plan = explain(&mut conn, "settle", &settle, &args).await;
    assert_reads_by_key(&plan, "a settlement", "Index Scan using hopper_jobs_pkey");
    let left = leased_by(&mut conn, &schema, 7).await;
    assert_eq!(left, 1900, "100 of the 2,000 leased jobs were acked");
    conn.close().await.unwrap();
}

/// The pages the whole statement read: the first (outermost) `Buffers:` line of `plan`.
pub(super) fn pages_read(plan: &str) -> u64 {
    let line = plan
        .lines()
        .find(|l| l.trim().starts_with("Buffers: shared"))
        .unwrap_or_else(|| panic!("no buffer counts in:\n{plan}"));
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter(|(k, _)| *k == "hit" || *k == "read")
        .map(|(_, v)| v.parse::<u64>().unwrap())
        .sum()
}

/// A fresh schema whose jobs table holds `rows`: `(priority, run_at, how many)`, each
/// group's priorities and times given as SQL over `i` (1..=how many); vacuumed and analyzed.
/// Returns the schema (dropped with the guard) and a connection planning as the broker's do.
pub(super) async fn filled(rows: &[(&str, &str, u32)]) -> (String, DropSchema, PgConnection) {
    let schema = schema().await.schema;
    let guard = DropSchema(schema.clone());
    let mut conn = PgConnection::connect(&url()).await.unwrap();
    let mut setup = vec![
        "SET plan_cache_mode = force_generic_plan".to_owned(),
        "SET enable_seqscan = off".to_owned(),
    ];
    for (priority, run_at, n) in rows {
        setup.push(format!(
            "INSERT INTO {schema}.hopper_jobs
                 (queue, priority, run_at, max_attempts, payload, created_at)
             SELECT 'q', {priority}, {run_at}, 25, '\\x00'::bytea, 0
             FROM generate_series(1, {n}) AS i"
        ));
    }
    setup.push(format!("VACUUM (ANALYZE) {schema}.hopper_jobs"));
    for statement in setup {
        sqlx::raw_sql(&statement).execute(&mut conn).await.unwrap();
    }
    (schema, guard, conn)
}

#[tokio::test]
async fn a_claim_reads_due_jobs_by_range_however_many_are_delayed() {
    // 60,000 jobs delayed far into the future over three priorities, then 30 due jobs at
    // priority 1 and 20 at priority 2.
    let (schema, _cleanup, mut conn) =
        filled(&[("i % 3", "2e14", 60_000), ("1", "i", 30), ("2", "i", 20)]).await;
    let claim = rendered(include_str!("../../sql/claim.sql"), &schema);
    sqlx::raw_sql(&format!("PREPARE claim AS {claim}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let run = |lease: i64| {
        format!(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) \
             EXECUTE claim('{{q}}', '{{40}}', NULL, {lease}, 60000, false, 40, 20, NULL)"
        )
    };
    let plan: String = sqlx::query_scalar::<_, String>(&run(8))
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .join("\n");
    // Highest priority first, then by run_at: the 20 of priority 2, then 20 of priority 1.
    let by_priority: Vec<(i32, i64)> = sqlx::query_as(&format!(
        "SELECT priority, count(*) FROM {schema}.hopper_jobs WHERE lease_id = 8
         GROUP BY priority ORDER BY priority"
    ))
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(by_priority, [(1, 20), (2, 20)], "{plan}");

    // The next claim finds 10 due jobs and the next due time, among 60,000 delayed ones.
    let plan: String = sqlx::query_scalar::<_, String>(&run(9))
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .join("\n");
    assert_eq!(leased_by(&mut conn, &schema, 9).await, 10);
    let pages = pages_read(&plan);
    assert!(
        pages < 150,
        "a short claim read {pages} pages, walking the delayed jobs:\n{plan}"
    );
    conn.close().await.unwrap();
}

#[tokio::test]
async fn a_claim_looks_up_only_the_priority_levels_it_takes_from() {
    // 20,000 due jobs, each at a priority of its own.
    let (schema, _cleanup, mut conn) = filled(&[("i", "0", 20_000)]).await;
    let claim = rendered(include_str!("../../sql/claim.sql"), &schema);
    let plan = explain(
        &mut conn,
        "claim",
        &claim,
        "'{q}', '{100}', NULL, 8, 60000, false, 100, 20, NULL",
    )
    .await;
    let top: (i64, i32, i32) = sqlx::query_as(&format!(
        "SELECT count(*), min(priority), max(priority) FROM {schema}.hopper_jobs
         WHERE lease_id = 8"
    ))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(top, (100, 19_901, 20_000), "the 100 highest priorities");
    // One level looked up per job taken, not the 20,000 levels of the queue.
    let levels = plan
        .lines()
        .find(|l| l.contains("Recursive Union"))
        .and_then(|l| l.split("rows=").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no level lookup in:\n{plan}"));
    assert!(levels <= 101, "{levels} levels looked up:\n{plan}");
    conn.close().await.unwrap();
}

/// How many times the jobs table of `schema` was vacuumed other than by autovacuum.
async fn vacuums(conn: &mut PgConnection, schema: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT vacuum_count FROM pg_stat_user_tables
         WHERE schemaname = $1 AND relname = 'hopper_jobs'",
    )
    .bind(schema)
    .fetch_one(conn)
    .await
    .unwrap()
}

/// Claims and acks `n` jobs of queue `q` in fetches of 50.
async fn drain(broker: &std::sync::Arc<dyn hopper_core::Broker>, n: usize) {
    enqueue_n(broker, "q", n).await;
    let mut done = 0;
    while done < n {
        let fetched = fetch(broker, "q", 50, Duration::from_secs(60)).await;
        assert!(!fetched.jobs.is_empty(), "jobs left after {done}");
        done += fetched.jobs.len();
        let acks = fetched.jobs.iter().map(Settlement::ack).collect();
        assert_eq!(
            broker.settle(acks).await.unwrap().applied,
            fetched.jobs.len()
        );
    }
}

#[tokio::test]
async fn the_broker_vacuums_its_table_after_the_claims_it_was_told() {
    let (broker, pg) = broker_with(|o| o.vacuum_after(Some(100))).await;
    let mut conn = PgConnection::connect(&url()).await.unwrap();
    assert_eq!(vacuums(&mut conn, pg.schema()).await, 0);

    drain(&broker, 150).await;
    // The vacuum runs in the background; it reports when it ends.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while vacuums(&mut conn, pg.schema()).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no vacuum after 150 claims"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    conn.close().await.unwrap();
}

#[tokio::test]
async fn without_vacuum_after_the_broker_leaves_its_table_to_autovacuum() {
    let (broker, pg) = broker_with(|o| o.vacuum_after(None)).await;
    let mut conn = PgConnection::connect(&url()).await.unwrap();
    drain(&broker, 300).await;
    // Give a vacuum that should not have started the time one takes here.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(vacuums(&mut conn, pg.schema()).await, 0);
    conn.close().await.unwrap();
}
