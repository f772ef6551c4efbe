//! Per-test targets: a broker store of the test's own (an SQLite file, a PostgreSQL schema,
//! a MariaDB database, RabbitMQ queues) removed when the test ends, the URL its workers
//! use, and waits with deadlines.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hopper::{Broker, NewJob};
use hopper_chaos::checker::{BrokerEnd, RunLine, window};
use hopper_chaos::fleet::{Fleet, WorkerSpec};
use hopper_testkit::unique_name;
use sqlx::Connection;

/// The worker binary cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_chaos-worker");

/// Whether the full form runs (`HOPPER_CHAOS_FULL=1`).
pub fn full() -> bool {
    std::env::var("HOPPER_CHAOS_FULL").is_ok_and(|v| v == "1")
}

/// `bounded` normally, `full` under `HOPPER_CHAOS_FULL=1`.
pub fn pick<T>(bounded: T, full_form: T) -> T {
    if full() { full_form } else { bounded }
}

pub fn pg_url() -> String {
    std::env::var("HOPPER_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

pub fn mysql_url() -> String {
    std::env::var("HOPPER_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

/// `url` with `key=value` added to its query.
pub fn with_param(url: &str, key: &str, value: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{key}={value}")
}

/// `url` with its database (path) replaced by `database`, query kept.
fn with_database(url: &str, database: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let query = rest[end..].find('?').map_or("", |i| &rest[end + i..]);
    format!("{scheme}://{}/{database}{query}", &rest[..end])
}

/// `host:port` of `url`.
pub fn authority(url: &str) -> String {
    let rest = url.split_once("://").expect("a URL with a scheme").1;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let hostport = &rest[..end];
    hostport
        .rsplit_once('@')
        .map_or(hostport, |(_, h)| h)
        .to_owned()
}

/// Runs `f` on a thread of its own with a runtime of its own: cleanup from a destructor.
/// The future is made on that thread, so it need not be `Send`.
fn on_own_runtime<F: std::future::Future<Output = ()>>(f: impl FnOnce() -> F + Send + 'static) {
    let _ = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for cleanup")
            .block_on(f());
    })
    .join();
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
    Mysql,
    Amqp,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Sqlite => "SQLite",
            Kind::Postgres => "PostgreSQL",
            Kind::Mysql => "MariaDB",
            Kind::Amqp => "RabbitMQ",
        }
    }
}

/// One test's store, queue and log directory; removed on drop.
pub struct Target {
    pub kind: Kind,
    /// The server's URL, without this test's schema or database.
    pub base: String,
    /// The URL enqueues and counts use.
    pub url: String,
    /// The URL workers use: on PostgreSQL it carries `application_name=<tag>`.
    pub worker_url: String,
    pub queue: String,
    /// Names this test's own connections: PostgreSQL application name, MariaDB
    /// database, RabbitMQ connection name.
    pub tag: String,
    /// Run logs (and the SQLite file).
    pub dir: PathBuf,
}

impl Target {
    pub async fn new(kind: Kind) -> Target {
        let base = match kind {
            Kind::Postgres => pg_url(),
            Kind::Mysql => mysql_url(),
            Kind::Amqp => hopper_testkit::helpers::amqp_url(),
            Kind::Sqlite => String::new(),
        };
        Target::on(kind, base).await
    }

    /// A target on the server `base` names (a private cluster, say).
    pub async fn on(kind: Kind, base: String) -> Target {
        let dir = std::env::temp_dir().join(unique_name("hopper_chaos"));
        std::fs::create_dir_all(&dir).expect("a temp dir for the run logs");
        let tag = unique_name("hopper_chaos");
        let (url, worker_url, queue) = match kind {
            Kind::Sqlite => {
                let url = format!("sqlite://{}", dir.join("jobs.db").display());
                (url.clone(), url, "q".to_owned())
            }
            Kind::Postgres => {
                let url = with_param(&base, "schema", &tag);
                let worker = with_param(&url, "application_name", &tag);
                (url, worker, "q".to_owned())
            }
            Kind::Mysql => {
                mysql_admin(&base, &format!("CREATE DATABASE {tag}")).await;
                let url = with_database(&base, &tag);
                (url.clone(), url, "q".to_owned())
            }
            Kind::Amqp => {
                let url = with_param(&base, "declare", "true");
                (url.clone(), url, tag.clone())
            }
        };
        let target = Target {
            kind,
            base,
            url,
            worker_url,
            queue,
            tag,
            dir,
        };
        hopper::migrate(&target.url)
            .await
            .unwrap_or_else(|e| panic!("migrating {}: {e}", target.kind.name()));
        target
    }

