//! A server cut off by a network partition never answers and never says so. A call gives
//! up once it has gone unanswered past the statement timeout and as long again, drops the
//! connection it was waiting on, and the next call, once the network is back, goes out on
//! a new connection instead of waiting for a reply that will never come.

use std::time::{Duration, Instant};

use hopper_core::{Broker, FetchRequest, NewJob};
use hopper_mysql::{MySqlBroker, MySqlOptions};
use hopper_testkit::relay::Relay;

use super::support::TempDatabase;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_off_from_the_server_gives_up_and_the_next_uses_a_new_connection() {
    let db = TempDatabase::migrated().await;
    let relay = Relay::start("127.0.0.1:3306").await;
    let through = db
        .url
        .replace("127.0.0.1:3306", &format!("127.0.0.1:{}", relay.port));
    let options = MySqlOptions::default()
        .wake_poll(None)
        .connections(1)
        .statement_timeout(Some(Duration::from_millis(500)));
    let broker = MySqlBroker::connect_with(&through, options).await.unwrap();
    let jobs = (0..2u64).map(|i| NewJob::json("q", &i).unwrap()).collect();
    broker.enqueue(jobs).await.unwrap();
    let ttl = Duration::from_secs(60);
    let first = broker.fetch(FetchRequest::one("q", 1, ttl)).await.unwrap();
    assert_eq!(first.jobs.len(), 1);

    relay.cut();
    let started = Instant::now();
    let err = broker
        .fetch(FetchRequest::one("q", 1, ttl))
        .await
        .unwrap_err()
        .to_string();
    let waited = started.elapsed();
    assert!(err.contains("fetching jobs"), "{err}");
    assert!(err.contains("no answer from mysql://"), "{err}");
    assert!(err.contains("within 1s"), "{err}");
    assert!(waited >= Duration::from_secs(1), "gave up after {waited:?}");

    // Its one connection was dropped: the next call opens a new one, and the claim that
    // went unanswered never reached the server, so the second job is there.
    let again = broker.fetch(FetchRequest::one("q", 1, ttl)).await.unwrap();
    assert_eq!(again.jobs.len(), 1);
    assert_eq!(broker.counts("q").await.unwrap().leased, 2);
}
