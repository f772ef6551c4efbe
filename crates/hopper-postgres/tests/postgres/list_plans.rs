//! The plans of the operator calls, planned generically against misleading statistics as
//! the broker's connections plan them (see `plans`): a page of a listing reads one index
//! range from its cursor, as cheap deep in a state as at its start, and the queue names
//! come from one index descent per queue, never from reading the jobs; a glance at a
//! queue's statistics reads no further in each state than its bound.

use sqlx::{PgConnection, Row};

use super::plans::{explain, filled, most_removed, pages_read, rendered};

/// Asserts that a page of `what` read an index range: no table scan, nothing sorted but
/// the page itself, no more than `most_pages` pages read, and `rows` rows returned.
fn assert_ranged(plan: &str, what: &str, rows: usize, most_pages: u64) {
    assert!(
        !plan.contains("Seq Scan"),
        "{what} scanned the table:\n{plan}"
    );
    assert!(
        most_removed(plan) < 1000,
        "{what} read thousands of rows it did not want:\n{plan}"
    );
    let pages = pages_read(plan);
    assert!(pages <= most_pages, "{what} read {pages} pages:\n{plan}");
    let top = plan.lines().next().unwrap_or_default();
    assert!(
        top.contains(&format!("rows={rows} ")),
        "{what} did not return {rows} rows:\n{plan}"
    );
}

/// Runs `statement` of `sql/` with each of `pages` (a name and its arguments) and asserts
/// each read an index range.
async fn assert_pages(
    conn: &mut PgConnection,
    schema: &str,
    statement: &str,
    pages: &[(&str, &str, usize)],
) {
    let sql = rendered(statement, schema);
    for (name, args, rows) in pages {
        let plan = explain(conn, name, &sql, args).await;
        assert_ranged(&plan, name, *rows, 60);
    }
}

#[tokio::test]
async fn pages_of_waiting_jobs_read_index_ranges_at_any_depth() {
    // 20,000 due jobs over four priorities (ids 1..=20,000, run_at = id), then 20,000
    // delayed far ahead over the same priorities.
    let (schema, _cleanup, mut conn) =
        filled(&[("i % 4", "i", 20_000), ("i % 4", "2e14", 20_000)]).await;
    let top = i64::MAX;
    let bottom = i64::MIN;
    assert_pages(
        &mut conn,
        &schema,
        include_str!("../../sql/list_waiting.sql"),
        &[
            (
                "pending_first",
                &format!("'q', NULL, true, {top}, 0, 0, 100"),
                100,
            ),
            ("pending_deep", "'q', NULL, true, 1, 15001, 15001, 100", 100),
            // The last 50 of level 0: the page goes on to no level below.
            ("pending_end", "'q', NULL, true, 0, 19800, 19800, 100", 50),
            (
                "scheduled_deep",
                "'q', NULL, false, 2, 200000000000000, 30002, 100",
                100,
            ),
        ],
    )
    .await;
    assert_pages(
        &mut conn,
        &schema,
        include_str!("../../sql/list_waiting_desc.sql"),
        &[
            (
                "newest_first",
                &format!("'q', NULL, true, {bottom}, 0, 0, 100"),
                100,
            ),
            ("newest_deep", "'q', NULL, true, 1, 15001, 15001, 100", 100),
        ],
    )
    .await;
}

#[tokio::test]
async fn pages_of_dead_letters_read_index_ranges_among_equal_end_times() {
    let (schema, _cleanup, mut conn) = filled(&[("0", "0", 1)]).await;
    // 20,000 dead letters that one statement dead-lettered: the same end time.
    let dead = format!(
        "INSERT INTO {schema}.hopper_jobs (id, queue, state, run_at, max_attempts, payload,
                                           created_at, finished_at)
         SELECT 100 + i, 'q', 3, 0, 1, '\\x00', 0, 7 FROM generate_series(1, 20000) AS i;
         ANALYZE {schema}.hopper_jobs"
    );
    sqlx::raw_sql(&dead).execute(&mut conn).await.unwrap();
    assert_pages(
        &mut conn,
        &schema,
        include_str!("../../sql/list_finished.sql"),
        &[
            (
                "dead_first",
                &format!("'q', 3, {}, {}, 100", i64::MIN, i64::MIN),
                100,
            ),
            ("dead_deep", "'q', 3, 7, 15000, 100", 100),
        ],
    )
    .await;
    assert_pages(
        &mut conn,
        &schema,
        include_str!("../../sql/list_finished_desc.sql"),
        &[("dead_newest_deep", "'q', 3, 7, 15000, 100", 100)],
    )
    .await;
}

