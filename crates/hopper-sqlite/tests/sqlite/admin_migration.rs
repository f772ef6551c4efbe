//! A file from before the operator calls (schema version 3) keeps its jobs in every
//! state: listed, re-driven and paused like new ones, their histories starting at the
//! next failure.

use std::time::Duration;

use hopper_core::{
    Broker, FetchRequest, JobId, JobPage, JobQuery, JobState, ListState, Outcome, Selection,
    Settlement,
};
use hopper_sqlite::SqliteBroker;

use super::support::{TempDb, file_at_version, file_version};

fn ids(page: &JobPage) -> Vec<i64> {
    page.jobs.iter().map(|r| r.job.id.0).collect()
}

async fn list(broker: &SqliteBroker, state: ListState, limit: usize) -> JobPage {
    broker
        .list_jobs(&JobQuery::new("q", state, limit))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_file_from_before_the_operator_calls_keeps_its_jobs_in_every_state() {
    let db = TempDb::new("admin_migrate");
    let raw = file_at_version(&db, 3);
    // Pending (one delayed far ahead), leased under a lease that long expired, dead twice
    // over with one finish time, and cancelled; in two queues.
    raw.execute_batch(
        "INSERT INTO hopper_jobs (id, queue, state, priority, run_at, attempt, max_attempts,
                                  payload, created_at, lease_id, lease_expires, last_error,
                                  finished_at)
         VALUES (1, 'q', 0, 0, 1000, 0, 5, CAST('due' AS BLOB), 1000, NULL, NULL, NULL, NULL),
                (2, 'q', 0, 0, 253402300799999, 0, 5, CAST('later' AS BLOB), 1000, NULL,
                 NULL, NULL, NULL),
                (3, 'q', 1, 0, 1000, 1, 5, CAST('held' AS BLOB), 1000, 77, 2000, NULL, NULL),
                (4, 'q', 3, 0, 1000, 5, 5, CAST('dead' AS BLOB), 1000, NULL, NULL, 'boom',
                 3000),
                (5, 'q', 3, 0, 1000, 5, 5, CAST('dead' AS BLOB), 1000, NULL, NULL, 'bang',
                 3000),
                (6, 'q', 4, 0, 1000, 0, 5, CAST('cancelled' AS BLOB), 1000, NULL, NULL, NULL,
                 2500),
                (7, 'r', 3, 0, 1000, 1, 1, CAST('dead' AS BLOB), 1000, NULL, NULL, 'gone',
                 3000);",
    )
    .unwrap();
    drop(raw);

    let broker = SqliteBroker::open(db.path()).await.unwrap();
    assert_eq!(ids(&list(&broker, ListState::Pending, 10).await), [1]);
    assert_eq!(ids(&list(&broker, ListState::Scheduled, 10).await), [2]);
    assert_eq!(ids(&list(&broker, ListState::Leased, 10).await), [3]);
    assert_eq!(ids(&list(&broker, ListState::Cancelled, 10).await), [6]);
    let dead = list(&broker, ListState::Dead, 1).await;
    assert_eq!(ids(&dead), [4], "the dead, a page of one");
    let rec = &dead.jobs[0];
    assert_eq!(
        (rec.last_error.as_deref(), rec.finished_at, rec.errors.len()),
        (Some("boom"), Some(3000), 0),
        "the last error kept, no history yet"
    );
    let mut rest = JobQuery::new("q", ListState::Dead, 1);
    rest.after = dead.next;
    assert_eq!(ids(&broker.list_jobs(&rest).await.unwrap()), [5]);
    assert_eq!(broker.dead_letters("q", 10).await.unwrap().len(), 2);
    assert_eq!(broker.queues().await.unwrap(), ["q", "r"]);
    let stats = broker.queue_stats("q").await.unwrap();
    assert_eq!(
        (
            stats.counts.pending,
            stats.counts.scheduled,
            stats.counts.leased
        ),
        (1, 1, 1)
    );
    assert_eq!(stats.counts.dead, 2);

    // The old dead letter goes back as new; its history starts at its next failure.
    let which = Selection::Jobs(vec![JobId(4)]);
    assert_eq!(broker.retry_dead(&which).await.unwrap(), 1);
    assert!(broker.set_paused("q", true).await.unwrap());
    let ttl = Duration::from_secs(30);
    let paused = broker.fetch(FetchRequest::one("q", 10, ttl)).await.unwrap();
    assert!(paused.jobs.is_empty(), "fetched from a paused queue");
    assert!(broker.set_paused("q", false).await.unwrap());
    // The expired lease of job 3 is taken back by this fetch too.
    let got = broker.fetch(FetchRequest::one("q", 10, ttl)).await.unwrap();
    let mut got_ids: Vec<i64> = got.jobs.iter().map(|j| j.id.0).collect();
    got_ids.sort();
    assert_eq!(got_ids, [1, 3, 4]);
    let retried = got.jobs.iter().find(|j| j.id == JobId(4)).unwrap();
    assert_eq!(retried.attempt, 1, "as a first attempt");
    let failed = Settlement {
        job: JobId(4),
        lease: got.lease,
        outcome: Outcome::Retry {
            delay: Duration::from_secs(60),
            error: "again".into(),
            step_aside: false,
        },
    };
    broker.settle(vec![failed]).await.unwrap();
    let rec = broker.job(JobId(4)).await.unwrap().unwrap();
    assert_eq!(rec.state, JobState::Pending);
    let history: Vec<(u32, &str)> = rec
        .errors
        .iter()
        .map(|e| (e.attempt, e.error.as_str()))
        .collect();
    assert_eq!(history, [(1, "again")]);
    assert_eq!(rec.last_error.as_deref(), Some("again"));
    drop(broker);

    assert_eq!(file_version(&db), 12);
}
