//! The operator calls at a million pending jobs, timed through the broker: the figures for
//! keyset paging. Not run by default (filling the table takes about 20 s):
//! `cargo test -p hopper-mysql --test mysql -- --ignored --nocapture at_a_million`.

use std::time::{Duration, Instant};

use hopper_core::{Broker, Cursor, JobId, JobQuery, ListState};
use hopper_mysql::{MySqlBroker, MySqlOptions};
use sqlx::{Connection, MySqlConnection};

use super::support::TempDatabase;

const JOBS: i64 = 1_000_000;

/// The fastest of five runs of `call`, after one to warm up, and its last result.
async fn timed<T, F: Future<Output = T>>(mut call: impl FnMut() -> F) -> (Duration, T) {
    let mut out = call().await;
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let started = Instant::now();
        out = call().await;
        best = best.min(started.elapsed());
    }
    (best, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fills a million jobs; run for the figures"]
async fn operator_calls_at_a_million_pending_jobs() {
    let db = TempDatabase::migrated().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    // Three priority levels, all due; and 1,000 dead letters.
    sqlx::raw_sql(&format!(
        "SET SESSION max_recursive_iterations = {JOBS};
         INSERT INTO hopper_jobs (queue, state, priority, run_at, max_attempts, payload,
                                  created_at)
         WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {JOBS})
         SELECT 'big', 0, i % 3 - 1, 1000000 + i, 25, 'payload of a job', 1 FROM n;
         INSERT INTO hopper_jobs (queue, state, priority, run_at, max_attempts, payload,
                                  created_at, last_error, finished_at)
         WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
         SELECT 'big', 3, 0, 1000000, 25, 'x', 1, 'boom', 2000000 + i FROM n;
         ANALYZE TABLE hopper_jobs;"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    // Deep cursors, found once by OFFSET here: mid-level, and 50 jobs before a level ends.
    let mut deep = Vec::new();
    for offset in [150_000, 333_283] {
        let (key, sub, id): (i32, i64, i64) = sqlx::query_as(
            "SELECT priority, run_at, id FROM hopper_jobs
             WHERE queue = 'big' AND state = 0 AND priority = 0
             ORDER BY run_at, id LIMIT 1 OFFSET ?",
        )
        .bind(offset)
        .fetch_one(&mut conn)
        .await
        .unwrap();
        deep.push(Cursor {
            key: key.into(),
            sub,
            id: JobId(id),
        });
    }
    let _ = conn.close().await;

    let broker = MySqlBroker::connect_with(&db.url, MySqlOptions::default().wake_poll(None))
        .await
        .unwrap();
    let page = |after: Option<Cursor>, newest_first: bool| {
        let mut query = JobQuery::new("big", ListState::Pending, 100);
        query.after = after;
        query.newest_first = newest_first;
        query
    };
    let report = |what: &str, took: Duration| eprintln!("{what:<44} {took:>10.2?}");

    let q0 = page(None, false);
    let (took, first) = timed(|| broker.list_jobs(&q0)).await;
    let first = first.unwrap();
    assert_eq!(first.jobs.len(), 100);
    assert!(first.jobs.iter().all(|r| r.job.priority == 1));
    report("first page of 100", took);
    let q1 = page(None, true);
    let (took, newest) = timed(|| broker.list_jobs(&q1)).await;
    assert!(newest.unwrap().jobs.iter().all(|r| r.job.priority == -1));
    report("first page of 100, newest first", took);
    let q2 = page(Some(deep[0]), false);
    let (took, mid) = timed(|| broker.list_jobs(&q2)).await;
    let mid = mid.unwrap();
    assert_eq!(mid.jobs.len(), 100);
    assert!(mid.jobs[0].job.id > deep[0].id && mid.jobs[0].job.priority == 0);
    report("a page after 483,334 jobs", took);
    let q3 = page(Some(deep[1]), false);
    let (took, across) = timed(|| broker.list_jobs(&q3)).await;
    let levels: Vec<i32> = across
        .unwrap()
        .jobs
        .iter()
        .map(|r| r.job.priority)
        .collect();
    assert_eq!(
        (levels.len(), levels[0], levels[99]),
        (100, 0, -1),
        "across two levels"
    );
    report("a page across two levels, after 666,617 jobs", took);
    let q4 = page(Some(deep[0]), true);
    let (took, back) = timed(|| broker.list_jobs(&q4)).await;
    assert_eq!(back.unwrap().jobs.len(), 100);
    report("a page before job 483,334, newest first", took);
    let dead = JobQuery::new("big", ListState::Dead, 100);
    let (took, _) = timed(|| broker.list_jobs(&dead)).await;
    report("first page of dead letters", took);

    let (took, names) = timed(|| broker.queues()).await;
    assert_eq!(names.unwrap(), ["big"]);
    report("queues()", took);
    let (took, stats) = timed(|| broker.queue_stats("big")).await;
    let stats = stats.unwrap();
    assert_eq!(
        (stats.counts.pending, stats.counts.dead),
        (JOBS as u64, 1000)
    );
    report("queue_stats(), counting 1,001,000 jobs", took);
    broker.close().await;
}
