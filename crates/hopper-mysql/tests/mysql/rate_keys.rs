//! Rate limits per key on MySQL/MariaDB, beyond the shared suite: brokers on two pools race
//! on one queue's key windows and claim no more than each key's limit between them; a claim
//! moves at most 4,096 jobs and says the queue is
//! due again at once; rate keys go beside the other keys and groups; a limit changed to
//! one for the whole queue forgets the key windows, and idle windows are dropped; and a
//! database of the previous version gains the tables and the column.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, JobId, NewJob, RateLimit};
use hopper_mysql::{MySqlBroker, MySqlOptions};
use hopper_testkit::helpers::{TTL, fetch, race_on_rate_keys, rate_keyed as job};
use sqlx::{Connection, MySqlConnection};

use super::migrations::database_at;
use super::support::{TempDatabase, broker_with};

const HOUR: Duration = Duration::from_secs(3600);

fn per_key(max: u32, per: Duration) -> RateLimit {
    RateLimit::new(max, per).expect("a valid limit").per_key()
}

/// Another process: a broker with connections of its own on the same database.
async fn other(url: &str) -> Arc<dyn Broker> {
    let options = MySqlOptions::default().wake_poll(None);
    Arc::new(MySqlBroker::connect_with(url, options).await.unwrap())
}

/// The stored key windows of `queue`: each key and its number of starts.
async fn stored_keys(conn: &mut MySqlConnection, queue: &str) -> Vec<(String, u32)> {
    let rows: Vec<(Vec<u8>, Vec<u8>)> =
        sqlx::query_as("SELECT rate_key, starts FROM hopper_rate_keys WHERE queue = ?")
            .bind(queue)
            .fetch_all(conn)
            .await
            .unwrap();
    let mut keys: Vec<(String, u32)> = rows
        .into_iter()
        .map(|(key, starts)| {
            let n = starts
                .chunks_exact(12)
                .map(|p| u32::from_le_bytes(p[8..].try_into().unwrap()))
                .sum();
            (String::from_utf8(key).unwrap(), n)
        })
        .collect();
    keys.sort();
    keys
}

/// Two brokers, each with its own pool, race 8 claimers in batches of 7 on a queue of 3
/// keys with 40 jobs each and 20 without, limited to 5 an hour per key: 20 are claimed
/// between them, 5 of each key and 5 without, and the other 120 are moved to their keys'
/// next room, an hour on. The stored windows hold those 5 starts each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn brokers_on_two_pools_claim_no_more_than_each_keys_limit() {
    let (broker, url) = broker_with(|o| o.wake_poll(None)).await;
    let second = other(&url).await;
    let limit = per_key(5, HOUR);
    second.set_rate_limit("q", Some(limit)).await.unwrap();
    race_on_rate_keys(&[broker.clone(), second.clone()]).await;
    let mut conn = MySqlConnection::connect(&url).await.unwrap();
    let windows = stored_keys(&mut conn, "q").await;
    let expected = [("", 5), ("a", 5), ("b", 5), ("c", 5)].map(|(k, n)| (k.to_owned(), n));
    assert_eq!(windows, expected);
    let shown = broker.queue_stats("q").await.unwrap().rate_limit;
    assert_eq!(shown, Some(limit), "set through the other");
    let _ = conn.close().await;
}

/// A claim moves at most 4,096 jobs: behind 4,200 jobs of key `a`, limited to 1 an hour per
/// key, the first fetch takes `a`'s first job, moves 4,096 and says the queue is due again
/// at once; the second moves the rest of `a`'s and takes the job of `b`.
#[tokio::test]
async fn a_claim_moves_at_most_4096_jobs_and_is_due_again_at_once() {
    let (broker, _url) = broker_with(|o| o.wake_poll(None)).await;
    broker
        .set_rate_limit("q", Some(per_key(1, HOUR)))
        .await
        .unwrap();
    let mut jobs: Vec<NewJob> = (0..4200).map(|i| job(&format!("a{i}"), "a")).collect();
    jobs.push(job("b", "b"));
    let ids = broker.enqueue(jobs).await.unwrap();
    let first = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(first.jobs.len(), 1);
    assert_eq!(first.jobs[0].id, ids[0]);
    let start = broker.job(ids[0]).await.unwrap().unwrap().started_at;
    assert_eq!(first.next_due, start, "due again at the claim's own time");
    let counts = broker.counts("q").await.unwrap();
    assert_eq!((counts.pending, counts.scheduled), (104, 4096));
    let second = fetch(&broker, "q", 10, TTL).await;
    let got: Vec<JobId> = second.jobs.iter().map(|j| j.id).collect();
    assert_eq!(got, [ids[4200]]);
    let counts = broker.counts("q").await.unwrap();
    assert_eq!((counts.pending, counts.scheduled), (0, 4199));
}

