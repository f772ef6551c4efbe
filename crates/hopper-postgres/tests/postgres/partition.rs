//! A server cut off by a network partition never answers and never says so. A call gives
//! up once it has gone unanswered past the statement timeout and as long again, drops the
//! connection it was waiting on, and the next call, once the network is back, goes out on
//! a new connection instead of waiting for a reply that will never come.

use std::time::{Duration, Instant};

use hopper_core::{Broker, FetchRequest, NewJob};
use hopper_postgres::PgBroker;
use hopper_testkit::relay::Relay;

use super::support::{drop_schema, schema, url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_off_from_the_server_gives_up_and_the_next_uses_a_new_connection() {
    let options = schema().await;
    let name = options.schema.clone();
    let relay = Relay::start("127.0.0.1:5432").await;
    let through = url().replace("127.0.0.1:5432", &format!("127.0.0.1:{}", relay.port));
    let broker = PgBroker::connect_with(
        &through,
        options
            .listen(false)
            .statement_timeout(Some(Duration::from_millis(500))),
    )
    .await
    .unwrap();
    let jobs = (0..2u64).map(|i| NewJob::json("q", &i).unwrap()).collect();
    broker.enqueue(jobs).await.unwrap();
    let ttl = Duration::from_secs(60);
    assert_eq!(
        broker
            .fetch(FetchRequest::one("q", 1, ttl))
            .await
            .unwrap()
            .jobs
            .len(),
        1
    );

    relay.cut();
    let started = Instant::now();
    let err = broker
        .fetch(FetchRequest::one("q", 1, ttl))
        .await
        .unwrap_err()
        .to_string();
    let waited = started.elapsed();
    assert!(err.contains("fetching jobs: no answer from"), "{err}");
    assert!(err.contains("within 1s"), "{err}");
    assert!(waited >= Duration::from_secs(1), "gave up after {waited:?}");

    // The network is back for new connections: the claim that went unanswered never
    // reached the server, so the second job is there to fetch, on a new connection.
    let again = broker.fetch(FetchRequest::one("q", 1, ttl)).await.unwrap();
    assert_eq!(again.jobs.len(), 1);
    // Every call has the deadline: a count on a connection opened before the cut gives up
    // too, and the one after it answers.
    let mut unanswered = 0;
    let counted = loop {
        match broker.counts("q").await {
            Ok(counts) => break counts,
            Err(e) => {
                assert!(
                    e.to_string().contains("counting jobs: no answer from"),
                    "{e}"
                );
                unanswered += 1;
                assert!(
                    unanswered <= 4,
                    "more dead connections than the broker holds"
                );
            }
        }
    };
    assert_eq!(counted.leased, 2, "{counted:?}");
    drop(broker);
    drop_schema(name);
}
