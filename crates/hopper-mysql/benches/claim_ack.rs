//! Claim-then-ack throughput of one `MySqlBroker` (four connections, database clock, no
//! wake poller): a backlog enqueued in inserts of 1,000, then drained by `tasks`
//! concurrent loops that each fetch `batch` jobs and ack them in one settle. Prints jobs
//! per second for each shape; run with `cargo bench -p hopper-mysql`
//! (`HOPPER_BENCH_SHAPES=1x1,10x4` runs only those shapes, batch x tasks;
//! `HOPPER_BENCH_LIMITED=1` gives the queue a rate limit it never reaches, 100,000 a
//! millisecond, so that every claim takes the limited path). The server is
//! `HOPPER_BENCH_MYSQL_URL` (default `mysql://root@127.0.0.1:3306/test`); each shape runs
//! in a scratch database of its own, dropped afterwards.
//!
//! Figures on the 2-core development machine, MariaDB 10.11 on the same host with its
//! durable defaults (`innodb_flush_log_at_trx_commit = 1`), release build, two runs, in
//! jobs/s (enqueue ran at 55–75k jobs/s in inserts of 1,000):
//!
//! | batch | 1 task | 4 tasks |
//! |------:|-------:|--------:|
//! |     1 |    650 |     980 |
//! |    10 |  3,850 |   5,700 |
//! |    50 |  9,000 |  11–14.5k |
//! |   100 | 12,500 |  16–20k |
//!
//! Where the time goes (measured with a raw loop of the same statements): a round trip is
//! about 80 µs here and a commit that writes about 300 µs (the redo log is flushed), so a
//! fetch (BEGIN, locking select, UPDATE, COMMIT) plus an ack (BEGIN, DELETE, COMMIT) costs
//! about 1 ms before any row is touched. The server, not the client, is the bottleneck:
//! during a run mariadbd used over a core while the client used a tenth of one. The
//! largest single cost is the claim's locking select, 0.2 ms on a clean table but 0.8–1.2 ms
//! while a queue drains: every claim and ack leaves delete-marked entries at the head of
//! the ready index until InnoDB's purge removes them, and each claim walks them. Dropping
//! the `due` and `lease_id` indexes changed the figures by less than the noise.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hopper_core::rate::MAX_RATE;
use hopper_core::{Broker, FetchRequest, NewJob, RateLimit, Settlement};
use hopper_mysql::{MySqlBroker, MySqlOptions};
use sqlx::{Connection, MySqlConnection};

const SHAPES: [(usize, usize); 8] = [
    (1, 1),
    (1, 4),
    (10, 1),
    (10, 4),
    (50, 1),
    (50, 4),
    (100, 1),
    (100, 4),
];

fn server_url() -> String {
    std::env::var("HOPPER_BENCH_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

fn url_for(database: &str) -> String {
    let url = server_url();
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    format!("{scheme}://{}/{database}", &rest[..end])
}

async fn admin(sql: String) {
    let mut conn = MySqlConnection::connect(&server_url())
        .await
        .expect("connect to the server");
    sqlx::raw_sql(&sql)
        .execute(&mut conn)
        .await
        .expect("admin statement");
    let _ = conn.close().await;
}

/// Jobs per shape: enough for a couple of seconds of work at the expected rate.
fn backlog(batch: usize) -> usize {
    match batch {
        1 => 4_000,
        10 => 20_000,
        _ => 50_000,
    }
}

async fn drain(broker: Arc<dyn Broker>, batch: usize) -> usize {
    let mut done = 0;
    loop {
        let request = FetchRequest::one("bench", batch, Duration::from_secs(60));
        let fetched = broker.fetch(request).await.expect("fetch");
        if fetched.jobs.is_empty() {
            return done;
        }
        done += fetched.jobs.len();
        let acks = fetched.jobs.iter().map(Settlement::ack).collect();
        let report = broker.settle(acks).await.expect("settle");
        assert!(report.fenced.is_empty(), "acks fenced");
    }
}

/// The shapes to run: all of [`SHAPES`], or those `HOPPER_BENCH_SHAPES` names.
fn shapes() -> Vec<(usize, usize)> {
    let Ok(named) = std::env::var("HOPPER_BENCH_SHAPES") else {
        return SHAPES.to_vec();
    };
    named
        .split(',')
        .map(|shape| {
            let (batch, tasks) = shape
                .trim()
                .split_once('x')
                .expect("a shape as BATCHxTASKS");
            (
                batch.parse().expect("a batch size"),
                tasks.parse().expect("a number of tasks"),
            )
        })
        .collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let database = format!("hopper_bench_{}", std::process::id());
    let url = url_for(&database);
    for (batch, tasks) in shapes() {
        admin(format!("DROP DATABASE IF EXISTS {database}")).await;
        admin(format!("CREATE DATABASE {database}")).await;
        hopper_mysql::migrate(&url).await.expect("migrate");
        let options = MySqlOptions::default().wake_poll(None);
        let broker: Arc<dyn Broker> = Arc::new(
            MySqlBroker::connect_with(&url, options)
                .await
                .expect("connect"),
        );
        if std::env::var_os("HOPPER_BENCH_LIMITED").is_some() {
            let never = RateLimit::new(MAX_RATE, Duration::from_millis(1)).expect("a limit");
            broker
                .set_rate_limit("bench", Some(never))
                .await
                .expect("limit");
        }
        let jobs = backlog(batch);
        let started = Instant::now();
        for chunk in 0..jobs / 1_000 {
            let made = (0..1_000)
                .map(|i| NewJob::new("bench", ((chunk * 1_000 + i) as u64).to_le_bytes()))
                .collect();
            broker.enqueue(made).await.expect("enqueue");
        }
        let enqueue_rate = jobs as f64 / started.elapsed().as_secs_f64();

        let started = Instant::now();
        let loops: Vec<_> = (0..tasks)
            .map(|_| tokio::spawn(drain(broker.clone(), batch)))
            .collect();
        let mut done = 0;
        for task in loops {
            done += task.await.expect("drain task");
        }
        assert_eq!(done, jobs, "every job acked once");
        let rate = done as f64 / started.elapsed().as_secs_f64();
        let limited = match std::env::var_os("HOPPER_BENCH_LIMITED") {
            Some(_) => " (limited)",
            None => "",
        };
        println!(
            "batch {batch:>3} x {tasks} tasks{limited}: claim+ack {rate:>7.0} jobs/s \
             ({jobs} jobs; enqueue {enqueue_rate:.0} jobs/s)"
        );
        drop(broker);
    }
    admin(format!("DROP DATABASE IF EXISTS {database}")).await;
}