/// Rate keys go beside a unique key, an ordering key and a group: each job keeps every key, and the three of key `t`, under 1 an hour per key, start one at a time.
#[tokio::test]
async fn rate_keys_go_beside_the_other_keys_and_groups() {
    let (broker, url) = broker_with(|o| o.wake_poll(None)).await;
    broker
        .set_rate_limit("q", Some(per_key(1, HOUR)))
        .await
        .unwrap();
    // A batch may not mix unique and ordering keys: the unique job goes alone.
    let mut ids = broker
        .enqueue(vec![job("u", "t").unique_key("u1")])
        .await
        .unwrap();
    let jobs = vec![
        job("o", "t").ordering_key("o1"),
        job("g", "t").group("g1"),
        job("plain", ""),
    ];
    ids.extend(broker.enqueue(jobs).await.unwrap());
    let mut conn = MySqlConnection::connect(&url).await.unwrap();
    let stored: Vec<(i64, Option<Vec<u8>>)> =
        sqlx::query_as("SELECT id, rate_key FROM hopper_jobs ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    let keys: Vec<Option<&[u8]>> = stored.iter().map(|(_, k)| k.as_deref()).collect();
    assert_eq!(keys, [Some(&b"t"[..]), Some(b"t"), Some(b"t"), None]);
    let got = fetch(&broker, "q", 10, TTL).await;
    let mut taken: Vec<JobId> = got.jobs.iter().map(|j| j.id).collect();
    taken.sort();
    assert_eq!(
        taken,
        [ids[0], ids[3]],
        "one of key t, and the job without a key"
    );
    let dup = broker.enqueue(vec![job("u", "t").unique_key("u1")]).await;
    assert_eq!(dup.unwrap()[0], ids[0], "the unique key still holds");
    let _ = conn.close().await;
}

/// Changing a limit per key into one for the whole queue forgets the key windows; windows
/// idle for a period are dropped by the next claim that sweeps.
#[tokio::test]
async fn key_windows_are_forgotten_with_the_limit_and_when_idle() {
    let (broker, url) = broker_with(|o| o.wake_poll(None)).await;
    let mut conn = MySqlConnection::connect(&url).await.unwrap();
    broker
        .set_rate_limit("q", Some(per_key(5, Duration::from_millis(50))))
        .await
        .unwrap();
    let jobs: Vec<NewJob> = (0..10).map(|i| job("x", &format!("k{i}"))).collect();
    broker.enqueue(jobs).await.unwrap();
    assert_eq!(fetch(&broker, "q", 20, TTL).await.jobs.len(), 10);
    assert_eq!(stored_keys(&mut conn, "q").await.len(), 10);
    tokio::time::sleep(Duration::from_millis(60)).await;
    broker.enqueue(vec![job("z", "z")]).await.unwrap();
    assert_eq!(fetch(&broker, "q", 20, TTL).await.jobs.len(), 1);
    assert_eq!(
        stored_keys(&mut conn, "q").await,
        [("z".to_owned(), 1)],
        "the idle windows dropped"
    );

    let whole = RateLimit::new(3, HOUR).unwrap();
    broker.set_rate_limit("q", Some(whole)).await.unwrap();
    assert_eq!(stored_keys(&mut conn, "q").await, []);
    let marked: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM hopper_rate_per_key")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(marked, 0);
    let jobs: Vec<NewJob> = (0..5).map(|i| job("y", &format!("k{i}"))).collect();
    broker.enqueue(jobs).await.unwrap();
    assert_eq!(
        fetch(&broker, "q", 20, TTL).await.jobs.len(),
        3,
        "keys count nothing"
    );
    let stats = broker.queue_stats("q").await.unwrap();
    assert_eq!(stats.rate_limit, Some(whole));
    let _ = conn.close().await;
}

/// A database at version 10, as the previous release left it, holding a limit and jobs:
/// migrating keeps the limit (for the whole queue) and the jobs, without keys. Limited per
/// key, the old jobs share the empty key's window. A run that stopped before recording
/// version 11 finds the column there and counts it as applied.
#[tokio::test]
async fn a_database_of_the_previous_version_gains_rate_keys() {
    let db = TempDatabase::empty().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    database_at(&mut conn, 10).await;
    sqlx::raw_sql(
        "INSERT INTO hopper_jobs (id, queue, state, run_at, attempt, max_attempts, payload,
                                  created_at)
         VALUES (1, 'q', 0, 0, 0, 5, 'a', 0), (2, 'q', 0, 0, 0, 5, 'b', 0),
                (3, 'q', 0, 0, 0, 5, 'c', 0);
         INSERT INTO hopper_rate_limits (queue, `max`, per_ms, starts)
         VALUES ('q', 7, 1000, '')",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let err = MySqlBroker::connect(&db.url).await.unwrap_err().to_string();
    assert!(
        err.contains("at version 10 but this build needs 11"),
        "{err}"
    );
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 1);

    let broker = other(&db.url).await;
    let stats = broker.queue_stats("q").await.unwrap();
    let kept = RateLimit::new(7, Duration::from_secs(1)).unwrap();
    assert_eq!(stats.rate_limit, Some(kept), "kept, for the whole queue");
    broker
        .set_rate_limit("q", Some(per_key(2, HOUR)))
        .await
        .unwrap();
    broker.enqueue(vec![job("d", "d")]).await.unwrap();
    let got = fetch(&broker, "q", 10, TTL).await;
    let mut ids: Vec<i64> = got.jobs.iter().map(|j| j.id.0).collect();
    ids.sort();
    assert_eq!(ids, [1, 2, 4], "two without a key, and the job of key d");

    sqlx::raw_sql("DELETE FROM hopper_migrations WHERE version >= 11")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 1);
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 0);
    let stats = broker.queue_stats("q").await.unwrap();
    assert_eq!(stats.rate_limit, Some(per_key(2, HOUR)), "kept");
    let _ = conn.close().await;
}

