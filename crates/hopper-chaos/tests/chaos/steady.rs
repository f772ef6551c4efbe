//! A steady-rate run on PostgreSQL: a producer enqueues at a fixed rate while two worker
//! processes work the queue, and between intervals the workers' backends are terminated.
//! Per interval it reports the jobs started, the throughput, the claim latency (enqueue to
//! handler start, p50 and p99, from the producer's clock and the run log's stamps) and the
//! job table's size and dead tuples, which show whether vacuum keeps up with the churn.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hopper_chaos::checker::{check, quantile, unix_micros};
use hopper_chaos::fleet::Fleet;
use sqlx::Connection;

use super::support::{Kind, Target, pg_url, pick};

const CONCURRENCY: usize = 8;
const WORKERS: usize = 2;
/// Jobs per second the producer enqueues.
const RATE: u64 = 200;
/// Jobs per enqueue call: one call every `PER_CALL / RATE` seconds.
const PER_CALL: u64 = 10;

/// The job table's total size in bytes and its dead tuples, as the statistics report them.
async fn table_figures(schema: &str) -> (i64, i64) {
    let mut c = sqlx::PgConnection::connect(&pg_url()).await.unwrap();
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

async fn terminate_backends(app: &str) -> i64 {
    let mut c = sqlx::PgConnection::connect(&pg_url()).await.unwrap();
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
async fn postgres_steady_rate_with_backends_terminated() {
    let run_for = Duration::from_secs(pick(20, 600));
    let interval = Duration::from_secs(pick(5, 30));
    let intervals = (run_for.as_secs() / interval.as_secs()) as usize;
    let jobs = RATE * run_for.as_secs();
    let target = Target::new(Kind::Postgres).await;
    let mut fleet = Fleet::start(target.spec(CONCURRENCY, 2), WORKERS, &target.dir);

    // When each id was enqueued (µs since the epoch), written by the producer.
    let enqueued_at = Arc::new(Mutex::new(vec![0u64; jobs as usize]));
    let t0 = unix_micros(SystemTime::now());
    let started = Instant::now();
    let producer = {
        let (broker, stamps) = (target.connect().await, enqueued_at.clone());
        let target_queue = target.queue.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1000 * PER_CALL / RATE));
            for first in (0..jobs).step_by(PER_CALL as usize) {
                tick.tick().await;
                let ids = first..(first + PER_CALL).min(jobs);
                let now = unix_micros(SystemTime::now());
                let batch = ids
                    .clone()
                    .map(|i| hopper::NewJob::json(&target_queue, &i).unwrap())
                    .collect();
                broker.enqueue(batch).await.expect("enqueue");
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
    for k in 1..=intervals {
        let until = started + interval * k as u32;
        while Instant::now() < until {
            fleet.assert_alive();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        samples.push(table_figures(&target.tag).await);
        if k < intervals {
            bound += target.held(WORKERS, WORKERS, CONCURRENCY).await;
            assert!(
                terminate_backends(&target.tag).await >= 1,
                "no backend to terminate"
            );
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
        "steady run, PostgreSQL, {RATE} jobs/s for {} s, backends terminated every {} s\n\
         | interval | started | jobs/s | claim p50 | claim p99 | table size | dead tuples |\n\
         |---|---|---|---|---|---|---|",
        run_for.as_secs(),
        interval.as_secs()
    );
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
        eprintln!(
            "| {k} | {} | {:.0} | {} | {} | {} KiB | {dead} |",
            claims.len(),
            claims.len() as f64 / interval.as_secs_f64(),
            ms(0.5),
            ms(0.99),
            size / 1024
        );
    }
    let mut report = check(
        format!("steady {RATE}/s, pg_terminate_backend"),
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
}
