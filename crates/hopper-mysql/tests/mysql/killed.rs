//! Connections the server ends (`KILL`, as an operator, a proxy or a failover does): the
//! broker opens new ones, and the fetch, settlement, renewal or enqueue that found its
//! connection ended is sent again on a new one at once, instead of failing and leaving the
//! worker to back off. Each test works in a database of its own, so it ends its own
//! connections and no other test's.

use std::time::Duration;

use hopper_core::{Broker, FetchRequest, NewJob, Settlement};
use hopper_mysql::{MySqlBroker, MySqlOptions};
use sqlx::Connection;

use super::support::{TempDatabase, server_url};

/// Ends every connection using `database` from the server's side; returns how many.
async fn kill_all(database: &str) -> usize {
    let mut admin = sqlx::MySqlConnection::connect(&server_url()).await.unwrap();
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()",
    )
    .bind(database)
    .fetch_all(&mut admin)
    .await
    .unwrap();
    for id in &ids {
        // One that ended by itself meanwhile is no error here.
        let _ = sqlx::raw_sql(&format!("KILL CONNECTION {id}"))
            .execute(&mut admin)
            .await;
    }
    admin.close().await.unwrap();
    // The ends arrive at the broker's sockets on their own time.
    tokio::time::sleep(Duration::from_millis(200)).await;
    ids.len()
}

#[tokio::test]
async fn calls_on_connections_the_server_ended_succeed_on_new_ones() {
    let db = TempDatabase::migrated().await;
    let options = MySqlOptions::default().wake_poll(None).connections(2);
    let broker = MySqlBroker::connect_with(&db.url, options).await.unwrap();
    let jobs = (0..6u64).map(|i| NewJob::json("q", &i).unwrap()).collect();
    broker.enqueue(jobs).await.unwrap();
    let ttl = Duration::from_secs(60);

    assert!(kill_all(&db.name).await >= 1, "no connection to end");
    let first = broker
        .fetch(FetchRequest::one("q", 3, ttl))
        .await
        .expect("a fetch after the server ended its connection");
    assert_eq!(first.jobs.len(), 3);

    kill_all(&db.name).await;
    let lost = broker
        .renew(&[first.lease], ttl)
        .await
        .expect("a renewal after the server ended its connection");
    assert!(lost.is_empty(), "renewed, none lost: {lost:?}");

    kill_all(&db.name).await;
    let acks = first.jobs.iter().map(Settlement::ack).collect();
    let report = broker
        .settle(acks)
        .await
        .expect("a settlement after the server ended its connection");
    assert_eq!(report.applied, 3);

    // An enqueue on a connection that broke without a word from the server is reported,
    // not sent again: had the insert reached the server, it could have committed. (One
    // that takes a connection opened for it goes through.) Either way each job is stored
    // once or not at all, and the call after a failure goes through.
    let (mut stored, mut refused) = (3, 0);
    for round in 0..4u64 {
        kill_all(&db.name).await;
        let more = (0..4)
            .map(|i| NewJob::json("q", &(round * 10 + i)).unwrap())
            .collect();
        match broker.enqueue(more).await {
            Ok(ids) => stored += ids.len(),
            Err(e) => {
                let text = e.to_string();
                assert!(text.starts_with("broker error: enqueueing jobs"), "{text}");
                refused += 1;
                let again = vec![NewJob::json("q", &99u64).unwrap()];
                stored += broker.enqueue(again).await.unwrap().len();
            }
        }
    }
    let pending = broker.counts("q").await.unwrap().pending as usize;
    assert_eq!(pending, stored, "{refused} enqueues refused");
    broker.close().await;
}

/// A statement stuck behind a table lock someone else holds fails at the broker's
/// statement timeout with the server's own reason, instead of holding its caller forever;
/// the broker serves again once the lock goes.
#[tokio::test]
async fn a_statement_stuck_behind_a_lock_fails_at_the_statement_timeout() {
    let db = TempDatabase::migrated().await;
    let options = MySqlOptions::default()
        .wake_poll(None)
        .statement_timeout(Some(Duration::from_millis(300)));
    let broker = MySqlBroker::connect_with(&db.url, options).await.unwrap();
    broker
        .enqueue(vec![NewJob::json("q", &1u64).unwrap()])
        .await
        .unwrap();
    let mut holder = sqlx::MySqlConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("LOCK TABLES hopper_jobs WRITE")
        .execute(&mut holder)
        .await
        .unwrap();
    let ttl = Duration::from_secs(60);
    let started = std::time::Instant::now();
    let err = broker
        .fetch(FetchRequest::one("q", 1, ttl))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("max_statement_time exceeded"), "{err}");
    // Once, not again after a retry of its own: well under two timeouts and a connect.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    sqlx::raw_sql("UNLOCK TABLES")
        .execute(&mut holder)
        .await
        .unwrap();
    holder.close().await.unwrap();
    let fetched = broker.fetch(FetchRequest::one("q", 1, ttl)).await.unwrap();
    assert_eq!(fetched.jobs.len(), 1);
    broker.close().await;
}
