//! A steady-rate run on PostgreSQL (a private cluster): a producer enqueues at a fixed rate
//! while two worker processes work the queue, and between intervals the workers' backends
//! are terminated, and every third interval the server is restarted (`-m immediate`).
//! Per interval it reports the jobs started, the throughput, the claim latency (enqueue to
//! handler start, p50, p99 and the longest, from the producer's clock and the run log's
//! stamps) and the job table's size and dead tuples, which show whether vacuum keeps up
//! with the churn. In the full form, no claim may wait a second in an interval without a
//! restart.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hopper_chaos::checker::{check, quantile, unix_micros};
use hopper_chaos::fleet::Fleet;
use sqlx::Connection;

use hopper_testkit::pg_cluster::Cluster;

use super::support::{Kind, Target, pick};

const CONCURRENCY: usize = 8;
const WORKERS: usize = 2;
/// Jobs per second the producer enqueues.
const RATE: u64 = 200;
/// Jobs per enqueue call: one call every `PER_CALL / RATE` seconds.
const PER_CALL: u64 = 10;

/// The job table's total size in bytes and its dead tuples, as the statistics report them.
async fn table_figures(server: &str, schema: &str) -> (i64, i64) {
    let mut c = sqlx::PgConnection::connect(server).await.unwrap();
    let row: (i64, i64) = sqlx::query_as(
        "SELECT pg_total_relation_size(relid), n_dead_tup FROM pg_stat_user_tables \
         WHERE schemaname = $1 AND relname = 'hopper_jobs'",
    )
    .bind(schema)
    .fetch_one(&mut c)
    .await
    .expect("the job table's statistics");
    let _ = c.close().await;
    row
}

async fn terminate_backends(server: &str, app: &str) -> i64 {
    let mut c = sqlx::PgConnection::connect(server).await.unwrap();
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) \
         FROM pg_stat_activity WHERE application_name = $1",
    )
    .bind(app)
    .fetch_one(&mut c)
    .await
    .expect("terminating the workers' backends");
    let _ = c.close().await;
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_steady_rate_with_backends_terminated_and_restarts() {
    let run_for = Duration::from_secs(pick(30, 600));
    let interval = Duration::from_secs(pick(5, 30));
    let intervals = (run_for.as_secs() / interval.as_secs()) as usize;
    let jobs = RATE * run_for.as_secs();
    let cluster = Arc::new(tokio::task::spawn_blocking(Cluster::start).await.unwrap());
    let server = cluster.url();
    let target = Target::on(Kind::Postgres, server.clone()).await;
    let mut fleet = Fleet::start(target.spec(CONCURRENCY, 2), WORKERS, &target.dir);

    // When each id was enqueued (µs since the epoch), written by the producer.
    let enqueued_at = Arc::new(Mutex::new(vec![0u64; jobs as usize]));
    let t0 = unix_micros(SystemTime::now());
    let started = Instant::now();
    let resent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let producer = {
        let (broker, stamps) = (target.connect().await, enqueued_at.clone());
        let resent = resent.clone();
        let target_queue = target.queue.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1000 * PER_CALL / RATE));
            for first in (0..jobs).step_by(PER_CALL as usize) {
                tick.tick().await;
                let ids = first..(first + PER_CALL).min(jobs);
                let now = unix_micros(SystemTime::now());
                let batch: Vec<hopper::NewJob> = ids
                    .clone()
                    .map(|i| hopper::NewJob::json(&target_queue, &i).unwrap())
                    .collect();
                // Refused while the server restarts: sent again until it is back. One that
                // failed after its commit is enqueued twice (counted in the bound).
                let mut tries = 0;
                while let Err(e) = broker.enqueue(batch.clone()).await {
                    tries += 1;
                    assert!(tries < 300, "enqueue failing for 30 s: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                if tries > 0 {
                    resent.fetch_add(PER_CALL, std::sync::atomic::Ordering::Relaxed);
                }
                let mut s = stamps.lock().unwrap();
                for i in ids {
                    s[i as usize] = now;
                }
            }
        })
    };

    let mut samples = Vec::new();
    let mut faults = 0u32;
    let mut bound = 0;
    // The intervals whose end saw a restart: the one after it starts with the server down.
    let mut restarted = Vec::new();
    for k in 1..=intervals {
        let until = started + interval * k as u32;
        while Instant::now() < until {
            fleet.assert_alive();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        samples.push(table_figures(&server, &target.tag).await);
        if k < intervals {
            bound += target.held(WORKERS, WORKERS, CONCURRENCY).await;
            if k % 3 == 0 {
                let c = cluster.clone();
                tokio::task::spawn_blocking(move || c.restart_immediate())
                    .await
                    .unwrap();
                restarted.push(k);
            } else {
                assert!(
                    terminate_backends(&server, &target.tag).await >= 1,
                    "no backend to terminate"
                );
            }
            faults += 1;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !producer.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the producer fell 60 s behind its rate"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    producer.await.unwrap();
    target
        .wait_drained(&mut fleet, jobs, Duration::from_secs(120))
        .await;
    fleet.stop(Duration::from_secs(5));
    let runs = fleet.runs();

    let stamps = enqueued_at.lock().unwrap().clone();
    eprintln!(
        "steady run, PostgreSQL, {RATE} jobs/s for {} s; every {} s backends terminated, \
         every third time the server restarted instead\n\
         | interval | started | jobs/s | claim p50 | claim p99 | longest | table size | dead tuples |\n\
         |---|---|---|---|---|---|---|---|",
        run_for.as_secs(),
        interval.as_secs()
    );
    let mut stalls = Vec::new();
    let width = interval.as_micros() as u64;
    for (k, (size, dead)) in samples.iter().enumerate() {
        let (from, to) = (t0 + k as u64 * width, t0 + (k as u64 + 1) * width);
        let mut claims: Vec<u64> = runs
            .iter()
            .filter(|r| (from..to).contains(&r.at_micros))
            .map(|r| r.at_micros.saturating_sub(stamps[r.id as usize]))
            .collect();
        claims.sort_unstable();
        let ms =
            |q| quantile(&claims, q).map_or("-".into(), |us| format!("{:.1} ms", us as f64 / 1e3));
        let after_restart = k > 0 && restarted.contains(&k);
        eprintln!(
            "| {k}{} | {} | {:.0} | {} | {} | {} | {} KiB | {dead} |",
            if after_restart { " (restart)" } else { "" },
            claims.len(),
            claims.len() as f64 / interval.as_secs_f64(),
            ms(0.5),
            ms(0.99),
            ms(1.0),
            size / 1024
        );
        let longest = claims.last().copied().unwrap_or(0);
        if !after_restart && longest >= 1_000_000 {
            stalls.push((k, longest));
        }
    }
    bound += resent.load(std::sync::atomic::Ordering::Relaxed);
    let mut report = check(
        format!("steady {RATE}/s, pg_terminate_backend and restarts"),
        Kind::Postgres.name(),
        jobs,
        &runs,
        &target.end().await,
        faults,
        bound,
    );
    report.recovery = None;
    report.print();
    report.assert_sound();
    // Asserted in the full form only, which runs alone: the bounded form shares two cores
    // with the other scenarios' worker processes, which may hold a claim back that long.
    if pick(false, true) {
        assert!(
            stalls.is_empty(),
            "claims waited a second or more (interval, µs): {stalls:?}"
        );
    } else if !stalls.is_empty() {
        eprintln!("claims that waited a second or more (interval, µs): {stalls:?}");
    }
    drop(target);
}
