//! Query plans of the operator calls on the real server: every listing page is one index
//! range read in the listing's order (no sort, so it stops at its LIMIT), re-drives pick
//! their chunk the same way, queue names come from a loose index scan, a queue's bounded
//! counts read at most their limit of index entries each, and a paused queue's claim reads
//! no job at all.

use sqlx::{Connection, MySqlConnection, Row};

use super::plans::{Arg, I, Q, Step, plan, statement};
use super::support::TempDatabase;

/// A statement with the listing placeholders expanded.
fn listing(file: &str, newest_first: bool, due: bool) -> String {
    let (after, order) = if newest_first {
        ("<", "DESC")
    } else {
        (">", "ASC")
    };
    statement(file)
        .replace("{after}", after)
        .replace("{order}", order)
        .replace("{due}", if due { "<=" } else { ">" })
}

fn assert_range(what: &str, steps: &[Step], index: &str) {
    let main: Vec<&Step> = steps
        .iter()
        .filter(|s| s.select_type != "SUBQUERY")
        .collect();
    assert!(
        main.iter().any(|s| s.kind == "range" && s.key == index),
        "{what}: not a range of {index}: {steps:?}"
    );
    assert!(
        steps.iter().all(|s| !s.extra.contains("filesort")),
        "{what} sorts: {steps:?}"
    );
}