    /// A new broker connection, as a separate producer would open (dropped after use, so
    /// no producer connection is around when the test kills connections).
    pub async fn connect(&self) -> Arc<dyn Broker> {
        hopper::connect(&self.url)
            .await
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.kind.name()))
    }

    /// Enqueues jobs with ids `ids` on the test's queue, a thousand per call.
    pub async fn enqueue(&self, broker: &Arc<dyn Broker>, ids: std::ops::Range<u64>) {
        let all: Vec<u64> = ids.collect();
        for chunk in all.chunks(1000) {
            let jobs = chunk
                .iter()
                .map(|i| NewJob::json(&self.queue, i).unwrap())
                .collect();
            broker.enqueue(jobs).await.expect("enqueue");
        }
    }

    /// A worker spec on this target: `concurrency` handlers of `job_ms` each.
    pub fn spec(&self, concurrency: usize, job_ms: u64) -> WorkerSpec {
        let mut spec = WorkerSpec::new(BIN, &self.worker_url, &self.queue, concurrency);
        spec.job_ms = job_ms;
        if self.kind == Kind::Amqp {
            spec.name = Some(self.tag.clone());
        }
        spec
    }

    /// What a fault at this moment can make run again (see `hopper_chaos::checker`): on
    /// the SQL brokers every lease the broker holds plus `slack` windows (jobs claimed
    /// between this reading and the fault); on RabbitMQ a window for each of the
    /// `connections` a fault cuts.
    pub async fn held(&self, connections: usize, slack: usize, concurrency: usize) -> u64 {
        if self.kind == Kind::Amqp {
            return connections as u64 * window(concurrency);
        }
        let counts = self.connect().await.counts(&self.queue).await;
        let leased = counts.expect("counts").leased;
        leased + slack as u64 * window(concurrency)
    }

    /// What the broker still holds, and its dead letters.
    pub async fn end(&self) -> BrokerEnd {
        let broker = self.connect().await;
        let c = broker.counts(&self.queue).await.expect("counts");
        let mut left = c.pending + c.scheduled + c.leased;
        if self.kind == Kind::Amqp {
            // Deliveries unacknowledged by any connection (counts sees only its own).
            let queue = self.queue.clone();
            let figures = tokio::task::spawn_blocking(move || rabbit_queue(&queue))
                .await
                .unwrap();
            left += figures.map_or(0, |(_, unacked)| unacked);
        }
        let dead_ids = broker
            .dead_letters(&self.queue, 1_000_000)
            .await
            .ok()
            .map(|records| {
                records
                    .iter()
                    .filter_map(|r| serde_json::from_slice::<u64>(&r.job.payload).ok())
                    .collect()
            });
        BrokerEnd {
            left,
            dead_ids,
            dead: c.dead,
        }
    }

    /// Waits until every id of `0..jobs` ran and the broker holds nothing more; returns
    /// how long that took.
    pub async fn wait_drained(&self, fleet: &mut Fleet, jobs: u64, limit: Duration) {
        let deadline = Instant::now() + limit;
        wait_runs(fleet, jobs as usize, deadline, "every job to run").await;
        loop {
            let end = self.end().await;
            if end.left == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}: every job ran but {} are still in the broker after {limit:?}",
                self.kind.name(),
                end.left
            );
            fleet.assert_alive();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Distinct ids among `runs`.
