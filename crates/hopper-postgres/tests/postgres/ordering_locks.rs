//! The keys' locks of a settlement that ends a job of one key and steps a job of another
//! aside (`hopper_settle_lines`): taken in one sorted call, as every enqueue takes them,
//! so that it never holds one key while it waits for a key that sorts before it. Holding
//! one out of order would let it and an enqueue of both keys wait on each other.

use std::time::Duration;

use hopper_core::{Broker, FetchRequest, NewJob, Outcome, Settlement};
use hopper_postgres::PgBroker;
use hopper_testkit::unique_name;
use sqlx::{Connection, PgConnection};

use super::support::{drop_schema, schema, url};

/// The lock `hopper_lock_lines` takes for key `key` of queue `q` in `schema`, as SQL
/// arguments of `pg_advisory_xact_lock`.
fn lock_of(schema: &str, key: &str) -> String {
    format!("hashtext('{schema}.hopper_jobs'), hashtext('q {key}')")
}

/// `first` sorts before `second` among the keys' locks. A connection holds `first`'s
/// lock while the broker settles an ack of `second`'s head and a retry of `first`'s head
/// that steps aside: the settlement waits, and meanwhile `second`'s lock is free, so it
/// holds nothing while it waits. Once `first` is free, it settles both.
#[tokio::test]
async fn a_settlement_waiting_for_a_key_holds_none_that_sorts_after() {
    let options = schema().await;
    let name = options.schema.clone();
    let app = unique_name("locks");
    let url_app = format!("{}?application_name={app}", url());
    let broker = PgBroker::connect_with(&url_app, options.listen(false))
        .await
        .unwrap();
    let mut holder = PgConnection::connect(&url()).await.unwrap();
    // Two keys in the locks' order (by their hashes).
    let mut keys: Vec<(i32, String)> = Vec::new();
    for k in ["k0", "k1", "k2", "k3"] {
        let h: i32 = sqlx::query_scalar("SELECT hashtext($1)")
            .bind(format!("q {k}"))
            .fetch_one(&mut holder)
            .await
            .unwrap();
        keys.push((h, k.to_owned()));
    }
    keys.sort();
    let (first, second) = (keys[0].1.clone(), keys[3].1.clone());
    let keyed = |k: &str, n: &str| NewJob::new("q", n.as_bytes().to_vec()).ordering_key(k);
    let ids = broker
        .enqueue(vec![
            keyed(&first, "f1"),
            keyed(&first, "f2"),
            keyed(&second, "s1"),
            keyed(&second, "s2"),
        ])
        .await
        .unwrap();
    let held = broker
        .fetch(FetchRequest::one("q", 10, Duration::from_secs(60)))
        .await
        .unwrap();
    let mut heads: Vec<_> = held.jobs.iter().map(|j| j.id).collect();
    heads.sort();
    assert_eq!(heads, vec![ids[0], ids[2]], "f1 and s1");

    let take = format!(
        "BEGIN; SELECT pg_advisory_xact_lock({})",
        lock_of(&name, &first)
    );
    sqlx::raw_sql(&take).execute(&mut holder).await.unwrap();
    let settling = {
        let broker = broker.clone();
        let lease = held.lease;
        let (f1, s1) = (ids[0], ids[2]);
        tokio::spawn(async move {
            let aside = Outcome::Retry {
                delay: Duration::from_secs(60),
                error: "later".into(),
                step_aside: true,
            };
            let both = vec![
                Settlement {
                    job: s1,
                    lease,
                    outcome: Outcome::Ack,
                },
                Settlement {
                    job: f1,
                    lease,
                    outcome: aside,
                },
            ];
            broker.settle(both).await.unwrap()
        })
    };
    let waits = "SELECT count(*) FROM pg_stat_activity
                 WHERE application_name = $1 AND wait_event_type = 'Lock'";
    let mut waiting = 0;
    for _ in 0..500 {
        waiting = sqlx::query_scalar::<_, i64>(waits)
            .bind(&app)
            .fetch_one(&mut holder)
            .await
            .unwrap();
        if waiting > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(waiting, 1, "the settlement waits for {first}");
    let mut other = PgConnection::connect(&url()).await.unwrap();
    let try_second = format!(
        "SELECT pg_try_advisory_xact_lock({})",
        lock_of(&name, &second)
    );
    let free: bool = sqlx::query_scalar(&try_second)
        .fetch_one(&mut other)
        .await
        .unwrap();
    assert!(
        free,
        "{second} is free while the settlement waits for {first}"
    );
    other.close().await.unwrap();
    sqlx::raw_sql("COMMIT").execute(&mut holder).await.unwrap();
    holder.close().await.unwrap();

    let report = settling.await.unwrap();
    assert_eq!((report.applied, report.fenced.len()), (2, 0));
    let next = broker
        .fetch(FetchRequest::one("q", 10, Duration::from_secs(60)))
        .await
        .unwrap();
    let mut next: Vec<_> = next.jobs.iter().map(|j| j.id).collect();
    next.sort();
    assert_eq!(next, vec![ids[1], ids[3]], "f2 past f1, s2 after s1");
    broker.close().await;
    drop_schema(name);
}
