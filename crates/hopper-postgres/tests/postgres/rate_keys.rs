//! Rate limits per key on PostgreSQL, beyond the shared suite: brokers on separate pools
//! race on one queue's key windows and claim no more than each key's limit between them;
//! rate keys go beside the other keys and groups.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, Error, RateLimit};
use hopper_postgres::{PgBroker, PgOptions};
use hopper_testkit::helpers::{TTL, fetch, race_on_rate_keys, rate_keyed as job, sorted_payloads};
use sqlx::{Connection, PgConnection};

use super::support::{broker_with, url};

const HOUR: Duration = Duration::from_secs(3600);

/// Two brokers, each with its own pool, race 8 claimers in batches of 7 on a queue of 3
/// keys with 40 jobs each and 20 without, limited to 5 an hour per key: 20 are claimed
/// between them, 5 of each key and 5 without, and the other 120 are moved to their keys'
/// next room, an hour on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn brokers_on_two_pools_claim_no_more_than_each_keys_limit() {
    let (broker, pg) = broker_with(|o| o.listen(false)).await;
    let options = PgOptions::default().schema(pg.schema()).listen(false);
    let other: Arc<dyn Broker> = Arc::new(PgBroker::connect_with(&url(), options).await.unwrap());
    let limit = RateLimit::new(5, HOUR).unwrap().per_key();
    pg.set_rate_limit("q", Some(limit)).await.unwrap();
    race_on_rate_keys(&[broker.clone(), other.clone()]).await;
    let shown = other.queue_stats("q").await.unwrap().rate_limit;
    assert_eq!(shown, Some(limit), "set through the other");
}

/// Rate keys go beside unique keys, ordering keys and groups: every job stored keeps its
/// rate key, in the insert itself for unique keys, and for ordering keys and groups by a
/// function that stores the jobs and then their keys, in the enqueue's one statement (so a
/// caller's transaction, begun through sqlx or by hand, is neither needed nor committed). Under 1 an hour per key, the first job of each key starts:
/// of key `t`, `s` and none.
#[tokio::test]
async fn rate_keys_go_beside_unique_and_ordering_keys_and_groups() {
    let (broker, pg) = broker_with(|o| o.listen(false)).await;
    let limit = RateLimit::new(1, HOUR).unwrap().per_key();
    pg.set_rate_limit("q", Some(limit)).await.unwrap();
    let batches = [
        vec![
            job("u1", "t").unique_key("u"),
            job("u2", "t").unique_key("u"),
            job("p1", ""),
        ],
        vec![
            job("o1", "t").ordering_key("o"),
            job("o2", "s").ordering_key("o2"),
            job("p2", ""),
        ],
        vec![
            job("g1", "t").group("g"),
            job("g2", "s").group("g"),
            job("p3", ""),
        ],
    ];
    for batch in batches {
        broker.enqueue(batch).await.unwrap();
    }
    let mut conn = PgConnection::connect(&url()).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    pg.enqueue_in(&mut tx, vec![job("x", "t").ordering_key("x")])
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    // A transaction the caller began by hand: the enqueue must not commit it.
    sqlx::raw_sql("BEGIN").execute(&mut conn).await.unwrap();
    pg.enqueue_in(&mut conn, vec![job("y", "t").group("gy")])
        .await
        .unwrap();
    sqlx::raw_sql("ROLLBACK").execute(&mut conn).await.unwrap();
    let text = format!(
        "SELECT convert_from(payload, 'UTF8'), rate_key FROM {}.hopper_jobs ORDER BY id",
        pg.schema()
    );
    let stored: Vec<(String, Option<String>)> =
        sqlx::query_as(&text).fetch_all(&mut conn).await.unwrap();
    let stored: Vec<(&str, Option<&str>)> = stored
        .iter()
        .map(|(p, k)| (p.as_str(), k.as_deref()))
        .collect();
    let t = Some("t");
    let s = Some("s");
    assert_eq!(
        stored,
        [
            ("u1", t),
            ("p1", None),
            ("o1", t),
            ("o2", s),
            ("p2", None),
            ("g1", t),
            ("g2", s),
            ("p3", None)
        ],
        "u2 answered by u1, x and y rolled back"
    );
    let got = fetch(&broker, "q", 20, TTL).await;
    assert_eq!(sorted_payloads(&got.jobs), ["o2", "p1", "u1"]);
    let _ = conn.close().await;
}

/// enqueue_group.sql takes no unique keys: a batch holding both a unique key and a member
/// of a group is refused by name, storing nothing.
#[tokio::test]
async fn unique_keys_beside_group_members_are_refused_by_name() {
    let (broker, _pg) = broker_with(|o| o.listen(false)).await;
    let batch = vec![
        job("u", "").unique_key("u"),
        job("u", "").unique_key("u"),
        job("g", "").group("g"),
    ];
    let refused = broker.enqueue(batch).await;
    assert!(
        matches!(&refused, Err(Error::Config(c)) if c.setting == "group"),
        "{refused:?}"
    );
    assert_eq!(
        broker.counts("q").await.unwrap().pending,
        0,
        "nothing stored"
    );
}
