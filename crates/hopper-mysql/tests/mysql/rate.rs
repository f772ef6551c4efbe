//! Rate limits on the real server: brokers of two processes sharing one window (a limit
//! set by the other found at the next claim, a lifted one dropped), the database clock's
//! windows checked by the jobs' `started_at`, what a claim asks with and without a limit,
//! windows and limits written wrong by another program, and a database of the previous
//! version brought up to date.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hopper_core::{Broker, Budget, Clock, FetchRequest, JobId, Millis, RateLimit};
use hopper_mysql::{MySqlBroker, MySqlOptions};
use hopper_testkit::helpers::{TTL, claim_concurrently, enqueue_n, fetch, fetch_request};
use sqlx::{Connection, MySqlConnection};

use super::migrations::database_at;
use super::support::{CountedUser, TempDatabase, broker_with};

fn limit(max: u32, per_ms: u64) -> RateLimit {
    RateLimit::new(max, Duration::from_millis(per_ms)).expect("a valid limit")
}

const HOUR: u64 = 3_600_000;

/// Another process: a broker with connections of its own on the same database.
async fn other(url: &str) -> Arc<dyn Broker> {
    let options = MySqlOptions::default().wake_poll(None);
    Arc::new(MySqlBroker::connect_with(url, options).await.unwrap())
}

/// A stored window's (time, jobs) pairs.
fn pairs(starts: &[u8]) -> Vec<(i64, u32)> {
    starts
        .chunks_exact(12)
        .map(|p| {
            let t = i64::from_le_bytes(p[..8].try_into().unwrap());
            (t, u32::from_le_bytes(p[8..].try_into().unwrap()))
        })
        .collect()
}

fn pair(t: i64, n: u32) -> Vec<u8> {
    let mut out = t.to_le_bytes().to_vec();
    out.extend_from_slice(&n.to_le_bytes());
    out
}

async fn stored_window(conn: &mut MySqlConnection, queue: &str) -> Vec<(i64, u32)> {
    let starts: Vec<u8> =
        sqlx::query_scalar("SELECT starts FROM hopper_rate_limits WHERE queue = ?")
            .bind(queue)
            .fetch_one(conn)
            .await
            .unwrap();
    pairs(&starts)
}

/// Claimers on two brokers (two pools, as two processes) race on a queue the first one
/// limited after the second had claimed from it unlimited: the second finds the limit at
/// its next claim, and between them they claim exactly the limit, which the stored window
/// counts. Lifted by the first, the second claims freely at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn brokers_of_two_processes_share_one_window() {
    let (a, url) = broker_with(|o| o.wake_poll(None)).await;
    let b = other(&url).await;
    enqueue_n(&a, "q", 300).await;
    assert_eq!(fetch(&b, "q", 5, TTL).await.jobs.len(), 5, "no limit yet");

    a.set_rate_limit("q", Some(limit(25, HOUR))).await.unwrap();
    let seen = claim_concurrently(&[a.clone(), b.clone()], "q", 8, 7).await;
    assert_eq!(seen.len(), 25, "claimed under a limit of 25 an hour");
    let mut raw = MySqlConnection::connect(&url).await.unwrap();
    let window = stored_window(&mut raw, "q").await;
    let counted: u32 = window.iter().map(|&(_, n)| n).sum();
    assert_eq!(counted, 25, "{window:?}");
    assert!(window.windows(2).all(|w| w[0].0 < w[1].0), "{window:?}");

    a.set_rate_limit("q", None).await.unwrap();
    assert_eq!(fetch(&b, "q", 10, TTL).await.jobs.len(), 10, "lifted");
    assert_eq!(a.counts("q").await.unwrap().pending, 300 - 5 - 25 - 10);
    let _ = raw.close().await;
}

/// Two brokers on the database clock claim from a queue limited to 20 a second for 2.5 s,
/// holding what they claim: by the `started_at` the claims stamped, no second holds more
/// than 20 starts, and the window refilled as its starts left it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_database_clock_keeps_a_sliding_window_across_processes() {
    let (a, url) = broker_with(|o| o.wake_poll(None)).await;
    let b = other(&url).await;
    a.set_rate_limit("q", Some(limit(20, 1000))).await.unwrap();
    enqueue_n(&a, "q", 500).await;
    let until = Instant::now() + Duration::from_millis(2500);
    let claimers: Vec<_> = (0..6)
        .map(|i| {
            let broker = [&a, &b][i % 2].clone();
            tokio::spawn(async move {
                while Instant::now() < until {
                    if fetch(&broker, "q", 7, TTL).await.jobs.is_empty() {
                        tokio::time::sleep(Duration::from_millis(3)).await;
                    }
                }
            })
        })
        .collect();
    for c in claimers {
        c.await.unwrap();
    }
    let mut raw = MySqlConnection::connect(&url).await.unwrap();
    let starts: Vec<Millis> = sqlx::query_scalar(
        "SELECT started_at FROM hopper_jobs WHERE state = 1 ORDER BY started_at",
    )
    .fetch_all(&mut raw)
    .await
    .unwrap();
    for (i, t) in starts.iter().enumerate() {
        let within = starts[i..].iter().take_while(|&&u| u - t < 1000).count();
        assert!(within <= 20, "{within} starts in the second from {t} ms");
    }
    // Two windows at least (the first refilled), three at most; no more, however loaded the
    // machine.
    assert!(
        (21..=60).contains(&starts.len()),
        "{} started in 2.5 s",
        starts.len()
    );
    let _ = raw.close().await;
}

