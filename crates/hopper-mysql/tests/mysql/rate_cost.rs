//! What rate limits cost, timed on the real server, each pair of variants interleaved
//! call by call so that a load that comes and goes weighs on both alike. Not run by
//! default: `cargo test --release -p hopper-mysql --test mysql -- --ignored --nocapture
//! rate_costs`.
//!
//! - The claim statement of a queue without a limit, with and without the `limited`
//!   column that probes `hopper_rate_limits` (one primary-key read, as the pause's);
//! - the UPDATE that takes the claimed jobs, with and without stamping `started_at`;
//! - a fetch of 10 through the broker from a limited queue against one from a queue
//!   without a limit (the lock of the limit's row and the write of its window).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hopper_core::{Broker, RateLimit, Settlement};
use hopper_testkit::helpers::{TTL, enqueue_n, fetch};
use sqlx::{Connection, MySqlConnection};

use super::plans::statement;
use super::support::broker_with;

const ROUNDS: usize = 1500;

/// Median, 10th and 90th percentiles of `samples`, in microseconds.
fn spread(samples: &mut [Duration]) -> String {
    samples.sort();
    let at = |p: usize| samples[(samples.len() - 1) * p / 100].as_secs_f64() * 1e6;
    format!(
        "median {:.0} µs (p10 {:.0}, p90 {:.0})",
        at(50),
        at(10),
        at(90)
    )
}

/// Times `a` and `b` in turns, each inside a transaction rolled back after it.
async fn interleaved(
    conn: &mut MySqlConnection,
    a: &str,
    b: &str,
    bind: impl Fn(&str, bool) -> sqlx::query::Query<'_, sqlx::MySql, sqlx::mysql::MySqlArguments>,
) -> (String, String) {
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        for (text, is_b, times) in [(a, false, &mut ta), (b, true, &mut tb)] {
            sqlx::raw_sql("BEGIN").execute(&mut *conn).await.unwrap();
            let started = Instant::now();
            bind(text, is_b).execute(&mut *conn).await.unwrap();
            if round > 50 {
                times.push(started.elapsed());
            }
            sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await.unwrap();
        }
    }
    (spread(&mut ta), spread(&mut tb))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "times thousands of statements; run for the figures"]
async fn rate_costs() {
    let (broker, url) = broker_with(|o| o.wake_poll(None)).await;
    enqueue_n(&broker, "q", 20_000).await;
    // Limits on other queues, so that the probe reads a table that is not empty.
    for i in 0..20 {
        let limit = RateLimit::new(5, Duration::from_secs(1)).unwrap();
        broker
            .set_rate_limit(&format!("other{i}"), Some(limit))
            .await
            .unwrap();
    }
    let mut conn = MySqlConnection::connect(&url).await.unwrap();
    sqlx::raw_sql("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut conn)
        .await
        .unwrap();

    let claim = statement(include_str!("../../sql/claim.sql"));
    let probe = "        CAST(EXISTS (SELECT 1 FROM hopper_rate_limits WHERE queue = ?) AS SIGNED) AS limited\n";
    let without = claim.replace(&format!(",\n{probe}"), "\n");
    assert_ne!(without, claim, "the probe's line");
    let (old, new) = interleaved(&mut conn, &without, &claim, |text, probes| {
        let mut query = sqlx::query(text);
        if probes {
            query = query.bind("q");
        }
        query.bind("q").bind(None::<i64>).bind("q").bind(10i64)
    })
    .await;
    eprintln!("claim of 10, no limit: without the probe {old}; with it {new}");

    let update = statement(include_str!("../../sql/lease_claimed.sql"))
        .replace("?, ?, ?, ?", &vec!["?"; 16].join(", "));
    let stamp =
        ",\n    started_at = COALESCE(?, CAST(ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED))";
    let unstamped = update.replace(stamp, "");
    assert_ne!(unstamped, update, "the stamp's line");
    let (old, new) = interleaved(&mut conn, &unstamped, &update, |text, stamps| {
        let mut query = sqlx::query(text)
            .bind(7i64)
            .bind(None::<i64>)
            .bind(30_000i64);
        if stamps {
            query = query.bind(None::<i64>);
        }
        for id in 1..=16i64 {
            query = query.bind(id * 97);
        }
        query
    })
    .await;
    eprintln!("lease of 16 jobs: without started_at {old}; with it {new}");
    let _ = conn.close().await;

    let never = RateLimit::new(hopper_core::rate::MAX_RATE, Duration::from_millis(1)).unwrap();
    broker.set_rate_limit("l", Some(never)).await.unwrap();
    enqueue_n(&broker, "l", 20_000).await;
    let (mut plain, mut limited) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        for (queue, times) in [("q", &mut plain), ("l", &mut limited)] {
            let started = Instant::now();
            let got = fetch(&broker, queue, 10, TTL).await;
            let took = started.elapsed();
            assert_eq!(got.jobs.len(), 10);
            if round > 50 {
                times.push(took);
            }
            acks(&broker, &got).await;
        }
    }
    eprintln!(
        "fetch of 10: no limit {}; limited (never reached) {}",
        spread(&mut plain),
        spread(&mut limited)
    );
}

async fn acks(broker: &Arc<dyn Broker>, got: &hopper_core::Fetched) {
    let acks = got.jobs.iter().map(Settlement::ack).collect();
    broker.settle(acks).await.unwrap();
}
