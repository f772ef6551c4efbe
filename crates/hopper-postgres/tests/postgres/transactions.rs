//! Enqueue inside the caller's transaction; the database clock; retention of completed jobs,
//! and their listing.

use std::time::{Duration, SystemTime};

use hopper_core::{
    CancelOutcome, Error, FetchRequest, JobQuery, JobState, ListState, NewJob, Outcome, Settlement,
    job::to_millis,
};
use sqlx::Connection;

use super::support::{broker_with, url};

#[tokio::test]
async fn a_job_enqueued_in_a_transaction_exists_only_if_it_commits() {
    let (broker, pg) = broker_with(|o| o).await;
    let mut conn = sqlx::PgConnection::connect(&url()).await.unwrap();

    let mut tx = conn.begin().await.unwrap();
    let rolled_back = pg
        .enqueue_in(&mut tx, vec![NewJob::json("q", &1).unwrap()])
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(broker.job(rolled_back[0]).await.unwrap().is_none());
    assert_eq!(broker.counts("q").await.unwrap().pending, 0);

    let mut tx = conn.begin().await.unwrap();
    let committed = pg
        .enqueue_in(
            &mut tx,
            vec![
                NewJob::json("q", &2).unwrap(),
                NewJob::json("q", &3).unwrap(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        broker.counts("q").await.unwrap().pending,
        0,
        "not visible before commit"
    );
    tx.commit().await.unwrap();
    assert_eq!(broker.counts("q").await.unwrap().pending, 2);
    assert!(committed[0] < committed[1]);
    conn.close().await.unwrap();
}

/// A bad job is refused before any statement is sent, so the caller's transaction stays
/// usable and none of the jobs beside it is inserted.
#[tokio::test]
async fn a_bad_job_in_a_transaction_is_refused_before_the_statement() {
    let (broker, pg) = broker_with(|o| o).await;
    let mut conn = sqlx::PgConnection::connect(&url()).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    let err = pg
        .enqueue_in(
            &mut tx,
            vec![
                NewJob::json("q", &1).unwrap(),
                NewJob::json("no spaces", &2).unwrap(),
            ],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Config(c) if c.value == "no spaces"),
        "{err}"
    );
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(one, 1, "the transaction is not aborted");
    tx.commit().await.unwrap();
    assert_eq!(broker.counts("q").await.unwrap().pending, 0);
    conn.close().await.unwrap();
}

#[tokio::test]
async fn times_come_from_the_database_clock() {
    let (broker, _) = broker_with(|o| o).await;
    let ids = broker
        .enqueue(vec![
            NewJob::json("q", &1).unwrap(),
            NewJob::json("q", &2)
                .unwrap()
                .delay(Duration::from_secs(3600)),
        ])
        .await
        .unwrap();
    let now = to_millis(SystemTime::now());
    let rec = broker.job(ids[0]).await.unwrap().unwrap();
    assert!(
        (rec.job.created_at - now).abs() < 5_000,
        "created_at {} vs {now}",
        rec.job.created_at
    );
    let later = broker.job(ids[1]).await.unwrap().unwrap();
    assert_eq!(later.job.run_at - later.job.created_at, 3_600_000);
    let counts = broker.counts("q").await.unwrap();
    assert_eq!((counts.pending, counts.scheduled), (1, 1));
    let f = broker
        .fetch(FetchRequest::one("q", 10, Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(f.jobs.len(), 1);
    assert_eq!(f.next_due, Some(later.job.run_at));
}

#[tokio::test]
async fn completed_jobs_can_be_kept_for_a_retention_period() {
    let (broker, _) = broker_with(|o| o.keep_completed(Duration::from_secs(3600))).await;
    let ids = broker
        .enqueue(vec![NewJob::json("q", &1).unwrap()])
        .await
        .unwrap();
    let f = broker
        .fetch(FetchRequest::one("q", 1, Duration::from_secs(30)))
        .await
        .unwrap();
    let report = broker
        .settle(vec![Settlement {
            job: ids[0],
            lease: f.lease,
            outcome: Outcome::Ack,
        }])
        .await
        .unwrap();
    assert_eq!(report.applied, 1);
    let rec = broker.job(ids[0]).await.unwrap().unwrap();
    assert_eq!(rec.state, JobState::Completed);
    assert_eq!(rec.job.attempt, 1);

    // Kept and cancelled jobs list by the time they ended.
    let more = broker
        .enqueue(vec![
            NewJob::json("q", &2).unwrap(),
            NewJob::json("q", &3).unwrap(),
        ])
        .await
        .unwrap();
    for id in &more {
        assert_eq!(broker.cancel(*id).await.unwrap(), CancelOutcome::Cancelled);
    }
    let listed = |state, newest_first| {
        let mut query = JobQuery::new("q", state, 10);
        query.newest_first = newest_first;
        let broker = broker.clone();
        async move {
            let page = broker.list_jobs(&query).await.unwrap();
            assert!(
                page.jobs.iter().all(|r| r.finished_at.is_some()),
                "{page:?}"
            );
            page.jobs.iter().map(|r| r.job.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(listed(ListState::Completed, false).await, [ids[0]]);
    assert_eq!(listed(ListState::Cancelled, false).await, more);
    let newest: Vec<_> = more.iter().rev().copied().collect();
    assert_eq!(listed(ListState::Cancelled, true).await, newest);
}
