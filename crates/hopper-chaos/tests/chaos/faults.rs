//! The server side fails while workers drain a backlog, and the workers must recover by
//! themselves (no restart): a private PostgreSQL cluster restarted with `-m immediate`,
//! the workers' PostgreSQL backends terminated, their MariaDB connections `KILL`ed, their
//! RabbitMQ connections closed, and the SQLite file write-locked by another connection for
//! three seconds. Only this test's own connections are touched on the shared servers.

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hopper_chaos::checker::check;
use hopper_chaos::fleet::Fleet;
use sqlx::Connection;

use super::support::{
    Kind, Target, distinct, mysql_url, next_run, pg_url, pick, rabbitmqctl, wait_runs,
};
use hopper_testkit::pg_cluster::Cluster;

const CONCURRENCY: usize = 8;
const WORKERS: usize = 2;
const LEASE_MS: u64 = 2_000;

/// Drains a backlog on `target` with [`WORKERS`] workers, calling `fault` at `faults`
/// random points; `fault` returns when the fault struck (a connection cut, the server
/// stopped, the lock taken), and returns once it is over. Recovery is the time from the
/// strike until the workers ran more jobs than they had logged by then plus all they could
/// have held: work from a claim made after the fault. The run count is sampled while the
/// fault runs, since the workers may be back before, say, `pg_ctl` returns.
async fn drain_with_faults(
    target: &Target,
    scenario: &str,
    faults: u32,
    job_ms: u64,
    mut fault: impl AsyncFnMut() -> Instant,
) {
    // Enough backlog that every fault strikes while work remains (asserted below).
    let jobs: u64 = pick(3_000, 6_000).max(u64::from(faults) * 600);
    target.enqueue(&target.connect().await, 0..jobs).await;
    let mut spec = target.spec(CONCURRENCY, job_ms);
    // Short leases, so that a settlement held up by a fault would let them run out and its
    // jobs run again if the worker stopped renewing them meanwhile (it did, until leases were
    // kept until their settlements were applied: 80–296 re-runs per MariaDB run).
    spec.lease_ms = LEASE_MS;
    let mut fleet = Fleet::start(spec, WORKERS, &target.dir);
    let deadline = Instant::now() + Duration::from_secs(pick(120, 900));
    let mut recovery: Option<Duration> = None;
    let mut bound = 0;
    // Evenly spaced over the first 60 %: each fault has the time to strike and recover.
    let points =
        (1..=u64::from(faults)).map(|k| (jobs * 60 / 100 * k / u64::from(faults + 1)) as usize);
    for point in points {
        wait_runs(&mut fleet, point, deadline, "the next fault point").await;
        let held = target.held(WORKERS, WORKERS, CONCURRENCY).await;
        bound += held;
        let before = fleet.runs().len();
        let done = Cell::new(false);
        let (struck, samples) = tokio::join!(
            async {
                let struck = fault().await;
                done.set(true);
                struck
            },
            async {
                let mut samples = Vec::new();
                while !done.get() {
                    samples.push((Instant::now(), fleet.runs().len()));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                samples
            },
        );
        let over = Instant::now();
        let at_strike = samples
            .iter()
            .rev()
            .find(|(t, _)| *t <= struck)
            .map_or(before, |s| s.1);
        let baseline = at_strike + held as usize;
        assert!(
            at_strike < jobs as usize,
            "{scenario}: the backlog was gone before the fault struck; give it more jobs"
        );
        let limit = Duration::from_secs(90);
        let resumed = match samples.iter().find(|(t, n)| *t > struck && *n > baseline) {
            Some((t, _)) => Some(*t),
            None => next_run(&mut fleet, baseline, jobs as usize, limit).await,
        };
        match resumed {
            Some(at) => {
                recovery = recovery.max(Some(at - struck));
                eprintln!(
                    "{scenario}: the fault lasted {} ms; work resumed {} ms after it struck",
                    (over - struck).as_millis(),
                    (at - struck).as_millis()
                );
            }
            None => {
                let seen = distinct(&fleet.runs());
                assert!(
                    seen >= jobs as usize,
                    "{scenario}: the workers did not recover within {limit:?} ({seen} of {jobs} ran)"
                );
                eprintln!(
                    "{scenario}: every job ran before work beyond the {held} held resumed \
                     ({at_strike} runs logged at the strike, {} now)",
                    fleet.runs().len()
                );
            }
        }
    }
    target
        .wait_drained(&mut fleet, jobs, Duration::from_secs(pick(120, 600)))
        .await;
    fleet.stop(Duration::from_secs(5));
    let mut report = check(
        scenario,
        target.kind.name(),
        jobs,
        &fleet.runs(),
        &target.end().await,
        faults,
        bound,
    );
    report.recovery = recovery;
    report.print();
    report.assert_sound();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_server_restarted_mid_drain() {
    let cluster = Arc::new(tokio::task::spawn_blocking(Cluster::start).await.unwrap());
    let target = Target::on(Kind::Postgres, cluster.url()).await;
    drain_with_faults(
        &target,
        "server restart (-m immediate)",
        pick(1, 5),
        20,
        async || {
            let c = cluster.clone();
            let struck = Instant::now();
            tokio::task::spawn_blocking(move || c.restart_immediate())
                .await
                .unwrap();
            struck
        },
    )
    .await;
    drop(target);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_backends_terminated() {
    let target = Target::new(Kind::Postgres).await;
    let app = target.tag.clone();
    drain_with_faults(
        &target,
        "pg_terminate_backend",
        pick(2, 20),
        20,
        async || {
            let mut c = sqlx::PgConnection::connect(&pg_url()).await.unwrap();
            let struck = Instant::now();
            let killed: i64 = sqlx::query_scalar(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) \
                 FROM pg_stat_activity WHERE application_name = $1",
            )
            .bind(&app)
            .fetch_one(&mut c)
            .await
            .expect("terminating the workers' backends");
            let _ = c.close().await;
            assert!(killed >= 1, "no backend named {app} to terminate");
            eprintln!("pg_terminate_backend: {killed} backends of {app}");
            struck
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_connections_killed() {
    let target = Target::new(Kind::Mysql).await;
    let db = target.tag.clone();
    drain_with_faults(&target, "KILL connection", pick(2, 20), 20, async || {
        let mut c = sqlx::MySqlConnection::connect(&mysql_url()).await.unwrap();
        let ids: Vec<u64> = sqlx::query_scalar(
            "SELECT CAST(ID AS UNSIGNED) FROM information_schema.PROCESSLIST \
             WHERE DB = ? AND ID <> CONNECTION_ID()",
        )
        .bind(&db)
        .fetch_all(&mut c)
        .await
        .expect("listing the workers' connections");
        assert!(!ids.is_empty(), "no connection on database {db} to kill");
        eprintln!("KILL: {} connections on {db}", ids.len());
        let struck = Instant::now();
        for id in ids {
            // A connection may have gone by itself meanwhile.
            let _ = sqlx::raw_sql(&format!("KILL {id}")).execute(&mut c).await;
        }
        let _ = c.close().await;
        struck
    })
    .await;
}

/// The server-side connections whose client properties carry `name` (the workers'
/// connection name): this test's own, no other's.
fn connections_named(name: &str) -> Result<Vec<String>, String> {
    let list = rabbitmqctl(&[
        "list_connections",
        "-q",
        "--no-table-headers",
        "pid",
        "client_properties",
    ])?;
    let quoted = format!("\"{name}\"");
    Ok(list
        .lines()
        .filter(|l| l.contains(&quoted))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_connections_closed() {
    if let Err(e) = rabbitmqctl(&["status", "-q"]) {
        eprintln!("skipped: rabbitmq_connections_closed: rabbitmqctl unusable here: {e}");
        return;
    }
    let target = Target::new(Kind::Amqp).await;
    let name = target.tag.clone();
    drain_with_faults(&target, "close_connection", pick(1, 10), 100, async || {
        let name = name.clone();
        let (closed, struck) = tokio::task::spawn_blocking(move || {
            // The workers may be between connections: look again for a few seconds.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let pids = connections_named(&name).expect("rabbitmqctl list_connections");
                if !pids.is_empty() || Instant::now() > deadline {
                    let struck = Instant::now();
                    for pid in &pids {
                        // One may have gone by itself meanwhile.
                        let _ = rabbitmqctl(&["close_connection", pid, "chaos test"]);
                    }
                    return (pids.len(), struck);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
        .await
        .unwrap();
        assert!(closed >= 1, "no connection named {} to close", target.tag);
        eprintln!(
            "close_connection: {closed} connections named {}",
            target.tag
        );
        struck
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_file_write_locked() {
    let target = Target::new(Kind::Sqlite).await;
    let file = target.dir.join("jobs.db");
    let hold = Duration::from_secs(3);
    drain_with_faults(
        &target,
        "BEGIN IMMEDIATE for 3 s",
        pick(1, 5),
        20,
        async || {
            let file = file.clone();
            tokio::task::spawn_blocking(move || {
                let conn = rusqlite::Connection::open(&file).expect("opening the broker's file");
                conn.busy_timeout(Duration::from_secs(10)).unwrap();
                conn.execute_batch("BEGIN IMMEDIATE")
                    .expect("taking the write lock");
                let struck = Instant::now();
                std::thread::sleep(hold);
                conn.execute_batch("COMMIT").expect("releasing the lock");
                struck
            })
            .await
            .unwrap()
        },
    )
    .await;
}
