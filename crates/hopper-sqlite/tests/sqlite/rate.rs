//! Rate limits kept in the file: brokers on their own connections, in this process and in
//! others, share one window; a window or a limit no broker wrote never stops a claim; a
//! purge leaves the limit in place. (The broker suite's `rate_limits` and
//! `rate_limit_racing_claimers` cases run in `suite`.)

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, Budget, FetchRequest, RateLimit};
use hopper_sqlite::SqliteBroker;
use hopper_testkit::helpers::{claim_concurrently, enqueue_n};

use super::support::{TempDb, open_tokio};

const HOUR: Duration = Duration::from_secs(3600);

fn limit(max: u32, per: Duration) -> RateLimit {
    RateLimit::new(max, per).unwrap()
}

/// Two brokers, each with its own connection and thread, race 8 claimers in batches of 7
/// on one queue limited to 40 an hour: 40 are claimed between them, the rest wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_brokers_on_one_file_claim_no_more_than_the_limit_between_them() {
    let db = TempDb::new("rate_shared");
    let one: Arc<dyn Broker> = Arc::new(SqliteBroker::open(db.path()).await.unwrap());
    let two: Arc<dyn Broker> = Arc::new(SqliteBroker::open(db.path()).await.unwrap());
    one.set_rate_limit("q", Some(limit(40, HOUR)))
        .await
        .unwrap();
    enqueue_n(&two, "q", 300).await;
    let seen = claim_concurrently(&[one.clone(), two.clone()], "q", 8, 7).await;
    assert_eq!(seen.len(), 40, "claimed under a limit of 40 an hour");
    assert_eq!(one.counts("q").await.unwrap().pending, 260);
    let stats = two.queue_stats("q").await.unwrap();
    assert_eq!(
        stats.rate_limit,
        Some(limit(40, HOUR)),
        "set through the other"
    );
}

/// The environment variables that make [`claimer_process`] claim from a file, and when it
/// starts (ms since the epoch).
const CLAIMER_DB: &str = "HOPPER_TEST_RATE_CLAIMER_DB";
const CLAIMER_START: &str = "HOPPER_TEST_RATE_CLAIMER_START";

/// Two other processes (this test binary run again, as [`claimer_process`]) and four
/// claimers here start claiming the same limited queue at one agreed moment: 60 an hour are
/// claimed between every process, as each one's count shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claimers_in_other_processes_share_the_window() {
    let db = TempDb::new("rate_processes");
    let here: Arc<dyn Broker> = Arc::new(SqliteBroker::open(db.path()).await.unwrap());
    here.set_rate_limit("q", Some(limit(60, HOUR)))
        .await
        .unwrap();
    enqueue_n(&here, "q", 300).await;
    // Time enough for the other processes to start and open the file first.
    let start = epoch_ms() + 1500;
    let exe = std::env::current_exe().unwrap();
    let others: Vec<_> = (0..2)
        .map(|_| {
            let (exe, path) = (exe.clone(), db.path().to_owned());
            tokio::task::spawn_blocking(move || {
                std::process::Command::new(exe)
                    .args(["--exact", "sqlite::rate::claimer_process", "--ignored"])
                    .args(["--nocapture", "--quiet"])
                    .env(CLAIMER_DB, &path)
                    .env(CLAIMER_START, start.to_string())
                    .output()
                    .unwrap()
            })
        })
        .collect();
    tokio::time::sleep(until(start)).await;
    let mut counts = vec![
        claim_concurrently(std::slice::from_ref(&here), "q", 4, 2)
            .await
            .len(),
    ];
    for other in others {
        let output = other.await.unwrap();
        assert!(output.status.success(), "a claimer process failed");
        let count = String::from_utf8_lossy(&output.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("claimed=")?.parse::<usize>().ok())
            .expect("the claimer process says how many it claimed");
        counts.push(count);
    }
    eprintln!("claimed here, then by each other process: {counts:?}");
    assert_eq!(counts.iter().sum::<usize>(), 60, "{counts:?}");
    assert_eq!(here.counts("q").await.unwrap().pending, 240);
}

/// Not a test of its own: a process of [`claimers_in_other_processes_share_the_window`],
/// which opens the file named by the environment, waits for the agreed moment, and claims
/// `q` with two claimers in batches of 3 until fetches come back empty, acknowledging each
/// batch; then prints how many it claimed.
#[test]
#[ignore = "a claimer process of claimers_in_other_processes_share_the_window"]
fn claimer_process() {
    let (Ok(path), Ok(start)) = (std::env::var(CLAIMER_DB), std::env::var(CLAIMER_START)) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let claimed = runtime.block_on(async {
        let broker: Arc<dyn Broker> = Arc::new(SqliteBroker::open(&path).await.unwrap());
        tokio::time::sleep(until(start.parse().unwrap())).await;
        claim_concurrently(&[broker], "q", 2, 3).await.len()
    });
    println!("claimed={claimed}");
}

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// How long until `at` (ms since the epoch); nothing once it has passed.
fn until(at: u64) -> Duration {
    Duration::from_millis(at.saturating_sub(epoch_ms()))
}