/// The statements one fetch of 10 runs, as the server counts them, and its jobs.
async fn counted(broker: &Arc<dyn Broker>, user: &CountedUser, queue: &str) -> (i64, usize) {
    let before = user.statements().await;
    let jobs = fetch(broker, queue, 10, TTL).await.jobs.len();
    // MariaDB counts a statement after its reply (see `idle`).
    std::thread::sleep(Duration::from_millis(20));
    (user.statements().await - before, jobs)
}

/// A claim of a queue without a limit runs the statements it ran before limits existed,
/// though another queue has one; a limited queue's claim adds the lock of its row and the
/// write of its window; one whose window is full locks, finds no room, and reads no job.
#[tokio::test(start_paused = true)]
async fn a_limit_costs_only_its_own_queue_two_statements() {
    let db = TempDatabase::migrated().await;
    let user = CountedUser::create(&db).await;
    let options = MySqlOptions::default()
        .clock(Clock::tokio())
        .wake_poll(None)
        .connections(1);
    let broker: Arc<dyn Broker> =
        Arc::new(MySqlBroker::connect_with(&user.url, options).await.unwrap());
    enqueue_n(&broker, "q", 50).await;
    enqueue_n(&broker, "r", 50).await;
    broker
        .set_rate_limit("r", Some(limit(5, HOUR)))
        .await
        .unwrap();
    // The reaper's turn, which the paused clock does not bring again.
    fetch(&broker, "q", 1, TTL).await;

    let plain = counted(&broker, &user, "q").await;
    assert_eq!(plain, (4, 10), "BEGIN, the claim, its UPDATE, COMMIT");
    let limited = counted(&broker, &user, "r").await;
    assert_eq!(limited, (6, 5), "and the lock, and the window written");
    let full = counted(&broker, &user, "r").await;
    assert_eq!(full, (3, 0), "BEGIN, the lock, COMMIT");
}