#[tokio::test]
async fn listings_and_redrives_read_index_ranges_in_order() {
    let db = TempDatabase::migrated().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    // 20,000 jobs of queue `q` on three priority levels, due and scheduled around 1,500,000,
    // leased, dead and cancelled, beside two other queues.
    sqlx::raw_sql(
        "SET SESSION max_recursive_iterations = 100000;
         INSERT INTO hopper_jobs (queue, state, priority, run_at, max_attempts, payload,
                                  created_at, lease_id, lease_expires, finished_at)
         WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
         SELECT IF(i % 10 = 0, ELT(1 + i % 3, 'a', 'b', 'c'), 'q'),
                ELT(1 + i % 7, 0, 0, 0, 0, 1, 3, 4), i % 3 - 1, 1000000 + i * 50, 25, 'x', 1,
                IF(i % 7 = 4, i, NULL), IF(i % 7 = 4, 3000000 + i, NULL),
                IF(i % 7 >= 5, 2000000 + i, NULL)
         FROM n;
         INSERT INTO hopper_paused (queue, paused_at) VALUES ('b', 1);
         ANALYZE TABLE hopper_jobs;",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let now = Some(1_500_000);

    let level = include_str!("../../sql/list_level.sql");
    for newest_first in [false, true] {
        for due in [true, false] {
            let sql = listing(level, newest_first, due);
            // A cursor on the listed side of now.
            let run_at = Some(if due { 1_200_000 } else { 1_800_000 });
            let binds = [
                Q,
                I(Some(0)),
                I(now),
                I(run_at),
                I(run_at),
                I(Some(5)),
                I(Some(100)),
            ];
            let steps = plan(&mut conn, &sql, &binds, "q").await;
            let what = format!("a level's page, newest first {newest_first}, due {due}");
            assert_range(&what, &steps, "hopper_jobs_ready");
            // Bounded by priority and run_at, not the queue only.
            assert!(steps[0].key_len > 135, "{what}: {steps:?}");
        }
    }
    for (file, bound) in [
        (include_str!("../../sql/level_below.sql"), i64::MAX),
        (include_str!("../../sql/level_above.sql"), i64::MIN),
    ] {
        let steps = plan(&mut conn, &statement(file), &[Q, I(Some(bound))], "q").await;
        assert_range("the next level", &steps, "hopper_jobs_ready");
    }
    let cursor = [
        I(Some(3_000_100)),
        I(Some(3_000_100)),
        I(Some(100)),
        I(Some(100)),
    ];
    for newest_first in [false, true] {
        let sql = listing(
            include_str!("../../sql/list_leased.sql"),
            newest_first,
            true,
        );
        let binds: Vec<Arg> = [Q].into_iter().chain(cursor).collect();
        let steps = plan(&mut conn, &sql, &binds, "q").await;
        assert_range("leased", &steps, "hopper_jobs_lease_expires");

        let sql = listing(
            include_str!("../../sql/list_finished.sql"),
            newest_first,
            true,
        );
        let binds = [
            Q,
            I(Some(3)),
            I(Some(2_000_100)),
            I(Some(2_000_100)),
            I(Some(100)),
            I(Some(100)),
        ];
        let steps = plan(&mut conn, &sql, &binds, "q").await;
        assert_range("finished", &steps, "hopper_jobs_finished");
    }
    for file in [
        include_str!("../../sql/retry_dead_queue.sql"),
        include_str!("../../sql/discard_dead_queue.sql"),
    ] {
        let sql = statement(file);
        let steps = plan(&mut conn, &sql, &[Q, I(Some(100)), I(now)], "q").await;
        assert_range("a chunk of dead letters", &steps, "hopper_jobs_finished");
        assert!(
            steps
                .iter()
                .any(|s| s.kind == "eq_ref" && s.key == "PRIMARY"),
            "{sql}: {steps:?}"
        );
    }

    // The dead letters of old keep away from the queue's NULLs there.
    let dead = statement(include_str!("../../sql/dead_letters.sql"));
    let steps = plan(&mut conn, &dead, &[Q, I(Some(10))], "q").await;
    assert!(
        steps.iter().all(|s| s.key == "hopper_jobs_due"),
        "dead letters: {steps:?}"
    );

    let names = plan(
        &mut conn,
        &statement(include_str!("../../sql/queue_names.sql")),
        &[],
        "q",
    )
    .await;
    assert!(
        names.iter().any(
            |s| s.key == "hopper_jobs_finished" && s.extra.contains("Using index for group-by")
        ),
        "queue names: {names:?}"
    );
    let state = statement(include_str!("../../sql/queue_state.sql"));
    let steps = plan(&mut conn, &state, &[Q, Q, I(now), I(now), Q, Q, Q], "q").await;
    assert!(
        steps
            .iter()
            .any(|s| s.key == "hopper_jobs_due" || s.extra.contains("optimized away")),
        "the oldest due job: {steps:?}"
    );

    bounded_counts_stop_at_their_limit(&mut conn, now).await;

    // Queue `b` is paused: its claim is found empty before any index is read.
    let claim = statement(include_str!("../../sql/claim.sql"));
    let steps = plan(&mut conn, &claim, &[Q, Q, I(now), Q, I(Some(10))], "b").await;
    assert!(
        steps.iter().any(|s| s.extra.contains("Impossible WHERE")),
        "a paused queue's claim: {steps:?}"
    );
    conn.close().await.unwrap();
}

/// How many index entries this session has read past the first of each range so far.
async fn entries_read(conn: &mut MySqlConnection) -> i64 {
    let row = sqlx::query("SHOW SESSION STATUS LIKE 'Handler_read_next'")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    row.get::<String, _>(1).parse().unwrap()
}

/// Counts `q` with `counts_bounded.sql` at limit `limit`, or `counts.sql` for `None`, as
/// the broker binds them; returns the counts and the index entries read.
async fn count(
    conn: &mut MySqlConnection,
    now: Option<i64>,
    limit: Option<i64>,
) -> ([i64; 4], i64) {
    let file = match limit {
        Some(_) => include_str!("../../sql/counts_bounded.sql"),
        None => include_str!("../../sql/counts.sql"),
    };
    let sql = statement(file);
    let mut query = sqlx::query_as::<_, (i64, i64, i64, i64)>(&sql);
    for split_at_now in [true, true, false, false] {
        query = query.bind("q");
        if split_at_now {
            query = query.bind(now);
        }
        if let Some(limit) = limit {
            query = query.bind(limit);
        }
    }
    let before = entries_read(conn).await;
    let (a, b, c, d) = query.fetch_one(&mut *conn).await.unwrap();
    let read = entries_read(conn).await - before;
    ([a, b, c, d], read)
}

/// Each bounded count is an index-only read of `hopper_jobs_due` cut at its LIMIT: the
/// statement reads at most the limit of entries per state, where the exact counts read
/// every job of `q` in those states, and counts below the limit come out exact.
async fn bounded_counts_stop_at_their_limit(conn: &mut MySqlConnection, now: Option<i64>) {
    let limit = Some(101);
    let sql = statement(include_str!("../../sql/counts_bounded.sql"));
    let binds = [
        Q,
        I(now),
        I(limit),
        Q,
        I(now),
        I(limit),
        Q,
        I(limit),
        Q,
        I(limit),
    ];
    let steps = plan(conn, &sql, &binds, "q").await;
    let reads: Vec<&Step> = steps
        .iter()
        .filter(|s| s.select_type == "DERIVED")
        .collect();
    assert_eq!(reads.len(), 4, "one read per state: {steps:?}");
    assert!(
        reads
            .iter()
            .all(|s| s.key == "hopper_jobs_due" && s.extra.contains("Using index")),
        "bounded counts: {steps:?}"
    );

    let (exact, all_read) = count(conn, now, None).await;
    let (bounded, bounded_read) = count(conn, now, limit).await;
    assert!(exact.iter().filter(|&&n| n > 101).count() >= 3, "{exact:?}");
    assert_eq!(bounded, exact.map(|n| n.min(101)));
    assert!(
        bounded_read <= 4 * 101 && all_read > 4 * 101,
        "index entries read: {bounded_read} bounded, {all_read} exact"
    );
    let (wide, _) = count(conn, now, Some(100_000)).await;
    assert_eq!(wide, exact, "under the limit, exact");
}
