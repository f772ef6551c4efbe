//! Rows whose stored headers are not an object of strings (written by another program): a
//! pending one is dead-lettered by the claim that meets it, and a dead one is listed with
//! the others, its headers shown as they were stored, instead of failing the whole list.
//! An error history another program wrote is shown as stored too.

use std::time::Duration;

use hopper_core::job::UNREADABLE_HEADERS;
use hopper_core::{FetchRequest, JobQuery, ListState, Millis, NewJob, Outcome, Settlement};
use hopper_testkit::helpers::sorted_payloads;
use sqlx::Connection;

use super::support::{broker_with, url};

#[tokio::test]
async fn a_dead_letter_with_unreadable_headers_is_listed_with_the_rest() {
    let (broker, pg) = broker_with(|o| o.listen(false)).await;
    let mut raw = sqlx::PgConnection::connect(&url()).await.unwrap();
    let insert = format!(
        "INSERT INTO {}.hopper_jobs (queue, state, run_at, attempt, max_attempts, payload,
                                     headers, created_at, last_error, finished_at)
         VALUES ('q', 3, 0, 1, 1, '\\x31', '{{\"n\": 1}}', 0, 'first', 1),
                ('q', 3, 0, 1, 1, '\\x32', '{{\"n\": \"2\"}}', 0, 'second', 2)",
        pg.schema()
    );
    sqlx::raw_sql(&insert).execute(&mut raw).await.unwrap();
    let _ = raw.close().await;

    let dead = broker.dead_letters("q", 10).await.unwrap();
    let mut shown: Vec<(Option<String>, Option<String>, Option<String>)> = dead
        .iter()
        .map(|r| {
            (
                r.last_error.clone(),
                r.job.headers.get(UNREADABLE_HEADERS).cloned(),
                r.job.headers.get("n").cloned(),
            )
        })
        .collect();
    shown.sort();
    assert_eq!(
        shown,
        [
            (Some("first".into()), Some("{\"n\": 1}".into()), None),
            (Some("second".into()), None, Some("2".into())),
        ]
    );
}

/// A pending row whose headers cannot be read is dead-lettered by the claim that meets it,
/// with the column and the reason, and the claim serves the rest.
#[tokio::test]
async fn an_unreadable_pending_row_is_dead_lettered_and_the_rest_served() {
    let (broker, pg) = broker_with(|o| o.listen(false)).await;
    let good = (0..3).map(|i| NewJob::json("q", &i).unwrap()).collect();
    broker.enqueue(good).await.unwrap();
    let mut raw = sqlx::PgConnection::connect(&url()).await.unwrap();
    let insert = format!(
        "INSERT INTO {}.hopper_jobs (queue, priority, run_at, max_attempts, payload, headers,
                                     created_at)
         VALUES ('q', 5, 0, 25, '\\x31', '{{\"n\": 1}}', 0)",
        pg.schema()
    );
    sqlx::raw_sql(&insert).execute(&mut raw).await.unwrap();
    let _ = raw.close().await;

    let fetched = broker
        .fetch(FetchRequest::one("q", 10, Duration::from_secs(30)))
        .await
        .expect("a claim with an unreadable row in it still succeeds");
    assert_eq!(sorted_payloads(&fetched.jobs), ["0", "1", "2"]);
    let counts = broker.counts("q").await.unwrap();
    assert_eq!((counts.leased, counts.dead, counts.pending), (3, 1, 0));
    let dead = broker.dead_letters("q", 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    let error = dead[0].last_error.clone().unwrap_or_default();
    assert!(
        error.starts_with("the row cannot be read as a job: column headers:"),
        "{error}"
    );
    assert_eq!(dead[0].job.headers[UNREADABLE_HEADERS], "{\"n\": 1}");
}

/// An error history that is not what Hopper writes (another program wrote it) is shown as
/// stored, entry by entry, among the rest of the record; the next failure of a job whose
/// history is not a list starts it over.
#[tokio::test]
async fn an_unreadable_error_history_is_shown_as_stored() {
    let (broker, pg) = broker_with(|o| o.listen(false)).await;
    let mut raw = sqlx::PgConnection::connect(&url()).await.unwrap();
    let insert = format!(
        "INSERT INTO {}.hopper_jobs (queue, state, run_at, attempt, max_attempts, payload,
                                     created_at, last_error, finished_at, errors)
         VALUES ('q', 3, 0, 1, 1, '\\x31', 0, 'first', 1, '{{\"not\": \"a list\"}}'),
                ('q', 3, 0, 2, 2, '\\x32', 0, 'second', 2,
                 '[{{\"attempt\": 1, \"at\": 5, \"error\": \"fine\"}}, {{\"attempt\": \"two\"}}]'),
                ('r', 0, 0, 0, 5, '\\x33', 0, NULL, NULL, '\"text\"')",
        pg.schema()
    );
    sqlx::raw_sql(&insert).execute(&mut raw).await.unwrap();
    let _ = raw.close().await;

    let dead = broker
        .list_jobs(&JobQuery::new("q", ListState::Dead, 10))
        .await
        .unwrap();
    let shown: Vec<Vec<(u32, Millis, String)>> = dead
        .jobs
        .iter()
        .map(|r| {
            r.errors
                .iter()
                .map(|e| (e.attempt, e.at, e.error.clone()))
                .collect()
        })
        .collect();
    let unreadable = "the error history cannot be read: ";
    assert_eq!(
        shown,
        [
            vec![(0, 0, format!("{unreadable}{{\"not\": \"a list\"}}"))],
            vec![
                (1, 5, "fine".to_owned()),
                (0, 0, format!("{unreadable}{{\"attempt\":\"two\"}}"))
            ],
        ]
    );

    let held = broker
        .fetch(FetchRequest::one("r", 1, Duration::from_secs(30)))
        .await
        .unwrap();
    let retry = Outcome::Retry {
        delay: Duration::ZERO,
        error: "again".into(),
        step_aside: false,
    };
    let id = held.jobs[0].id;
    let settled = broker
        .settle(vec![Settlement {
            job: id,
            lease: held.lease,
            outcome: retry,
        }])
        .await
        .unwrap();
    assert_eq!(settled.applied, 1);
    let rec = broker.job(id).await.unwrap().unwrap();
    let history: Vec<(u32, &str)> = rec
        .errors
        .iter()
        .map(|e| (e.attempt, e.error.as_str()))
        .collect();
    assert_eq!(history, [(1, "again")]);
}