/// A window whose bytes are not whole starts, and a limit out of range (written with the
/// table's checks off, as only another program could), each on a queue fetched with a
/// sound one: the claim takes every queue's jobs, the bad window as a fresh one and the
/// bad limit at the nearest in range, and writes both rows back as they were kept.
#[tokio::test(start_paused = true)]
async fn a_window_or_limit_no_broker_wrote_never_stops_a_claim() {
    let db = TempDb::new("rate_garbage");
    let broker = open_tokio(&db).await;
    broker
        .set_rate_limit("q", Some(limit(3, HOUR)))
        .await
        .unwrap();
    for queue in ["q", "other", "wide"] {
        let jobs: Vec<_> = (0..5)
            .map(|i| hopper_core::NewJob::json(queue, &i).unwrap())
            .collect();
        broker.enqueue(jobs).await.unwrap();
    }
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    raw.execute_batch(
        "UPDATE hopper_rate_limits SET starts = x'0102030405' WHERE queue = 'q';
         PRAGMA ignore_check_constraints = ON;
         INSERT INTO hopper_rate_limits (queue, max, per_ms) VALUES ('wide', 0, -1);",
    )
    .unwrap();
    drop(raw);

    let all = |limit| FetchRequest {
        budgets: ["q", "other", "wide"]
            .into_iter()
            .map(|queue| Budget {
                queue: queue.into(),
                limit,
            })
            .collect(),
        lease_ttl: Duration::from_secs(30),
    };
    let fetched = broker.fetch(all(10)).await.expect("the claim goes on");
    let of = |queue: &str| fetched.jobs.iter().filter(|j| j.queue == queue).count();
    assert_eq!(
        (of("q"), of("other"), of("wide")),
        (3, 5, 1),
        "q's window afresh, every job of other, wide at 1 per ms"
    );
    let t0 = broker
        .job(fetched.jobs[0].id)
        .await
        .unwrap()
        .unwrap()
        .started_at
        .expect("a claim stamps the start");

    let raw = rusqlite::Connection::open(db.path()).unwrap();
    let row = |queue: &str| -> (i64, i64, Vec<u8>) {
        raw.query_row(
            "SELECT max, per_ms, starts FROM hopper_rate_limits WHERE queue = ?1",
            [queue],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .unwrap()
    };
    let one_start = |n: u32| [t0.to_le_bytes().as_slice(), &n.to_le_bytes()].concat();
    assert_eq!(row("q"), (3, 3_600_000, one_start(3)), "rewritten whole");
    assert_eq!(
        row("wide"),
        (1, 1, one_start(1)),
        "kept in range, and so stored"
    );
    drop(raw);

    tokio::time::advance(Duration::from_millis(1)).await;
    let next = broker.fetch(all(10)).await.unwrap();
    let of = |queue: &str| next.jobs.iter().filter(|j| j.queue == queue).count();
    assert_eq!(
        (of("q"), of("wide")),
        (0, 1),
        "the windows hold from there on"
    );
    assert_eq!(
        next.next_due,
        Some(t0 + 2),
        "wide has room again 1 ms later"
    );
    let stats = broker.queue_stats("wide").await.unwrap();
    assert_eq!(stats.rate_limit, Some(limit(1, Duration::from_millis(1))));
}

/// A purge empties the queue but keeps its limit and window; the queue stays listed.
#[tokio::test(start_paused = true)]
async fn a_purge_keeps_the_limit() {
    let db = TempDb::new("rate_purge");
    let broker: Arc<dyn Broker> = Arc::new(open_tokio(&db).await);
    broker
        .set_rate_limit("q", Some(limit(2, HOUR)))
        .await
        .unwrap();
    enqueue_n(&broker, "q", 5).await;
    let first = broker
        .fetch(FetchRequest::one("q", 10, Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(first.jobs.len(), 2);
    assert_eq!(broker.purge("q").await.unwrap(), 5);
    assert_eq!(broker.queues().await.unwrap(), ["q"], "listed by its limit");
    let stats = broker.queue_stats("q").await.unwrap();
    assert_eq!(stats.rate_limit, Some(limit(2, HOUR)));
    enqueue_n(&broker, "q", 5).await;
    let after = broker
        .fetch(FetchRequest::one("q", 10, Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(after.jobs.len(), 0, "the window's starts outlive the purge");
    assert!(first.next_due.is_some(), "held back by the window");
    assert_eq!(after.next_due, first.next_due);
}