pub fn distinct(runs: &[RunLine]) -> usize {
    runs.iter().map(|r| r.id).collect::<BTreeSet<_>>().len()
}

/// Waits until the fleet has run `n` distinct ids, or panics at `deadline`.
pub async fn wait_runs(fleet: &mut Fleet, n: usize, deadline: Instant, what: &str) {
    loop {
        let seen = distinct(&fleet.runs());
        if seen >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {seen} of {n} distinct ids ran"
        );
        fleet.assert_alive();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the fleet logged more than `before` lines in all; returns when, or `None`
/// if every one of `jobs` ids ran first (nothing left to run) or `limit` passed.
pub async fn next_run(
    fleet: &mut Fleet,
    before: usize,
    jobs: usize,
    limit: Duration,
) -> Option<Instant> {
    let deadline = Instant::now() + limit;
    loop {
        let runs = fleet.runs();
        if runs.len() > before {
            return Some(Instant::now());
        }
        if distinct(&runs) >= jobs || Instant::now() >= deadline {
            return None;
        }
        fleet.assert_alive();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `count` progress points (distinct ids run) spread at random over 5 to `upto` % of
/// `jobs`, leaving a backlog to show the recovery on.
pub fn fault_points(jobs: u64, count: u32, upto: u64) -> Vec<usize> {
    let mut p: Vec<usize> = (0..count)
        .map(|_| (jobs * fastrand::u64(5..upto) / 100) as usize)
        .collect();
    p.sort_unstable();
    p
}

impl Drop for Target {
    fn drop(&mut self) {
        let (kind, tag, queue) = (self.kind, self.tag.clone(), self.queue.clone());
        let base = self.base.clone();
        on_own_runtime(move || async move {
            match kind {
                Kind::Sqlite => {}
                Kind::Postgres => {
                    if let Ok(mut c) = sqlx::PgConnection::connect(&base).await {
                        let sql = format!("DROP SCHEMA IF EXISTS {tag} CASCADE");
                        let _ = sqlx::raw_sql(&sql).execute(&mut c).await;
                        let _ = c.close().await;
                    }
                }
                Kind::Mysql => {
                    mysql_admin(&base, &format!("DROP DATABASE IF EXISTS {tag}")).await;
                }
                Kind::Amqp => {
                    let mut queues = vec![queue.clone(), hopper_amqp::topology::dead_queue(&queue)];
                    queues.extend(
                        hopper_amqp::topology::RETRY_BUCKETS_MS
                            .iter()
                            .map(|&ms| hopper_amqp::topology::retry_queue(&queue, ms)),
                    );
                    if let Ok(b) = hopper::AmqpBroker::connect(&base).await {
                        if let Err(e) = b.delete_queues(&queues).await {
                            eprintln!("cleanup: deleting {queues:?}: {e}");
                        }
                        b.close().await;
                    }
                }
            }
        });
        if std::env::var_os("HOPPER_CHAOS_KEEP").is_some() {
            eprintln!("kept the run logs in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Runs one statement on the MariaDB server `url` names.
pub async fn mysql_admin(url: &str, sql: &str) {
    let mut conn = sqlx::MySqlConnection::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connecting to MariaDB: {e}"));
    sqlx::raw_sql(sql)
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let _ = conn.close().await;
}

/// Runs `rabbitmqctl` with `args`, returning its standard output.
pub fn rabbitmqctl(args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new("rabbitmqctl")
        .args(args)
        .output()
        .map_err(|e| format!("rabbitmqctl not runnable: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `(ready, unacknowledged)` of `queue` as the server reports them.
fn rabbit_queue(queue: &str) -> Option<(u64, u64)> {
    let out = rabbitmqctl(&[
        "list_queues",
        "-q",
        "--no-table-headers",
        "name",
        "messages_ready",
        "messages_unacknowledged",
    ])
    .ok()?;
    out.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() == 3 && f[0] == queue).then(|| Some((f[1].parse().ok()?, f[2].parse().ok()?)))?
    })
}