#[tokio::test]
async fn queue_names_come_from_the_indexes_not_the_jobs() {
    // 40,000 jobs waiting and dead in three queues.
    let (schema, _cleanup, mut conn) = filled(&[("0", "i", 20_000)]).await;
    let more = format!(
        "INSERT INTO {schema}.hopper_jobs (queue, state, run_at, max_attempts, payload,
                                           created_at, finished_at)
         SELECT 'q' || (i % 3), 3, 0, 1, '\\x00', 0, i FROM generate_series(1, 20000) AS i;
         ANALYZE {schema}.hopper_jobs"
    );
    sqlx::raw_sql(&more).execute(&mut conn).await.unwrap();
    let sql = rendered(include_str!("../../sql/queues.sql"), &schema);
    let plan = explain(&mut conn, "queues", &sql, "").await;
    assert_ranged(&plan, "queues", 4, 60);
}

/// queue_stats.sql for queue `q`, each count bounded by `limit` (None: exact) at time
/// 10^9 (every job given a time below it is due): the counts, and the plan of one more
/// execution, prepared as `name`.
async fn queue_stats(
    conn: &mut PgConnection,
    schema: &str,
    name: &str,
    limit: Option<i64>,
) -> ([i64; 4], String) {
    let sql = rendered(include_str!("../../sql/queue_stats.sql"), schema);
    let row = sqlx::query(&sql)
        .bind("q")
        .bind(1_000_000_000_i64)
        .bind(60_000_i64)
        .bind(limit)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let counts = [0, 1, 2, 3].map(|i| row.get::<i64, _>(i));
    let limit = limit.map_or("NULL".to_owned(), |n| n.to_string());
    let args = format!("'q', 1000000000, 60000, {limit}");
    (counts, explain(conn, name, &sql, &args).await)
}

#[tokio::test]
async fn a_glance_counts_each_state_no_further_than_its_bound() {
    // 20,000 jobs delayed far ahead over four priorities, 30 due over the same four, and
    // 20,000 dead letters.
    let (schema, _cleanup, mut conn) =
        filled(&[("i % 4", "2e14", 20_000), ("i % 4", "i", 30)]).await;
    let dead = format!(
        "INSERT INTO {schema}.hopper_jobs (queue, state, run_at, max_attempts, payload,
                                           created_at, finished_at)
         SELECT 'q', 3, 0, 1, '\\x00', 0, i FROM generate_series(1, 20000) AS i;
         ANALYZE {schema}.hopper_jobs"
    );
    sqlx::raw_sql(&dead).execute(&mut conn).await.unwrap();

    let (exact, plan) = queue_stats(&mut conn, &schema, "exact", None).await;
    assert_eq!(exact, [30, 20_000, 0, 20_000]);
    let walked = pages_read(&plan);

    // Bounded by 100: the 30 due jobs counted exactly, from each level's range of due jobs
    // rather than among the delayed ones; the delayed and the dead, 101, meaning more.
    let (glance, plan) = queue_stats(&mut conn, &schema, "glance", Some(101)).await;
    assert_eq!(glance, [30, 101, 0, 101]);
    assert!(
        !plan.contains("Seq Scan"),
        "the glance scanned the table:\n{plan}"
    );
    assert!(
        most_removed(&plan) < 1000,
        "the glance read thousands of rows it did not want:\n{plan}"
    );
    let pages = pages_read(&plan);
    assert!(
        pages <= 80 && pages * 4 < walked,
        "the glance read {pages} pages, the exact count {walked}:\n{plan}"
    );
}
