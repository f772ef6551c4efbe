//! A dead letter whose stored headers are not an object of strings (written by another
//! program) is listed with the others, its headers shown as they were stored, instead of
//! failing the whole list.

use hopper_core::job::UNREADABLE_HEADERS;
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
