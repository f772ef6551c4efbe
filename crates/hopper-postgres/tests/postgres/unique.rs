//! Unique keys on PostgreSQL, beyond the shared suite: the plain path never touches the
//! table of keys, keys taken inside the caller's transaction, pruning of keys whose hold
//! ended, and the plans of the statements that read that table.

use std::time::Duration;

use hopper_core::{Broker, FetchRequest, NewJob, UniqueScope};
use hopper_postgres::{PgBroker, PgOptions};
use sqlx::{Connection, PgConnection};

use super::plans::{explain, filled, most_removed, rendered};
use super::support::{broker_with, url};

const TTL: Duration = Duration::from_secs(60);

fn keyed(queue: &str, key: &str, scope: UniqueScope) -> NewJob {
    NewJob::new(queue, key.as_bytes().to_vec()).unique(key, scope)
}

/// The keys of `schema`, as `queue/key`, in order.
async fn keys(conn: &mut PgConnection, schema: &str) -> Vec<String> {
    sqlx::query_scalar(&format!(
        "SELECT queue || '/' || key FROM {schema}.hopper_unique ORDER BY queue, key"
    ))
    .fetch_all(conn)
    .await
    .unwrap()
}

/// With the table of keys locked by another transaction, an enqueue of plain jobs goes
/// through: neither it nor its plan reads the table. A job with a key waits for the lock,
/// which shows the lock would have caught a plain enqueue that touched the table.
#[tokio::test]
async fn plain_enqueues_never_touch_the_table_of_keys() {
    let (broker, pg) = broker_with(|o| o.listen(false)).await;
    // A key taken before the lock: the keyed statement is prepared and works.
    let first = broker
        .enqueue_reported(vec![keyed("q", "before", UniqueScope::Unfinished)])
        .await
        .unwrap();
    assert!(!first[0].existing);

    let mut locker = PgConnection::connect(&url()).await.unwrap();
    let mut lock = locker.begin().await.unwrap();
    let sql = format!(
        "LOCK TABLE {}.hopper_unique IN ACCESS EXCLUSIVE MODE",
        pg.schema()
    );
    sqlx::raw_sql(&sql).execute(&mut *lock).await.unwrap();

    let plain = (0..3).map(|i| NewJob::json("q", &i).unwrap()).collect();
    let stored = tokio::time::timeout(Duration::from_secs(10), broker.enqueue(plain))
        .await
        .expect("a plain enqueue waited on the locked table of keys")
        .unwrap();
    assert_eq!(stored.len(), 3);

    let waiting = tokio::spawn({
        let broker = broker.clone();
        async move {
            let job = keyed("q", "during", UniqueScope::Unfinished);
            broker.enqueue_reported(vec![job]).await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "a keyed enqueue went through the locked table of keys"
    );
    lock.commit().await.unwrap();
    let during = waiting.await.unwrap().unwrap();
    assert!(!during[0].existing);
    assert_eq!(broker.counts("q").await.unwrap().pending, 5);
    assert_eq!(
        keys(&mut locker, pg.schema()).await,
        ["q/before", "q/during"]
    );
    locker.close().await.unwrap();
}

/// Keys taken inside the caller's transaction are taken only if it commits, and until it
/// ends, another producer of the same key waits for it and then finds it held.
#[tokio::test]
async fn keys_taken_in_a_transaction_hold_only_once_it_commits() {
    let (broker, pg) = broker_with(|o| o.listen(false)).await;
    let mut conn = PgConnection::connect(&url()).await.unwrap();
    let job = || keyed("q", "k", UniqueScope::Unfinished);

    let mut tx = conn.begin().await.unwrap();
    let rolled_back = pg.enqueue_in_reported(&mut tx, vec![job(), job()]).await;
    let rolled_back = rolled_back.unwrap();
    assert!(!rolled_back[0].existing && rolled_back[1].existing);
    assert_eq!(rolled_back[1].id, rolled_back[0].id);
    tx.rollback().await.unwrap();
    assert!(keys(&mut conn, pg.schema()).await.is_empty());

    let mut tx = conn.begin().await.unwrap();
    let ids = pg.enqueue_in(&mut tx, vec![job()]).await.unwrap();
    assert_ne!(
        ids,
        [rolled_back[0].id],
        "the rolled back job's id is not reused"
    );
    let racing = tokio::spawn({
        let broker = broker.clone();
        async move { broker.enqueue_reported(vec![job()]).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!racing.is_finished(), "the key is locked until the commit");
    tx.commit().await.unwrap();
    let racing = racing.await.unwrap().unwrap();
    assert_eq!(racing, [hopper_core::Enqueued::existing(ids[0])]);
    assert_eq!(broker.counts("q").await.unwrap().pending, 1);
    conn.close().await.unwrap();
}

/// A fetch starts a round of pruning in the background (at once for a new broker, then
/// once a minute): it deletes every key whose hold ended, 2,500 of them over three chunks,
/// and keeps those that still hold.
#[tokio::test]
async fn keys_whose_hold_ended_are_pruned_in_the_background() {
    let (broker, pg) = broker_with(|o| o.listen(false)).await;
    let unfinished = UniqueScope::Unfinished;
    for chunk in 0..5 {
        let jobs = (0..500)
            .map(|i| keyed("gone", &format!("k{:05}", chunk * 500 + i), unfinished))
            .collect();
        broker.enqueue(jobs).await.unwrap();
    }
    assert_eq!(broker.purge("gone").await.unwrap(), 2_500);
    let hour = UniqueScope::For(Duration::from_secs(3600));
    let brief = UniqueScope::For(Duration::from_millis(1));
    let ids = broker
        .enqueue(vec![
            keyed("q", "acked", unfinished),
            keyed("q", "taken", UniqueScope::Queued),
            keyed("q", "hour", hour),
            keyed("q", "brief", brief),
            keyed("q", "waiting", unfinished),
            keyed("q", "leased", unfinished),
        ])
        .await
        .unwrap();
    // As fetches and settlements would leave them, without a fetch of this broker (which
    // would start its own pruning): acked and hour completed and gone, taken, brief and
    // leased leased, waiting back to pending uncharged.
    let mut conn = PgConnection::connect(&url()).await.unwrap();
    let schema = pg.schema();
    sqlx::raw_sql(&format!(
        "DELETE FROM {schema}.hopper_jobs WHERE id IN ({}, {});
         UPDATE {schema}.hopper_jobs
         SET state = 1, attempt = 1, lease_id = 7, lease_expires = 9e15
         WHERE id IN ({}, {}, {})",
        ids[0], ids[2], ids[1], ids[3], ids[5]
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(keys(&mut conn, schema).await.len(), 2_506);

    // A new broker prunes at its first fetch.
    let options = PgOptions::default().schema(pg.schema()).listen(false);
    let pruner = PgBroker::connect_with(&url(), options).await.unwrap();
    pruner
        .fetch(FetchRequest::one("idle", 1, TTL))
        .await
        .unwrap();
    let wanted = ["q/hour", "q/leased", "q/waiting"];
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let left = keys(&mut conn, pg.schema()).await;
        if left == wanted {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} keys left: {:?}",
            left.len(),
            &left[..left.len().min(10)]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pruner.close().await;
    conn.close().await.unwrap();
}

/// The keyed enqueue finds keys by the table's primary key, and pruning reads one chunk
/// of keys by range, however many keys there are: no statement scans a table.
#[tokio::test]
async fn keyed_statements_read_keys_by_the_primary_key() {
    // 20,000 pending jobs, each holding a key of its own.
    let (schema, _cleanup, mut conn) = filled(&[("0", "0", 20_000)]).await;
    sqlx::raw_sql(&format!(
        "INSERT INTO {schema}.hopper_unique (queue, key, job_id, scope)
         SELECT 'q', 'k' || lpad(id::text, 5, '0'), id, 1 FROM {schema}.hopper_jobs;
         ANALYZE {schema}.hopper_unique"
    ))
    .execute(&mut conn)
    .await
    .unwrap();

    let enqueue = rendered(include_str!("../../sql/enqueue_unique.sql"), &schema);
    let args = "'{q,q,q}', ARRAY['\\x00'::bytea, '\\x00', '\\x00'], '{0,0,0}', \
                '{NULL,NULL,NULL}', '{0,0,0}', '{25,25,25}', '{NULL,NULL,NULL}', NULL, \
                'hopper.test', '{k00005,new,NULL}', '{1,1,NULL}', '{NULL,NULL,NULL}', NULL";
    let plan = explain(&mut conn, "enqueue_unique", &enqueue, args).await;
    assert!(
        !plan.contains("Seq Scan"),
        "a keyed enqueue scanned:\n{plan}"
    );
    assert!(
        plan.contains("Conflict Arbiter Indexes: hopper_unique_pkey"),
        "{plan}"
    );
    let stored: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {schema}.hopper_jobs WHERE id > 20000"
    ))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(stored, 2, "the job with a new key and the plain one");

    // Every key holds: a chunk examines 1,000 keys after its cursor and deletes none.
    let prune = rendered(include_str!("../../sql/prune_unique.sql"), &schema);
    let plan = explain(&mut conn, "prune", &prune, "NULL, 'q', 'k10000', 1000").await;
    assert!(!plan.contains("Seq Scan"), "pruning scanned:\n{plan}");
    assert!(
        plan.contains("Index Cond: (ROW(queue, key) > ROW($2, $3))"),
        "pruning did not read its chunk by range:\n{plan}"
    );
    assert!(most_removed(&plan) <= 1000, "{plan}");
    let walked: (i64, i64, String, String) =
        sqlx::query_as("EXECUTE prune(NULL, 'q', 'k10000', 1000)")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(walked, (1000, 0, "q".to_owned(), "k11000".to_owned()));
    conn.close().await.unwrap();
}