/// Captures the warnings and errors logged on this thread, each as `field=value` pairs.
struct Capture(Arc<Mutex<Vec<String>>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let level = *event.metadata().level();
        if level == tracing::Level::ERROR || level == tracing::Level::WARN {
            let mut line = String::new();
            event.record(&mut Fields(&mut line));
            self.0.lock().unwrap().push(line);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// A window another program wrote wrong (not whole pairs, pairs out of order, a start far
/// in the future), or a limit out of range, is logged naming the queue and counted from an
/// empty window: the claim goes on, for the queue and for the queue fetched with it, and
/// writes back a window (and limit) that reads.
#[tokio::test(start_paused = true)]
async fn a_window_written_wrong_is_logged_and_counted_afresh() {
    let logged = Arc::new(Mutex::new(Vec::new()));
    let _capture = tracing::subscriber::set_default(Capture(logged.clone()));
    let clock = Clock::tokio();
    let (broker, url) = broker_with(|o| o.clock(clock).wake_poll(None)).await;
    let mut raw = MySqlConnection::connect(&url).await.unwrap();
    broker
        .set_rate_limit("q", Some(limit(3, HOUR)))
        .await
        .unwrap();
    enqueue_n(&broker, "q", 20).await;
    enqueue_n(&broker, "other", 20).await;
    let both = || FetchRequest {
        budgets: ["q", "other"]
            .map(|queue| Budget {
                queue: queue.into(),
                limit: 5,
            })
            .into(),
        lease_ttl: TTL,
    };
    let now = clock.now_millis();
    let late_first = [pair(now - 10, 1), pair(now - 20, 1)].concat();
    let future = pair(now + 10 * 60_000, 3);
    for (what, starts) in [
        ("not whole pairs", vec![1, 2]),
        ("out of order", late_first),
        ("in the future", future),
    ] {
        logged.lock().unwrap().clear();
        sqlx::query("UPDATE hopper_rate_limits SET starts = ? WHERE queue = 'q'")
            .bind(starts)
            .execute(&mut raw)
            .await
            .unwrap();
        let got = fetch_request(&broker, both()).await;
        let of = |queue: &str| got.jobs.iter().filter(|j| j.queue == queue).count();
        assert_eq!((of("q"), of("other")), (3, 5), "{what}");
        assert_eq!(got.next_due, Some(now + HOUR as i64), "{what}");
        assert_eq!(stored_window(&mut raw, "q").await, [(now, 3)], "{what}");
        let lines = logged.lock().unwrap().clone();
        assert!(
            lines
                .iter()
                .any(|l| l.contains("queue=q") && l.contains("rate window")),
            "{what}: {lines:?}"
        );
    }

    // A limit out of range, which only a server not enforcing the table's CHECKs takes
    // (MariaDB with the checks turned off for the session; MySQL before 8.0.16).
    let unchecked = sqlx::raw_sql("SET SESSION check_constraint_checks = OFF")
        .execute(&mut raw)
        .await;
    if unchecked.is_ok() {
        logged.lock().unwrap().clear();
        sqlx::raw_sql("UPDATE hopper_rate_limits SET `max` = 0, starts = '' WHERE queue = 'q'")
            .execute(&mut raw)
            .await
            .unwrap();
        let got = fetch_request(&broker, both()).await;
        let of = |queue: &str| got.jobs.iter().filter(|j| j.queue == queue).count();
        assert_eq!((of("q"), of("other")), (1, 5), "a max of 0 taken as 1");
        let lines = logged.lock().unwrap().clone();
        assert!(
            lines
                .iter()
                .any(|l| l.contains("queue=q") && l.contains("out of range")),
            "{lines:?}"
        );
        let stats = broker.queue_stats("q").await.unwrap();
        assert_eq!(
            stats.rate_limit,
            Some(limit(1, HOUR)),
            "written back in range"
        );
    }
    let _ = raw.close().await;
}

/// A database at version 8, as the previous release left it, holding jobs: migrating adds
/// the table of limits and the column of start times, NULL for the jobs already there
/// (the leased one too), which are claimed, listed and limited as new ones are; a claim
/// stamps its jobs' start. A run that stopped before recording version 9 finds the column
/// there, keeps the limits, and counts it as applied.
#[tokio::test]
async fn a_database_of_the_previous_version_gains_rate_limits() {
    let db = TempDatabase::empty().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    database_at(&mut conn, 8).await;
    sqlx::raw_sql(
        "INSERT INTO hopper_jobs (id, queue, state, run_at, attempt, max_attempts, payload,
                                  created_at, lease_id, lease_expires, last_error,
                                  finished_at, ordering_key)
         VALUES (1, 'q', 0, 0, 0, 5, 'a', 0, NULL, NULL, NULL, NULL, NULL),
                (2, 'q', 1, 0, 1, 5, 'leased', 0, 7, 9000000000000, NULL, NULL, NULL),
                (3, 'q', 3, 0, 5, 5, 'dead', 0, NULL, NULL, 'boom', 5, NULL),
                (4, 'q', 0, 0, 0, 5, 'b', 0, NULL, NULL, NULL, NULL, 'k'),
                (5, 'q', 0, 0, 0, 5, 'c', 0, NULL, NULL, NULL, NULL, NULL)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let err = MySqlBroker::connect(&db.url).await.unwrap_err().to_string();
    assert!(
        err.contains("at version 8 but this build needs 11"),
        "{err}"
    );
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 3);

    let broker = other(&db.url).await;
    for id in 1..=5 {
        let rec = broker.job(JobId(id)).await.unwrap().unwrap();
        assert_eq!(rec.started_at, None, "job {id}");
    }
    broker
        .set_rate_limit("q", Some(limit(1, HOUR)))
        .await
        .unwrap();
    let first = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(first.jobs.len(), 1);
    assert_eq!(first.jobs[0].id, JobId(1));
    let record = broker.job(JobId(1)).await.unwrap().unwrap();
    assert!(record.started_at.is_some(), "{record:?}");
    let full = fetch(&broker, "q", 10, TTL).await;
    assert!(full.jobs.is_empty());
    assert!(full.next_due.is_some());
    assert_eq!(
        broker.job(JobId(2)).await.unwrap().unwrap().started_at,
        None
    );
    broker.set_rate_limit("q", None).await.unwrap();
    let rest = fetch(&broker, "q", 10, TTL).await;
    let mut ids: Vec<i64> = rest.jobs.iter().map(|j| j.id.0).collect();
    ids.sort();
    assert_eq!(ids, [4, 5], "lifted");

    broker
        .set_rate_limit("q", Some(limit(2, HOUR)))
        .await
        .unwrap();
    sqlx::raw_sql("DELETE FROM hopper_migrations WHERE version >= 9")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 3);
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 0);
    let stats = broker.queue_stats("q").await.unwrap();
    assert_eq!(stats.rate_limit, Some(limit(2, HOUR)), "kept");
    let _ = conn.close().await;
}
