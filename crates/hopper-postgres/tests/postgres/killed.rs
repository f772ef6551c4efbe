//! Connections the server ends (`pg_terminate_backend`, as an operator or a failover
//! does): the broker opens new ones, and the fetch, settlement, renewal or enqueue that
//! found its connection ended is sent again on a new one at once, instead of failing and
//! leaving the worker to back off. Each broker here names its connections
//! (`application_name`) so the test ends its own and no other test's.

use std::time::Duration;

use hopper_core::{Broker, FetchRequest, NewJob, Settlement};
use hopper_postgres::PgBroker;
use hopper_testkit::unique_name;
use sqlx::Connection;

use super::support::{drop_schema, schema, url};

/// Ends every connection of `app` from the server's side; returns how many.
async fn terminate(app: &str) -> i64 {
    let mut admin = sqlx::PgConnection::connect(&url()).await.unwrap();
    let ended: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                              WHERE application_name = $1) AS t",
    )
    .bind(app)
    .fetch_one(&mut admin)
    .await
    .unwrap();
    admin.close().await.unwrap();
    // The ends arrive at the broker's sockets on their own time.
    tokio::time::sleep(Duration::from_millis(200)).await;
    ended
}

#[tokio::test]
async fn calls_on_connections_the_server_ended_succeed_on_new_ones() {
    let options = schema().await;
    let name = options.schema.clone();
    let app = unique_name("killed");
    let broker = PgBroker::connect_with(
        &format!("{}?application_name={app}", url()),
        options.listen(false),
    )
    .await
    .unwrap();
    let jobs = (0..10u64).map(|i| NewJob::json("q", &i).unwrap()).collect();
    broker.enqueue(jobs).await.unwrap();
    // Three calls at once leave three idle connections for calls, which the first
    // termination below ends with the rest: the renewal's one resend, after the first
    // dead one, must not land on another. The calls wait behind a lock of the table until
    // all three hold a connection: on a busy machine, calls merely started together can
    // find the one before done already, and share its connection.
    let mut locker = sqlx::PgConnection::connect(&url()).await.unwrap();
    let lock = format!("BEGIN; LOCK TABLE {name}.hopper_jobs IN ACCESS EXCLUSIVE MODE");
    sqlx::raw_sql(&lock).execute(&mut locker).await.unwrap();
    let calls = {
        let broker = broker.clone();
        tokio::spawn(async move {
            let (a, b, c) =
                tokio::join!(broker.counts("q"), broker.counts("q"), broker.counts("q"));
            a.is_ok() && b.is_ok() && c.is_ok()
        })
    };
    let waiting = "SELECT count(*) FROM pg_stat_activity
                   WHERE application_name = $1 AND wait_event_type = 'Lock'";
    let mut n = 0;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        n = sqlx::query_scalar::<_, i64>(waiting)
            .bind(&app)
            .fetch_one(&mut locker)
            .await
            .unwrap();
        if n == 3 {
            break;
        }
    }
    sqlx::raw_sql("COMMIT").execute(&mut locker).await.unwrap();
    locker.close().await.unwrap();
    assert_eq!(n, 3, "three calls waiting at once");
    assert!(calls.await.unwrap(), "three calls answered");
    let ttl = Duration::from_secs(60);
    let first = broker.fetch(FetchRequest::one("q", 2, ttl)).await.unwrap();
    let acks = first.jobs.iter().map(Settlement::ack).collect();
    broker.settle(acks).await.unwrap();

    assert!(
        terminate(&app).await >= 4,
        "the claim connection and the three for calls"
    );
    let second = broker
        .fetch(FetchRequest::one("q", 3, ttl))
        .await
        .expect("a fetch after the server ended its connection");
    assert_eq!(second.jobs.len(), 3);

    terminate(&app).await;
    let lost = broker
        .renew(&[second.lease], ttl)
        .await
        .expect("a renewal after the server ended its connection");
    assert!(lost.is_empty(), "renewed, none lost: {lost:?}");

    terminate(&app).await;
    let acks = second.jobs.iter().map(Settlement::ack).collect();
    let report = broker
        .settle(acks)
        .await
        .expect("a settlement after the server ended its connection");
    assert_eq!(report.applied, 3);
    assert_eq!(broker.counts("q").await.unwrap().pending, 5);

    // An enqueue is sent again only when the server's own error says it did not commit,
    // as here: the jobs are there once each.
    terminate(&app).await;
    let more = (10..14u64)
        .map(|i| NewJob::json("q", &i).unwrap())
        .collect();
    let ids = broker
        .enqueue(more)
        .await
        .expect("an enqueue after the server ended its connection");
    assert_eq!(ids.len(), 4);
    assert_eq!(broker.counts("q").await.unwrap().pending, 9);
    broker.close().await;
    drop_schema(name);
}

/// A statement stuck behind a lock someone else holds fails at the broker's statement
/// timeout with the server's own reason, instead of holding its caller forever; the
/// connection stays usable once the lock goes.
#[tokio::test]
async fn a_statement_stuck_behind_a_lock_fails_at_the_statement_timeout() {
    let options = schema().await;
    let name = options.schema.clone();
    let broker = PgBroker::connect_with(
        &url(),
        options
            .listen(false)
            .statement_timeout(Some(Duration::from_millis(300))),
    )
    .await
    .unwrap();
    broker
        .enqueue(vec![NewJob::json("q", &1u64).unwrap()])
        .await
        .unwrap();
    let mut holder = sqlx::PgConnection::connect(&url()).await.unwrap();
    sqlx::raw_sql(&format!(
        "BEGIN; LOCK TABLE {name}.hopper_jobs IN ACCESS EXCLUSIVE MODE"
    ))
    .execute(&mut holder)
    .await
    .unwrap();
    let ttl = Duration::from_secs(60);
    let err = broker
        .fetch(FetchRequest::one("q", 1, ttl))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("statement timeout"), "{err}");
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
    holder.close().await.unwrap();
    let fetched = broker.fetch(FetchRequest::one("q", 1, ttl)).await.unwrap();
    assert_eq!(fetched.jobs.len(), 1);
    broker.close().await;
    drop_schema(name);
}
