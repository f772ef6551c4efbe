//! Error histories as only the table shows them: the reaper's entry for a lease that
//! expired on the final attempt, a long error kept whole as the last error but cut in the
//! history, and a history another program wrote badly.

use std::time::Duration;

use hopper_core::admin::MAX_ERROR_BYTES;
use hopper_core::{Clock, FetchRequest, JobState, NewJob, Outcome, Settlement};
use sqlx::Connection;

use super::support::broker_with;

const TTL: Duration = Duration::from_secs(5);

#[tokio::test(start_paused = true)]
async fn the_reaper_and_long_errors_write_the_history() {
    let clock = Clock::tokio();
    let (broker, _) = broker_with(|o| o.clock(clock).wake_poll(None)).await;
    let id = broker
        .enqueue(vec![NewJob::new("q", "x").max_attempts(2)])
        .await
        .unwrap()[0];
    let held = broker.fetch(FetchRequest::one("q", 1, TTL)).await.unwrap();
    let long = format!("{}the cause", "é".repeat(MAX_ERROR_BYTES));
    let retry = Outcome::Retry {
        delay: Duration::ZERO,
        error: long.clone(),
        step_aside: false,
    };
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
    assert_eq!(rec.last_error.as_deref(), Some(long.as_str()), "kept whole");
    let kept = &rec.errors[0].error;
    assert!(kept.len() <= MAX_ERROR_BYTES && kept.ends_with("the cause"));

    // The second and last attempt's lease expires; the next fetch's reaper buries it.
    let held = broker.fetch(FetchRequest::one("q", 1, TTL)).await.unwrap();
    assert_eq!(held.jobs.len(), 1);
    tokio::time::advance(TTL + Duration::from_secs(1)).await;
    let expired_at = clock.now_millis();
    assert!(
        broker
            .fetch(FetchRequest::one("q", 1, TTL))
            .await
            .unwrap()
            .jobs
            .is_empty()
    );
    let rec = broker.job(id).await.unwrap().unwrap();
    assert_eq!(rec.state, JobState::Dead);
    let attempts: Vec<u32> = rec.errors.iter().map(|e| e.attempt).collect();
    assert_eq!(attempts, [1, 2]);
    assert_eq!(rec.errors[1].error, "lease expired on the final attempt");
    assert_eq!(rec.errors[1].at, expired_at);
    assert_eq!(rec.finished_at, Some(expired_at));
}

#[tokio::test]
async fn a_history_written_badly_elsewhere_leaves_the_job_readable() {
    let (broker, url) = broker_with(|o| o.wake_poll(None)).await;
    let id = broker.enqueue(vec![NewJob::new("q", "x")]).await.unwrap()[0];
    let mut raw = sqlx::MySqlConnection::connect(&url).await.unwrap();
    sqlx::query("UPDATE hopper_jobs SET errors = 'not json' WHERE id = ?")
        .bind(id.0)
        .execute(&mut raw)
        .await
        .unwrap();
    let _ = raw.close().await;
    let rec = broker.job(id).await.unwrap().unwrap();
    let shown: Vec<(u32, &str)> = rec
        .errors
        .iter()
        .map(|e| (e.attempt, e.error.as_str()))
        .collect();
    assert_eq!(shown, [(0, "not json")], "shown as stored, as attempt 0");

    // A settlement starts the history over rather than failing.
    let held = broker.fetch(FetchRequest::one("q", 1, TTL)).await.unwrap();
    let dead = Outcome::DeadLetter {
        error: "broken".into(),
    };
    let settled = broker
        .settle(vec![Settlement {
            job: id,
            lease: held.lease,
            outcome: dead,
        }])
        .await
        .unwrap();
    assert_eq!(settled.applied, 1);
    let rec = broker.job(id).await.unwrap().unwrap();
    let shown: Vec<(u32, &str)> = rec
        .errors
        .iter()
        .map(|e| (e.attempt, e.error.as_str()))
        .collect();
    assert_eq!(shown, [(1, "broken")]);
}
