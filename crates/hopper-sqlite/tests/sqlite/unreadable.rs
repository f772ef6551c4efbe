//! Rows written by another program that cannot be read as jobs: each is dead-lettered at
//! once with the column and the reason, and the claim serves every other job, of its queue
//! and of the other queues fetched with it.

use std::time::Duration;

use hopper_core::job::UNREADABLE_HEADERS;
use hopper_core::{Broker, Budget, FetchRequest, NewJob};
use hopper_testkit::helpers::sorted_payloads;

use super::support::{TempDb, open_tokio};

#[tokio::test(start_paused = true)]
async fn unreadable_rows_are_dead_lettered_and_the_rest_served() {
    let db = TempDb::new("unreadable");
    let broker = open_tokio(&db).await;
    let good = (0..3)
        .map(|i| NewJob::json("q", &i).unwrap())
        .chain([NewJob::json("other", &9).unwrap()])
        .collect();
    broker.enqueue(good).await.unwrap();
    // Two rows ahead of them in fetch order (higher priority) whose headers are not an
    // object of strings: the schema's checks cover ranges, not what a text holds.
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    raw.execute_batch(
        "INSERT INTO hopper_jobs (queue, priority, run_at, max_attempts, payload, headers,
                                  created_at)
         VALUES ('q', 5, 0, 25, CAST('1' AS BLOB), '[1, 2]', 0),
                ('q', 5, 0, 25, CAST('2' AS BLOB), '{\"n\": 1}', 0);",
    )
    .unwrap();
    drop(raw);

    let fetched = broker
        .fetch(FetchRequest {
            budgets: vec![budget("q"), budget("other")],
            lease_ttl: Duration::from_secs(30),
        })
        .await
        .expect("a claim with unreadable rows in it still succeeds");
    assert_eq!(sorted_payloads(&fetched.jobs), ["0", "1", "2", "9"]);

    let counts = broker.counts("q").await.unwrap();
    assert_eq!((counts.leased, counts.dead, counts.pending), (3, 2, 0));
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    let errors: Vec<String> = raw
        .prepare("SELECT last_error FROM hopper_jobs WHERE state = 3 ORDER BY id")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(errors.len(), 2);
    for error in &errors {
        assert!(
            error.starts_with("the row cannot be read as a job: column headers:"),
            "{error}"
        );
    }
    // Listed among the dead letters all the same, the headers as they were stored.
    let dead = broker.dead_letters("q", 10).await.unwrap();
    assert_eq!(dead.len(), 2);
    assert_eq!(
        dead.iter()
            .map(|r| r.job.headers.get(UNREADABLE_HEADERS).cloned())
            .collect::<Vec<_>>(),
        [Some("[1, 2]".to_owned()), Some(r#"{"n": 1}"#.to_owned())]
    );
    assert!(dead.iter().all(|r| r.last_error.is_some()));
    // Gone for good: the next claim finds nothing, and does not fail.
    let again = broker
        .fetch(FetchRequest::one("q", 10, Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(again.jobs.is_empty());
}

fn budget(queue: &str) -> Budget {
    Budget {
        queue: queue.into(),
        limit: 10,
    }
}
