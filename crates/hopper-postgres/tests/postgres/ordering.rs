//! Ordering keys on PostgreSQL, beyond the shared suite: the migration that brings them,
//! the check on stored times, and the sweep that frees a key whose unblock was lost.

use std::time::Duration;

use hopper_core::job::BLOCKED;
use hopper_core::{Broker, FetchRequest, JobId, NewJob, Outcome, Settlement};
use hopper_postgres::{PgBroker, PgOptions};
use sqlx::{Connection, PgConnection};

use super::support::{broker_with, drop_schema, schema_at, url};

const TTL: Duration = Duration::from_secs(60);

fn keyed(key: &str, name: &str) -> NewJob {
    NewJob::new("q", name.as_bytes().to_vec()).ordering_key(key)
}

/// A schema at version 9, as the release before ordering keys left it, with a job stored
/// then: `migrate` adds the column and its indexes, the old job runs as before, and keyed
/// jobs enqueued after run one at a time. The widened check on `run_at` still refuses a
/// time past the year 9999 on a job without a key.
#[tokio::test]
async fn a_schema_from_before_ordering_keys_keeps_its_jobs_and_orders_new_ones() {
    let options = schema_at(9).await;
    let name = options.schema.clone();
    let mut raw = PgConnection::connect(&url()).await.unwrap();
    let old = super::support::insert_old_job(&mut raw, &name).await;
    let applied = hopper_postgres::migrate_with(&url(), &options)
        .await
        .unwrap();
    assert_eq!(
        applied, 8,
        "ordering keys, rate limits, groups, unblocked heads, rate keys, beside lines, sets, step aside"
    );
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes
         WHERE schemaname = $1 AND indexname LIKE 'hopper_jobs_ordering%' ORDER BY 1",
    )
    .bind(&name)
    .fetch_all(&mut raw)
    .await
    .unwrap();
    assert_eq!(
        indexes,
        ["hopper_jobs_ordering", "hopper_jobs_ordering_heads"]
    );
    let insert = |key: &str| {
        format!(
            "INSERT INTO {name}.hopper_jobs (queue, run_at, max_attempts, payload, created_at,
                                             ordering_key)
             VALUES ('q', {}, 1, 'x', 0, {key})",
            BLOCKED + 5
        )
    };
    let refused = sqlx::raw_sql(&insert("NULL")).execute(&mut raw).await;
    let message = refused.unwrap_err().to_string();
    assert!(message.contains("hopper_jobs_run_at"), "{message}");

    let broker = PgBroker::connect_with(&url(), options.listen(false))
        .await
        .unwrap();
    let ids = broker
        .enqueue(vec![keyed("k", "k1"), keyed("k", "k2")])
        .await
        .unwrap();
    let held = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    let got: Vec<JobId> = held.jobs.iter().map(|j| j.id).collect();
    assert_eq!(
        got,
        vec![JobId(old), ids[0]],
        "the old job and the key's first"
    );
    let rec = broker.job(ids[1]).await.unwrap().unwrap();
    assert_eq!(
        (rec.ordering_key.as_deref(), rec.blocked),
        (Some("k"), true)
    );
    broker.close().await;
    raw.close().await.unwrap();
    drop_schema(name);
}

/// A reap, cancel or re-drive whose process died before it unblocked the key's next job
/// (the ended job's row is gone, the next one still blocked): the next broker's background
/// sweep frees that job and wakes a fetch for it.
#[tokio::test]
async fn a_key_left_blocked_by_a_lost_unblock_is_swept() {
    let (broker, pg) = broker_with(|o| o.listen(false)).await;
    let ids = broker
        .enqueue(vec![keyed("k", "k1"), keyed("k", "k2")])
        .await
        .unwrap();
    let held = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    assert_eq!(held.jobs.len(), 1);
    // The job's end alone, without the unblock after it.
    let schema = pg.schema().to_owned();
    let mut raw = PgConnection::connect(&url()).await.unwrap();
    sqlx::query(&format!("DELETE FROM {schema}.hopper_jobs WHERE id = $1"))
        .bind(ids[0].0)
        .execute(&mut raw)
        .await
        .unwrap();
    raw.close().await.unwrap();
    let stuck = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    assert!(
        stuck.jobs.is_empty(),
        "k2 is blocked with nothing to free it"
    );
    // Another process's broker sweeps at its first fetch, in the background.
    let options = PgOptions::default().schema(schema).listen(false);
    let other = PgBroker::connect_with(&url(), options).await.unwrap();
    let mut freed = Vec::new();
    for _ in 0..200 {
        let got = other.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
        if !got.jobs.is_empty() {
            freed = got.jobs.iter().map(|j| j.id).collect();
            let acks = vec![Settlement {
                job: freed[0],
                lease: got.lease,
                outcome: Outcome::Ack,
            }];
            other.settle(acks).await.unwrap();
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(freed, vec![ids[1]], "k2 freed by the sweep");
    other.close().await;
}

/// A keyed job that is its key's only unfinished one goes in unblocked, in the one write of
/// its insert: the rows' ctids are those of a fresh table's first inserts, which an update
/// (the unblock of a job stored blocked) would have moved. A batch's later job of a key, and
/// a job of a key with a job already waiting, go in blocked; a key left with blocked jobs
/// only gets its first freed by the enqueue.
#[tokio::test]
async fn a_keys_first_job_is_stored_unblocked_in_one_write() {
    let (broker, pg) = broker_with(|o| o.listen(false)).await;
    let schema = pg.schema().to_owned();
    let ids = broker
        .enqueue(vec![keyed("a", "a1"), keyed("b", "b1"), keyed("a", "a2")])
        .await
        .unwrap();
    let mut raw = PgConnection::connect(&url()).await.unwrap();
    let rows: Vec<(String, bool)> = sqlx::query_as(&format!(
        "SELECT ctid::text, run_at > 253402300799999 FROM {schema}.hopper_jobs ORDER BY id"
    ))
    .fetch_all(&mut raw)
    .await
    .unwrap();
    let expected = [("(0,1)", false), ("(0,2)", false), ("(0,3)", true)];
    let expected: Vec<(String, bool)> = expected.map(|(c, b)| (c.to_owned(), b)).into();
    assert_eq!(rows, expected, "a1 and b1 heads as inserted, a2 blocked");

    // A key left with a blocked job only (as a lost unblock leaves it): the next enqueue of
    // the key stores its job blocked and frees the key's first.
    let stuck: i64 = sqlx::query_scalar(&format!(
        "INSERT INTO {schema}.hopper_jobs (queue, run_at, max_attempts, payload, created_at,
                                            ordering_key)
         VALUES ('q', {}, 1, 'c1', 0, 'c') RETURNING id",
        BLOCKED
    ))
    .fetch_one(&mut raw)
    .await
    .unwrap();
    let c2 = broker.enqueue(vec![keyed("c", "c2")]).await.unwrap()[0];
    let c1 = broker.job(JobId(stuck)).await.unwrap().unwrap();
    let c2 = broker.job(c2).await.unwrap().unwrap();
    assert_eq!((c1.blocked, c2.blocked), (false, true));
    let held = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    let mut got: Vec<JobId> = held.jobs.iter().map(|j| j.id).collect();
    got.sort();
    assert_eq!(got, vec![ids[0], ids[1], JobId(stuck)], "one head per key");
    raw.close().await.unwrap();
}