/// Key windows another program wrote wrong (bytes that do not decode, a start an hour
/// ahead of the clock) do not hold their keys: under 1 an hour per key, the claim counts
/// both from an empty window, takes one job of each, and leaves the rows as it would have
/// written them.
#[tokio::test]
async fn key_windows_written_wrong_start_afresh() {
    let (broker, url) = broker_with(|o| o.wake_poll(None)).await;
    broker
        .set_rate_limit("q", Some(per_key(1, HOUR)))
        .await
        .unwrap();
    let mut conn = MySqlConnection::connect(&url).await.unwrap();
    let ahead =
        sqlx::query_scalar::<_, i64>("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)")
            .fetch_one(&mut conn)
            .await
            .unwrap()
            + HOUR.as_millis() as i64;
    let mut future = ahead.to_le_bytes().to_vec();
    future.extend_from_slice(&1u32.to_le_bytes());
    for (key, starts) in [("torn", vec![1u8, 2, 3]), ("ahead", future)] {
        sqlx::query("INSERT INTO hopper_rate_keys (queue, rate_key, starts) VALUES ('q', ?, ?)")
            .bind(key)
            .bind(starts)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let ids = broker
        .enqueue(vec![
            job("t1", "torn"),
            job("t2", "torn"),
            job("a1", "ahead"),
        ])
        .await
        .unwrap();
    let got = fetch(&broker, "q", 10, TTL).await;
    let mut taken: Vec<JobId> = got.jobs.iter().map(|j| j.id).collect();
    taken.sort();
    assert_eq!(taken, [ids[0], ids[2]], "one of each key");
    assert_eq!(
        stored_keys(&mut conn, "q").await,
        [("ahead".to_owned(), 1), ("torn".to_owned(), 1)],
        "written back from this claim's starts"
    );
    let _ = conn.close().await;
}
