//! Query plans on the real server: claims walk the ready index in fetch order without a
//! sort, and the other hot statements use their indexes.

use sqlx::{Connection, MySqlConnection, Row};

use super::support::TempDatabase;

/// What the broker sends for a file of `sql/` (comments dropped, `{now}` expanded).
fn statement(file: &str) -> String {
    file.lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace(
            "{now}",
            "CAST(ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED)",
        )
        .replace("{ids}", "?, ?, ?, ?")
        .replace("{pairs}", "(?, ?), (?, ?)")
}

/// The (table, key, extra) of each step of the plan of `sql` run with `binds`.
async fn plan(
    conn: &mut MySqlConnection,
    sql: &str,
    binds: &[Option<i64>],
    queue: &str,
) -> Vec<(String, String, String)> {
    let text = format!("EXPLAIN {sql}");
    let mut query = sqlx::query(&text);
    // Queue parameters come first in every statement checked here that has one.
    if sql.contains("queue = ?") {
        query = query.bind(queue.to_owned());
    }
    for b in binds {
        query = query.bind(*b);
    }
    let rows = query
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN {sql}: {e}"));
    rows.iter()
        .map(|r| {
            let get = |name: &str| {
                r.try_get::<Option<String>, _>(name)
                    .unwrap()
                    .unwrap_or_default()
            };
            (get("table"), get("key"), get("Extra"))
        })
        .collect()
}

#[tokio::test]
async fn hot_statements_use_their_indexes_and_claims_never_sort() {
    let db = TempDatabase::migrated().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    // A few thousand jobs across queues, priorities, states and times, so that plans are
    // chosen on data rather than on an empty table.
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                  UNION ALL SELECT 8 UNION ALL SELECT 9)";
    let fill = format!(
        "INSERT INTO hopper_jobs (queue, state, priority, run_at, max_attempts, payload, \
                                  created_at, lease_id, lease_expires)
         SELECT ELT(1 + i % 3, 'a', 'b', 'c'), IF(i % 5 = 0, 1, 0), i % 4 - 1,
                1000000 + (i * 7919) % 100000, 25, 'x', 1000000,
                IF(i % 5 = 0, i, NULL), IF(i % 5 = 0, 2000000 + i, NULL)
         FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * (e.d % 5) AS i
               FROM {digits} AS a, {digits} AS b, {digits} AS c, {digits} AS e
               WHERE e.d < 5) AS n"
    );
    sqlx::raw_sql(&fill).execute(&mut conn).await.unwrap();
    sqlx::raw_sql("ANALYZE TABLE hopper_jobs")
        .execute(&mut conn)
        .await
        .unwrap();

    let now = Some(1_050_000);
    let claim = statement(include_str!("../../sql/claim.sql"));
    let claim2 = format!("{claim} UNION ALL {claim}");
    let explain = format!("EXPLAIN {claim2}");
    let mut query = sqlx::query(&explain);
    for q in ["a", "b"] {
        query = query.bind(q).bind(now).bind(10i64);
    }
    for row in query.fetch_all(&mut conn).await.unwrap() {
        let key: Option<String> = row.try_get("key").unwrap();
        let extra: Option<String> = row.try_get("Extra").unwrap();
        assert_eq!(
            key.as_deref(),
            Some("hopper_jobs_ready"),
            "claim: {extra:?}"
        );
        assert!(
            !extra.unwrap_or_default().contains("filesort"),
            "a claim sorts"
        );
    }

    let checks: [(&str, Vec<Option<i64>>, &str); 5] = [
        (
            include_str!("../../sql/next_due.sql"),
            vec![now],
            "hopper_jobs_due",
        ),
        (
            include_str!("../../sql/reap.sql"),
            vec![now, now],
            "hopper_jobs_lease_expires",
        ),
        (
            include_str!("../../sql/renew.sql"),
            vec![now, Some(30_000), Some(5), Some(10), Some(15), Some(0), now],
            "hopper_jobs_lease",
        ),
        (
            include_str!("../../sql/lease_claimed.sql"),
            vec![
                Some(7),
                now,
                Some(30_000),
                Some(1),
                Some(2),
                Some(3),
                Some(0),
            ],
            "PRIMARY",
        ),
        (
            include_str!("../../sql/settle_lock.sql"),
            vec![Some(1), Some(2), Some(3), Some(0)],
            "PRIMARY",
        ),
    ];
    for (file, binds, index) in checks {
        let sql = statement(file);
        let steps = plan(&mut conn, &sql, &binds, "a").await;
        let used = steps.iter().any(|(_, key, extra)| {
            key == index || (index == "hopper_jobs_due" && extra.contains("optimized away"))
        });
        assert!(used, "{sql}\nplan: {steps:?}\nexpected {index}");
        assert!(
            steps
                .iter()
                .all(|(_, _, extra)| !extra.contains("filesort")),
            "{sql}: {steps:?}"
        );
    }
    conn.close().await.unwrap();
}
