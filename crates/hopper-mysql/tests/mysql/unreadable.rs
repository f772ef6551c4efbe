//! A row written by another program that cannot be read as a job: it is dead-lettered at
//! once with the column and the reason, and the claim serves every other job, of its queue
//! and of the other queue fetched with it.

use std::time::Duration;

use hopper_core::job::UNREADABLE_HEADERS;
use hopper_core::{Budget, FetchRequest, NewJob};
use hopper_testkit::helpers::sorted_payloads;
use sqlx::Connection;

use super::support::broker_with;

#[tokio::test]
async fn an_unreadable_row_is_dead_lettered_and_the_rest_served() {
    let (broker, url) = broker_with(|o| o.wake_poll(None)).await;
    let good = (0..3)
        .map(|i| NewJob::json("q", &i).unwrap())
        .chain([NewJob::json("other", &9).unwrap()])
        .collect();
    broker.enqueue(good).await.unwrap();
    // A row ahead of them in fetch order (higher priority) whose headers are a JSON list.
    let mut raw = sqlx::MySqlConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(
        "INSERT INTO hopper_jobs (queue, state, priority, run_at, attempt, max_attempts,
                                  payload, headers, created_at)
         VALUES ('q', 0, 5, 0, 0, 25, '1', '[1, 2]', 0)",
    )
    .execute(&mut raw)
    .await
    .unwrap();

    let budget = |queue: &str| Budget {
        queue: queue.into(),
        limit: 10,
    };
    let fetched = broker
        .fetch(FetchRequest {
            budgets: vec![budget("q"), budget("other")],
            lease_ttl: Duration::from_secs(30),
        })
        .await
        .expect("a claim with an unreadable row in it still succeeds");
    assert_eq!(sorted_payloads(&fetched.jobs), ["0", "1", "2", "9"]);

    let counts = broker.counts("q").await.unwrap();
    assert_eq!((counts.leased, counts.dead, counts.pending), (3, 1, 0));
    let error: String = sqlx::query_scalar("SELECT last_error FROM hopper_jobs WHERE state = 3")
        .fetch_one(&mut raw)
        .await
        .unwrap();
    assert!(
        error.starts_with("the row cannot be read as a job: column headers:"),
        "{error}"
    );
    let _ = raw.close().await;
    // Listed among the dead letters all the same, the headers as they were stored.
    let dead = broker.dead_letters("q", 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].job.headers[UNREADABLE_HEADERS], "[1, 2]");
    // Gone for good: the next claim finds nothing, and does not fail.
    let again = broker
        .fetch(FetchRequest::one("q", 10, Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(again.jobs.is_empty());
}
