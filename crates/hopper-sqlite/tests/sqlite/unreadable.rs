//! Rows written by another program that cannot be read as jobs: each is dead-lettered at
//! once with the column and the reason, and the claim serves every other job, of its queue
//! and of the other queues fetched with it. Error histories such a program wrote read as
//! much as can be read, and never fail a listing or a settlement.

use std::time::Duration;

use hopper_core::job::UNREADABLE_HEADERS;
use hopper_core::{
    Broker, Budget, FetchRequest, JobId, JobQuery, ListState, Millis, NewJob, Outcome, Selection,
    Settlement,
};
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

/// Error histories another program wrote that are not arrays of entries: the records still
/// read, with what can be read of the history, and the next failure appends to an array
/// (starting one afresh where the text was not one) rather than failing the settlement.
#[tokio::test(start_paused = true)]
async fn unreadable_error_histories_read_as_what_can_be_read() {
    let db = TempDb::new("unreadable_history");
    let broker = open_tokio(&db).await;
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    raw.execute_batch(
        r#"INSERT INTO hopper_jobs (id, queue, state, run_at, max_attempts, payload,
                                    created_at, last_error, finished_at, errors)
           VALUES (1, 'q', 3, 0, 5, x'00', 0, 'a', 10, 'not json'),
                  (2, 'q', 3, 0, 5, x'00', 0, 'b', 10, '{"attempt": 1}'),
                  (3, 'q', 3, 0, 5, x'00', 0, 'c', 10,
                   '[{"attempt": "one"}, 7, {"attempt": 2, "at": 5, "error": "kept"}]');"#,
    )
    .unwrap();
    drop(raw);

    let dead = broker
        .list_jobs(&JobQuery::new("q", ListState::Dead, 10))
        .await
        .expect("rows with unreadable histories still list");
    let histories: Vec<Vec<(u32, Millis, String)>> = dead
        .jobs
        .iter()
        .map(|r| {
            r.errors
                .iter()
                .map(|e| (e.attempt, e.at, e.error.clone()))
                .collect()
        })
        .collect();
    assert_eq!(
        histories,
        [vec![], vec![], vec![(2, 5, "kept".to_owned())]],
        "what can be read of each"
    );

    let all = Selection::Queue {
        queue: "q".into(),
        at_most: 10,
    };
    assert_eq!(broker.retry_dead(&all).await.unwrap(), 3);
    let fetched = broker
        .fetch(FetchRequest::one("q", 10, Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(fetched.jobs.len(), 3);
    let failed = fetched
        .jobs
        .iter()
        .map(|j| Settlement {
            job: j.id,
            lease: fetched.lease,
            outcome: Outcome::DeadLetter {
                error: "again".into(),
            },
        })
        .collect();
    let report = broker.settle(failed).await.unwrap();
    assert_eq!(report.applied, 3, "{report:?}");
    let mut lengths = Vec::new();
    for id in 1..=3 {
        let rec = broker.job(JobId(id)).await.unwrap().unwrap();
        let last = rec.errors.last().expect("the new failure is kept");
        assert_eq!((last.attempt, last.error.as_str()), (1, "again"));
        lengths.push(rec.errors.len());
    }
    assert_eq!(
        lengths,
        [1, 1, 2],
        "appended to the array, or started afresh"
    );
}
