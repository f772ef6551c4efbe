//! `hopper bench`: the performance matrix of BENCHMARKS.md in one run, one table.
//!
//! Each workload pairs a raw baseline with Hopper on the same broker and the same batch
//! size, in the same invocation, so the ratio measures Hopper's overhead and little else:
//! - **Raw baselines** run in this process. For a broker that is one task calling the
//!   broker's own `fetch` and then `settle` (acks) in a loop: the same driver, the same
//!   statements and the same connections Hopper uses, with no worker runtime around them.
//!   For the memory broker it is a tokio mpsc channel, one producer and one consumer. For
//!   RabbitMQ it is a plain lapin consumer with the same window, run twice: acking each
//!   delivery, and with grouped acks (`multiple`, whenever half the window awaits its
//!   ack, which is how Hopper acks on a pushed broker); the ratio is against the grouped
//!   run, the same ack mode.
//! - **Hopper** runs as a child process, `hopper load --json`, so that the peak RSS it
//!   reports is its own, not this process's.
//! - **Idle latency** runs in this process: a worker at concurrency 1 waits on an empty
//!   queue; one job is enqueued at a time, and the time from the enqueue's return (the
//!   commit) to the handler's start is recorded.
//! - **Idle round trips** (PostgreSQL, MySQL): what a worker waiting on an empty queue asks
//!   of the server in 10 s, as the server counts it, in a database of its own.
//!
//! SQL workloads run in scratch schemas (PostgreSQL; databases for the idle rows) or
//! databases (MySQL) created for the run and dropped afterwards; SQLite in a temporary file.

use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use hopper::broker::{FetchRequest, Settlement};
use hopper::{Error, JobContext, NewJob, QueueOptions, Result, Worker};
use hopper_bench::load::{ENQUEUE_CHUNK, Report, micros_now};
use hopper_bench::measure::{
    context_switches, cpu_us_per, percentile, process_cpu_s, switches_per,
};
use serde::Serialize;
use sqlx::Connection;

/// What `--only` accepts.
const WORKLOADS: [&str; 8] = [
    "memory", "sqlite", "postgres", "mysql", "amqp", "latency", "idle", "rss",
];

/// Samples of the idle latency.
const LATENCY_SAMPLES: usize = 200;
/// Samples taken first and not counted: they warm connections and statement caches.
const LATENCY_WARMUP: usize = 5;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Workloads to run, comma-separated: memory, sqlite, postgres, mysql, amqp, latency,
    /// idle, rss.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "memory,sqlite,postgres,mysql,amqp,latency,idle,rss"
    )]
    only: Vec<String>,
    /// The PostgreSQL server; each run uses a scratch schema of its own (the idle rows a
    /// scratch database).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/test")]
    postgres: String,
    /// The MySQL / MariaDB server; each run uses a scratch database of its own.
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306/test")]
    mysql: String,
    /// The RabbitMQ server; each run uses queues of its own, deleted afterwards.
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    amqp: String,
    /// Multiplies every job count (0.1 for a quick look; figures need the default).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// The RabbitMQ windows to run with `amqp`, comma-separated. Windows 1 and 10 drain
    /// 20,000 and 50,000 messages, any other 100,000 (before `--scale`).
    #[arg(long, value_delimiter = ',', default_value = "1,10,100,1000",
          value_parser = clap::value_parser!(u16).range(1..))]
    amqp_windows: Vec<u16>,
    /// Interleaved rounds of the memory and RabbitMQ rows, whose medians are kept; the SQL
    /// rows run at most three. Nine by default: at windows 100 and 1000 one round's ratio
    /// moves by ±5% with the server, which a median of five does not narrow enough to tell
    /// a ratio of 0.98 from one of 0.96.
    #[arg(long, default_value_t = 9, value_parser = clap::value_parser!(u16).range(1..))]
    rounds: u16,
    /// Print one JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

/// One line of the table.
#[derive(Debug, Default, Serialize)]
struct Row {
    workload: String,
    jobs: usize,
    raw_per_s: Option<f64>,
    hopper_per_s: Option<f64>,
    ratio: Option<f64>,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    fetches_per_1k: Option<f64>,
    settles_per_1k: Option<f64>,
    peak_rss_mib: Option<f64>,
    /// CPU time of Hopper's process per job during the drain, in microseconds.
    cpu_us_per_job: Option<f64>,
    /// Context switches of Hopper's process's threads per job during the drain.
    switches_per_job: Option<f64>,
    /// An idle worker's statements (MySQL) or transactions (PostgreSQL) a second, as the
    /// server counts them.
    idle_per_s: Option<f64>,
    note: String,
}

pub async fn run(args: BenchArgs) -> Result<ExitCode> {
    for w in &args.only {
        if !WORKLOADS.contains(&w.as_str()) {
            return Err(hopper::ConfigError::new("--only", w, WORKLOADS.join(", ")).into());
        }
    }
    if !(args.scale > 0.0 && args.scale <= 10.0) {
        return Err(hopper::ConfigError::new("--scale", args.scale, "above 0, at most 10").into());
    }
    let wants = |w: &str| args.only.iter().any(|o| o == w);
    let n = |jobs: usize| ((jobs as f64 * args.scale) as usize).max(1000);
    let rounds = usize::from(args.rounds);
    let dir = std::env::temp_dir().join(format!("hopper-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::broker_msg(format!("{}: {e}", dir.display())))?;
    let mut rows = Vec::new();

    if wants("memory") {
        let jobs = n(1_000_000);
        // The memory broker's own default window (two hand-offs per slot), not `slots`;
        // once with the default max_batch (50), once with fetches of 256, which an
        // in-process broker can afford (a fetch is a mutex, not a round trip).
        let workloads = [
            (50, "memory drain, c=8"),
            (256, "memory drain, c=8, max_batch 256"),
        ];
        // Interleaved rounds, medians kept: about one drain in six runs at half the rate
        // of its neighbours, and the mpsc loop moves by a third from one run to the next.
        let mut raw = Vec::new();
        let mut hopper: Vec<Vec<Row>> = workloads.iter().map(|_| Vec::new()).collect();
        for _ in 0..rounds {
            raw.push(raw_mpsc(jobs).await);
            for ((max_batch, workload), runs) in workloads.iter().zip(&mut hopper) {
                let (row, _) =
                    hopper_load_with("memory://", jobs, 8, *max_batch, workload, &[]).await?;
                runs.push(row);
            }
        }
        let raw = median(&mut raw);
        for runs in hopper {
            let mut row = median_row(runs);
            row.raw_per_s = Some(raw);
            row.note = format!(
                "median of {rounds} interleaved rounds; raw: tokio mpsc, 1 producer 1 consumer"
            );
            rows.push(finish(row));
        }
    }
    // The SQL rows: up to three interleaved rounds each, the drains lasting seconds.
    let sql_rounds = rounds.min(SQL_ROUNDS);
    if wants("sqlite") {
        let jobs = n(200_000);
        for batch in [100, 10] {
            // A file per run, so that no run inherits another's free pages or WAL.
            let file = |what: &str, round: usize| {
                format!("sqlite://{}/{what}-{batch}-{round}.db", dir.display())
            };
            let workload = format!("sqlite drain, batch {batch}");
            let row = paired_rounds(
                sql_rounds,
                false,
                async |round| raw_broker_loop(&file("raw", round), n(100_000), batch).await,
                async |round| {
                    hopper_load(&file("hopper", round), jobs, batch, batch, &workload).await
                },
            )
            .await?;
            rows.push(row);
        }
    }
    for (name, server, jobs, batches) in [
        ("postgres", &args.postgres, n(100_000), &[100, 50, 10][..]),
        ("mysql", &args.mysql, n(50_000), &[100, 10][..]),
    ] {
        if wants(name) {
            for &batch in batches {
                rows.push(sql_drain(name, server, jobs, batch, sql_rounds).await?);
            }
        }
    }
    if wants("amqp") {
        // Each drain lasts seconds, so it spans the server's fast and slow modes rather
        // than falling in one. At windows 100 and 1000 the raw rounds of 20,000 messages
        // (drains of about half a second) ran at 28–85k msgs/s, four of 22 above 63k;
        // those of 100,000 (about three seconds) at 31–43k, 14 rounds (1 December).
        for &window in &args.amqp_windows {
            let jobs = match window {
                1 => 20_000,
                10 => 50_000,
                _ => 100_000,
            };
            rows.push(amqp_row(&args.amqp, n(jobs), window, rounds).await?);
        }
    }
    if wants("latency") {
        rows.push(idle_latency("memory://", "memory").await?);
        let url = format!("sqlite://{}/latency.db", dir.display());
        rows.push(idle_latency(&url, "sqlite").await?);
        rows.push(pg_idle_latency(&args.postgres).await?);
    }
    if wants("idle") {
        let watch = IDLE_WATCHED.mul_f64(args.scale).max(IDLE_WATCHED_MIN);
        rows.push(idle_round_trips("postgres", &args.postgres, watch).await?);
        rows.push(idle_round_trips("mysql", &args.mysql, watch).await?);
    }
    if wants("rss") {
        let url = format!("sqlite://{}/rss.db", dir.display());
        let (mut row, _) = hopper_load(
            &url,
            n(1_000_000),
            50,
            50,
            "sqlite 1,000,000-job backlog, c=50",
        )
        .await?;
        row.note = "peak RSS of the draining process".into();
        rows.push(row);
    }
    let _ = std::fs::remove_dir_all(&dir);

    if args.json {
        println!(
            "{}",
            serde_json::to_string(&rows).map_err(|e| Error::Encode(e.to_string()))?
        );
    } else {
        print_table(&rows);
    }
    Ok(ExitCode::SUCCESS)
}

fn finish(mut row: Row) -> Row {
    if let (Some(raw), Some(h)) = (row.raw_per_s, row.hopper_per_s) {
        row.ratio = Some(h / raw);
    }
    row
}

/// One producer and one consumer over a bounded tokio mpsc channel.
async fn raw_mpsc(n: usize) -> f64 {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<u64>(1024);
    let started = Instant::now();
    let producer = tokio::spawn(async move {
        for i in 0..n as u64 {
            if tx.send(i).await.is_err() {
                break;
            }
        }
    });
    let mut sum = 0u64;
    let mut got = 0usize;
    while let Some(v) = rx.recv().await {
        sum = sum.wrapping_add(v);
        got += 1;
    }
    let _ = producer.await;
    let rate = got as f64 / started.elapsed().as_secs_f64();
    std::hint::black_box(sum);
    rate
}

/// A SQL server's drain at one batch size: the raw loop and then Hopper, each in a scratch
/// schema or database of its own.
async fn sql_drain(
    name: &str,
    server: &str,
    jobs: usize,
    batch: usize,
    rounds: usize,
) -> Result<Row> {
    let workload = format!("{name} drain, batch {batch}");
    paired_rounds(
        rounds,
        true,
        async |_| Scratch::run(server, async |s| raw_broker_loop(&s.url, jobs, batch).await).await,
        async |_| {
            Scratch::run(server, async |s| {
                hopper_load(&s.url, jobs, batch, batch, &workload).await
            })
            .await
        },
    )
    .await
}

/// Rounds of the SQL rows: each drain lasts seconds, and a PostgreSQL or MySQL round of all
/// its batch sizes most of a minute.
const SQL_ROUNDS: usize = 3;

/// `rounds` interleaved runs of the raw broker loop and of `hopper load` (each given its
/// round): the median Hopper run beside the median raw rate, the ratio the median of each
/// round's (see [`paired_ratio`]). The note names the rounds when there are several and,
/// with `show_enqueue`, gives the median enqueue rate.
async fn paired_rounds(
    rounds: usize,
    show_enqueue: bool,
    mut raw: impl AsyncFnMut(usize) -> Result<f64>,
    mut hopper: impl AsyncFnMut(usize) -> Result<(Row, f64)>,
) -> Result<Row> {
    let (mut raws, mut runs, mut enqueues) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        raws.push(raw(round).await?);
        let (row, enqueue) = hopper(round).await?;
        runs.push(row);
        enqueues.push(enqueue);
    }
    let ratio = paired_ratio(&runs, &raws);
    let mut row = median_row(runs);
    row.raw_per_s = Some(median(&mut raws));
    row.ratio = Some(ratio);
    let rounds = match rounds {
        1 => String::new(),
        n => format!("medians of {n} interleaved rounds, ratio the median of each round's; "),
    };
    let enqueue = if show_enqueue {
        format!("; enqueue {:.0}/s", median(&mut enqueues))
    } else {
        String::new()
    };
    row.note = format!("{rounds}raw: broker fetch+settle loop{enqueue}");
    Ok(row)
}

/// Fills a queue, then drains it with one loop of `fetch(batch)` and `settle` (acks).
async fn raw_broker_loop(url: &str, jobs: usize, batch: usize) -> Result<f64> {
    hopper::migrate(url).await?;
    let broker = hopper::connect(url).await?;
    let queue = "raw";
    fill(&broker, queue, jobs).await?;
    let started = Instant::now();
    let mut done = 0;
    while done < jobs {
        let fetched = broker
            .fetch(FetchRequest::one(queue, batch, Duration::from_secs(60)))
            .await?;
        if fetched.jobs.is_empty() {
            break;
        }
        done += fetched.jobs.len();
        let acks = fetched.jobs.iter().map(Settlement::ack).collect();
        broker.settle(acks).await?;
    }
    let rate = done as f64 / started.elapsed().as_secs_f64();
    if done < jobs {
        return Err(Error::broker_msg(format!(
            "raw loop on {} drained {done} of {jobs} jobs",
            hopper::redact_url(url)
        )));
    }
    Ok(rate)
}

/// RabbitMQ at one window: raw lapin acking each, raw lapin with grouped acks, then
/// `hopper load --prefilled` at concurrency 50 with prefetch `window`, each draining the
/// same backlog of `jobs`, published the same way by Hopper's own (confirmed) enqueue just
/// before. The backlog must be the same: how a queue was just filled moves how fast the
/// server then delivers by half or more (on 1 December a raw consumer drained 20,000 at
/// 48–65k msgs/s right after `hopper load`'s own enqueue, and at 122k right after this
/// bench's fill as it was then, with payloads `[index, 0]`).
async fn amqp_row(url: &str, jobs: usize, window: u16, rounds: usize) -> Result<Row> {
    let queue = format!("hopper_bench_{}_{window}", std::process::id());
    let declared = with_declare(url);
    let admin = hopper::connect(&declared).await?;
    let window_arg = window.to_string();
    // Interleaved rounds, medians kept: the broker, the raw consumer and Hopper share two
    // cores, and one run of either moves by about a third from one run to the next.
    let (mut each, mut grouped, mut hopper) = (Vec::new(), Vec::new(), Vec::new());
    let (mut raw_cpu, mut raw_switches) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        for (rates, ack_grouped) in [(&mut each, false), (&mut grouped, true)] {
            fill(&admin, &queue, jobs).await?;
            let raw = raw_lapin(url, &queue, jobs, window, ack_grouped).await?;
            rates.push(raw.rate);
            if ack_grouped {
                raw_cpu.extend(raw.cpu_us);
                raw_switches.extend(raw.switches);
            }
        }
        fill(&admin, &queue, jobs).await?;
        let (row, _) = hopper_load_with(
            &declared,
            jobs,
            50,
            hopper::worker::DEFAULT_MAX_BATCH,
            &format!("amqp consume, window {window}"),
            &["--prefetch", &window_arg, "--queues", &queue, "--prefilled"],
        )
        .await?;
        // On stderr as it goes (the table is stdout's): a long run shows its progress, and
        // each round's pair, which the table sums up as a median and a spread.
        eprintln!(
            "amqp window {window}, round {round}/{rounds}: raw {:.0}/s (acking each {:.0}/s), Hopper {:.0}/s",
            grouped[grouped.len() - 1],
            each[each.len() - 1],
            row.hopper_per_s.unwrap_or(0.0)
        );
        hopper.push(row);
    }
    let ratios = round_ratios(&hopper, &grouped);
    let spread = ratio_spread(&ratios);
    let (paired, paired_each) = (median(&mut ratios.clone()), paired_ratio(&hopper, &each));
    let hopper_cpu = hopper.iter().filter_map(|r| r.cpu_us_per_job).collect();
    let cpu = raw_beside_hopper("client CPU µs/msg", 1, raw_cpu, hopper_cpu);
    let hopper_switches = hopper.iter().filter_map(|r| r.switches_per_job).collect();
    let switches = raw_beside_hopper("context switches/msg", 2, raw_switches, hopper_switches);
    let mut row = median_row(hopper);
    let (each, grouped) = (median(&mut each), median(&mut grouped));
    row.raw_per_s = Some(grouped);
    row.note = format!(
        "medians of {rounds} interleaved rounds, ratios the median of each round's; \
         raw: lapin, grouped acks{spread}; acking each {each:.0}/s (Hopper/that {paired_each:.2}){cpu}{switches}"
    );
    row.ratio = Some(paired);
    drop(admin);
    let _ = delete_queue(url, &queue).await;
    Ok(row)
}

/// The median of each round's Hopper rate over that round's raw rate. The server moves
/// between a slow and a fast mode that lasts a few seconds (one raw loop drained at 30k
/// and at 50k msgs/s in consecutive rounds on 1 December), so a ratio of the two medians
/// could set a fast raw round against a slow Hopper one.
fn paired_ratio(hopper: &[Row], raw: &[f64]) -> f64 {
    median(&mut round_ratios(hopper, raw))
}

/// Each round's Hopper rate over that round's raw rate, in round order.
fn round_ratios(hopper: &[Row], raw: &[f64]) -> Vec<f64> {
    hopper
        .iter()
        .zip(raw)
        .map(|(h, r)| h.hopper_per_s.unwrap_or(0.0) / r)
        .collect()
}

/// `; rounds' ratios LOW–HIGH`, the spread the median was taken from; nothing for one round.
fn ratio_spread(ratios: &[f64]) -> String {
    if ratios.len() < 2 {
        return String::new();
    }
    let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let high = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("; rounds' ratios {low:.2}–{high:.2}")
}

/// The middle value of `rates`.
fn median(rates: &mut [f64]) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// The run of median Hopper rate, with all its figures (latency, round trips, RSS).
fn median_row(mut runs: Vec<Row>) -> Row {
    runs.sort_by(|a, b| {
        a.hopper_per_s
            .unwrap_or(0.0)
            .total_cmp(&b.hopper_per_s.unwrap_or(0.0))
    });
    runs.swap_remove(runs.len() / 2)
}

/// `; {what}: raw R, Hopper H`, the medians of each side's runs to `decimals` places;
/// nothing when either side has none (a system that does not report the figure).
fn raw_beside_hopper(
    what: &str,
    decimals: usize,
    mut raw: Vec<f64>,
    mut hopper: Vec<f64>,
) -> String {
    if raw.is_empty() || hopper.is_empty() {
        return String::new();
    }
    format!(
        "; {what}: raw {:.decimals$}, Hopper {:.decimals$}",
        median(&mut raw),
        median(&mut hopper)
    )
}

/// `url` asking Hopper to declare the queues it uses.
fn with_declare(url: &str) -> String {
    if url.contains("declare=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&declare=true")
    } else {
        format!("{url}?declare=true")
    }
}

/// Empties `queue` and enqueues a backlog of `jobs` as `hopper load` writes one (payloads
/// `[index, enqueued_at_µs]`, so `hopper load --prefilled` can drain it), a chunk at a time.
async fn fill(broker: &std::sync::Arc<dyn hopper::Broker>, queue: &str, jobs: usize) -> Result<()> {
    broker.purge(queue).await?;
    for start in (0..jobs).step_by(ENQUEUE_CHUNK) {
        let chunk = (start..jobs.min(start + ENQUEUE_CHUNK))
            .map(|i| NewJob::json(queue, &(i, micros_now())))
            .collect::<Result<Vec<_>>>()?;
        broker.enqueue(chunk).await?;
    }
    Ok(())
}

/// What one raw lapin drain measured.
struct RawRun {
    /// Messages a second.
    rate: f64,
    /// This process's CPU time per message (µs), where the system reports it.
    cpu_us: Option<f64>,
    /// Context switches of this process's threads per message, where the system reports
    /// them.
    switches: Option<f64>,
}

/// A plain lapin consumer: `basic.qos(window)`, decode each payload as a handler would,
/// and ack it, each on its own or grouped with `multiple` once half the window waits.
/// The bench process does nothing else meanwhile, so its CPU time and context switches
/// while the consumer runs are the consumer's.
async fn raw_lapin(
    url: &str,
    queue: &str,
    jobs: usize,
    window: u16,
    grouped: bool,
) -> Result<RawRun> {
    use futures_util::StreamExt;
    use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
    let amqp = |what: &'static str| move |e: lapin::Error| Error::broker(what, e);
    let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
        .await
        .map_err(amqp("connecting to RabbitMQ"))?;
    let ch = conn
        .create_channel()
        .await
        .map_err(amqp("opening a channel"))?;
    ch.basic_qos(window, BasicQosOptions::default())
        .await
        .map_err(amqp("basic.qos"))?;
    let cpu_before = process_cpu_s();
    let switches_before = context_switches();
    let started = Instant::now();
    let mut consumer = ch
        .basic_consume(
            queue.into(),
            "hopper-bench-raw".into(),
            BasicConsumeOptions::default(),
            lapin::types::FieldTable::default(),
        )
        .await
        .map_err(amqp("basic.consume"))?;
    let group = if grouped { (window / 2).max(1) } else { 1 };
    let (mut n, mut waiting) = (0, 0u16);
    while let Some(delivery) = consumer.next().await {
        let delivery = delivery.map_err(amqp("receiving"))?;
        let _: (usize, u64) = serde_json::from_slice(&delivery.data)
            .map_err(|e| Error::broker_msg(format!("a bench payload did not decode: {e}")))?;
        n += 1;
        waiting += 1;
        if waiting >= group || n == jobs {
            delivery
                .ack(BasicAckOptions { multiple: grouped })
                .await
                .map_err(amqp("basic.ack"))?;
            waiting = 0;
        }
        if n == jobs {
            break;
        }
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let cpu_us = cpu_us_per(cpu_before, process_cpu_s(), n as u64);
    let switches = switches_per(switches_before, context_switches(), n as u64);
    let _ = conn.close(200, "done".into()).await;
    Ok(RawRun {
        rate,
        cpu_us,
        switches,
    })
}

async fn delete_queue(url: &str, queue: &str) -> Result<()> {
    use lapin::options::QueueDeleteOptions;
    let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
        .await
        .map_err(|e| Error::broker("connecting to RabbitMQ", e))?;
    let ch = conn
        .create_channel()
        .await
        .map_err(|e| Error::broker("opening a channel", e))?;
    for q in [queue.to_owned(), format!("{queue}.dead")] {
        let _ = ch
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    let _ = conn.close(200, "done".into()).await;
    Ok(())
}

/// Runs `hopper load --json` in a child process, after migrating the broker's schema;
/// returns its row and its enqueue rate.
async fn hopper_load(
    url: &str,
    jobs: usize,
    concurrency: usize,
    max_batch: usize,
    workload: &str,
) -> Result<(Row, f64)> {
    hopper_load_with(
        url,
        jobs,
        concurrency,
        max_batch,
        workload,
        &["--prefetch", "slots"],
    )
    .await
}

/// [`hopper_load`] with other `hopper load` arguments in place of `--prefetch slots`.
async fn hopper_load_with(
    url: &str,
    jobs: usize,
    concurrency: usize,
    max_batch: usize,
    workload: &str,
    extra: &[&str],
) -> Result<(Row, f64)> {
    hopper::migrate(url).await?;
    let exe = std::env::current_exe().map_err(|e| Error::broker_msg(e.to_string()))?;
    let output = std::process::Command::new(exe)
        .args(["--broker", url, "load", "--json"])
        .args(extra)
        .args(["--jobs", &jobs.to_string()])
        .args(["--concurrency", &concurrency.to_string()])
        .args(["--max-batch", &max_batch.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Error::broker_msg(format!("running `hopper load`: {e}")))?;
    let ok = output.status.success();
    let report: Report = serde_json::from_slice(&output.stdout).map_err(|e| {
        Error::broker_msg(format!(
            "`hopper load` on {} printed no report ({e})",
            hopper::redact_url(url)
        ))
    })?;
    if !ok || report.lost > 0 {
        return Err(Error::broker_msg(format!(
            "`hopper load` on {} lost {} jobs",
            hopper::redact_url(url),
            report.lost
        )));
    }
    let per_1k = |n: u64| n as f64 * 1000.0 / jobs as f64;
    let row = Row {
        workload: workload.into(),
        jobs,
        hopper_per_s: Some(report.jobs_per_s),
        p50_ms: Some(report.latency_ms.p50),
        p99_ms: Some(report.latency_ms.p99),
        fetches_per_1k: Some(per_1k(report.fetches)),
        settles_per_1k: Some(per_1k(report.settle_calls)),
        peak_rss_mib: report.peak_rss_mib,
        cpu_us_per_job: report.cpu_us_per_job,
        switches_per_job: report.switches_per_job,
        ..Row::default()
    };
    Ok((row, jobs as f64 / report.enqueue_s.max(1e-9)))
}

/// Enqueue-to-start of an idle worker, measured from the enqueue's commit (see
/// [`enqueue_after_a_gap`]).
async fn idle_latency(url: &str, name: &str) -> Result<Row> {
    hopper::migrate(url).await?;
    let producer = hopper::connect(url).await?;
    let broker = if producer.capabilities().in_process {
        producer.clone()
    } else {
        hopper::connect(url).await?
    };
    producer.purge("latency").await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = Worker::builder(broker)
        .queue(
            "latency",
            QueueOptions::new().concurrency(1),
            move |_job: JobContext<u64>| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(Instant::now());
                    Ok(())
                }
            },
        )
        .start()?;
    let mut waits = Vec::with_capacity(LATENCY_SAMPLES);
    for i in 0..LATENCY_WARMUP + LATENCY_SAMPLES {
        let committed = enqueue_after_a_gap(&producer, i).await?;
        let started = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .map_err(|_| Error::broker_msg(format!("{name}: an idle worker took over 10 s")))?
            .ok_or_else(|| Error::broker_msg(format!("{name}: the worker stopped")))?;
        if i >= LATENCY_WARMUP {
            waits.push(started.saturating_duration_since(committed).as_secs_f64() * 1000.0);
        }
    }
    worker.shutdown().await;
    waits.sort_by(f64::total_cmp);
    Ok(Row {
        workload: format!("{name} idle latency, commit to start"),
        jobs: LATENCY_SAMPLES,
        p50_ms: Some(percentile(&waits, 50.0)),
        p99_ms: Some(percentile(&waits, 99.0)),
        note: if producer.capabilities().in_process {
            "one job at a time to an idle worker; from the enqueue's call, in which the job \
             is queued"
                .into()
        } else {
            "one job at a time to an idle worker".into()
        },
        ..Row::default()
    })
}

/// Lets the worker fall idle (5 ms), enqueues job `i` on the `latency` queue, and returns
/// the moment the job was committed: the enqueue's return for a database or a server (the
/// commit is the last thing the call waits for), and the call itself for the in-process
/// memory broker, whose job is queued, and may start on the worker's other thread, before
/// the call has returned (measured from the return, half the memory broker's samples came
/// out as zero).
async fn enqueue_after_a_gap(
    producer: &std::sync::Arc<dyn hopper::Broker>,
    i: usize,
) -> Result<Instant> {
    tokio::time::sleep(Duration::from_millis(5)).await;
    let called = Instant::now();
    producer
        .enqueue(vec![NewJob::json("latency", &(i as u64))?])
        .await?;
    Ok(if producer.capabilities().in_process {
        called
    } else {
        Instant::now()
    })
}

/// How long [`idle_round_trips`] watches an idle worker (times `--scale`, at least
/// [`IDLE_WATCHED_MIN`]).
const IDLE_WATCHED: Duration = Duration::from_secs(10);
const IDLE_WATCHED_MIN: Duration = Duration::from_secs(2);

/// What an idle worker asks of a SQL server: the statements (MySQL) or transactions
/// (PostgreSQL) the server counts over `watch`, with the worker's connections. The
/// worker runs in a database of its own. PostgreSQL counts a session's transactions in
/// `pg_stat_database` only when the session reports them, at its next transaction a second
/// or more after the last report or after 10 s idle, so the watch starts 11 s after the
/// worker, once its start's transactions are in. On MariaDB the worker connects as a user
/// of its own, whose statements the server's user statistics count (`userstat`, turned on
/// for the row and back off after it if it was off); where that cannot be done (MySQL has
/// no `userstat`), the count is the whole server's `Questions`, with nothing else running.
/// The watch starts once the wake poller has backed off (3 s). The counts are read on a
/// connection of their own, twice before the watch: what one reading adds to them (nothing,
/// counted by user) is taken off.
async fn idle_round_trips(name: &str, server: &str, watch: Duration) -> Result<Row> {
    let mysql = Scratch::mysql(server);
    Scratch::run_in(server, true, async |s| {
        hopper::migrate(&s.url).await?;
        let read_err = |e| Error::broker(format!("{name}: reading the server's counts"), e);
        let mut counts = AdminConn::connect(server).await.map_err(read_err)?;
        let user = if mysql {
            CountedUser::create(&mut counts, &s.name).await
        } else {
            None
        };
        let url = user.as_ref().map_or(s.url.clone(), |u| u.url(&s.url));
        let by_user = user.as_ref().map(|u| u.name.clone());
        let by_user = by_user.as_deref();
        // The user goes, and `userstat` back, whatever the watch returned.
        let watched = async {
            let worker = Worker::builder(hopper::connect(&url).await?)
                .queue(
                    "idle",
                    QueueOptions::new().concurrency(1),
                    |_job: JobContext<u64>| async { Ok(()) },
                )
                .start()?;
            tokio::time::sleep(Duration::from_secs(if mysql { 3 } else { 11 })).await;
            let read = async {
                let (first, _) = counts.counts(&s.name, by_user).await?;
                let (before, _) = counts.counts(&s.name, by_user).await?;
                let started = Instant::now();
                tokio::time::sleep(watch).await;
                let (after, conns) = counts.counts(&s.name, by_user).await?;
                Ok((after - before - (before - first), conns, started.elapsed()))
            }
            .await;
            worker.shutdown().await;
            read.map_err(read_err)
        }
        .await;
        if let Some(user) = user {
            user.drop(&mut counts).await;
        }
        counts.close().await;
        let (asked, conns, took) = watched?;
        let secs = took.as_secs_f64();
        let what = match (mysql, by_user) {
            (false, _) => "transactions",
            (true, Some(_)) => "statements",
            (true, None) => "statements (the server's Questions)",
        };
        Ok(Row {
            workload: format!("{name} idle worker, {} s", watch.as_secs()),
            idle_per_s: Some(asked as f64 / secs),
            note: format!(
                "{asked} {what} in {secs:.1} s ({:.2} a second) over the worker's {conns} \
                 connections, as the server counts them",
                asked as f64 / secs,
            ),
            ..Row::default()
        })
    })
    .await
}

/// A MariaDB user of an idle row's own, whose statements the server counts apart from
/// everyone else's (user statistics).
struct CountedUser {
    name: String,
    password: String,
    /// `userstat` was off before the row turned it on.
    userstat_was_off: bool,
}

impl CountedUser {
    /// The user, allowed `database`; `None` where the server keeps no user statistics or
    /// the bench's user may not make users.
    async fn create(admin: &mut AdminConn, database: &str) -> Option<CountedUser> {
        let AdminConn::MySql(conn) = admin else {
            return None;
        };
        let was: i64 = sqlx::query_scalar("SELECT CAST(@@GLOBAL.userstat AS SIGNED)")
            .fetch_one(&mut *conn)
            .await
            .ok()?;
        let user = CountedUser {
            name: database.to_owned(),
            // Random per process (std's hasher keys are), and the user lives for the row.
            password: format!(
                "{:016x}",
                std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), database)
            ),
            userstat_was_off: was == 0,
        };
        let made = async {
            admin.execute("SET GLOBAL userstat = 1").await?;
            admin
                .execute(&format!(
                    "CREATE USER '{}'@'%' IDENTIFIED BY '{}'",
                    user.name, user.password
                ))
                .await?;
            admin
                .execute(&format!("GRANT ALL ON {database}.* TO '{}'@'%'", user.name))
                .await
        }
        .await;
        if made.is_err() {
            user.drop(admin).await;
            return None;
        }
        Some(user)
    }

    /// `url` connecting as this user.
    fn url(&self, url: &str) -> String {
        with_user(url, &self.name, &self.password)
    }

    async fn drop(self, admin: &mut AdminConn) {
        let _ = admin
            .execute(&format!("DROP USER IF EXISTS '{}'@'%'", self.name))
            .await;
        if self.userstat_was_off {
            let _ = admin.execute("SET GLOBAL userstat = 0").await;
        }
    }
}

/// A connection of the bench's own to a SQL server: scratch schemas and databases are made
/// and dropped on it, and [`idle_round_trips`] reads the server's counts on it.
enum AdminConn {
    Postgres(sqlx::PgConnection),
    MySql(sqlx::MySqlConnection),
}

impl AdminConn {
    async fn connect(server: &str) -> std::result::Result<Self, sqlx::Error> {
        Ok(if Scratch::mysql(server) {
            AdminConn::MySql(sqlx::MySqlConnection::connect(server).await?)
        } else {
            AdminConn::Postgres(sqlx::PgConnection::connect(server).await?)
        })
    }

    async fn execute(&mut self, statement: &str) -> std::result::Result<(), sqlx::Error> {
        match self {
            AdminConn::Postgres(conn) => sqlx::raw_sql(statement).execute(conn).await.map(drop),
            AdminConn::MySql(conn) => sqlx::raw_sql(statement).execute(conn).await.map(drop),
        }
    }

    /// The server's count (PostgreSQL: the transactions of `database`; MySQL: the
    /// statements of `user`, or every statement without one) and the connections open to
    /// `database`.
    async fn counts(
        &mut self,
        database: &str,
        user: Option<&str>,
    ) -> std::result::Result<(i64, i64), sqlx::Error> {
        match self {
            AdminConn::Postgres(conn) => {
                sqlx::query_as(
                    "SELECT (SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database \
                     WHERE datname = $1), \
                     (SELECT count(*) FROM pg_stat_activity WHERE datname = $1)",
                )
                .bind(database)
                .fetch_one(conn)
                .await
            }
            AdminConn::MySql(conn) => {
                let (asked,): (i64,) = match user {
                    Some(user) => sqlx::query_as(
                        "SELECT COALESCE((SELECT CAST(SELECT_COMMANDS + UPDATE_COMMANDS + \
                         OTHER_COMMANDS AS SIGNED) FROM information_schema.USER_STATISTICS \
                         WHERE USER = ?), 0)",
                    )
                    .bind(user),
                    None => sqlx::query_as(
                        "SELECT CAST(VARIABLE_VALUE AS SIGNED) \
                         FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'QUESTIONS'",
                    ),
                }
                .fetch_one(&mut *conn)
                .await?;
                let (conns,): (i64,) = sqlx::query_as(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = ?",
                )
                .bind(database)
                .fetch_one(conn)
                .await?;
                Ok((asked, conns))
            }
        }
    }

    async fn close(self) {
        let _ = match self {
            AdminConn::Postgres(conn) => conn.close().await,
            AdminConn::MySql(conn) => conn.close().await,
        };
    }
}

/// PostgreSQL's idle latency, with its floor on this machine measured just before it (see
/// [`pg_latency_floor`]). Each in a schema of its own: every claim leaves a dead entry in
/// the pending index that later claims walk over until a vacuum, so the second would
/// otherwise start behind the first.
async fn pg_idle_latency(server: &str) -> Result<Row> {
    let (claimed, notified) = Scratch::run(server, pg_latency_floor).await?;
    let mut row = Scratch::run(server, async |s| idle_latency(&s.url, "postgres").await).await?;
    row.note = format!(
        "{}; raw (LISTEN, then the broker's own fetch), commit to claimed: p50 {:.3}, p99 \
         {:.3}, of which to the notification p50 {:.3}",
        row.note,
        percentile(&claimed, 50.0),
        percentile(&claimed, 99.0),
        percentile(&notified, 50.0)
    );
    Ok(row)
}

/// The floor of PostgreSQL's idle latency: a plain listener on the broker's wake channel
/// that, on each notification, claims with the broker's own fetch. Returns, sorted, the
/// times from each enqueue's commit to the claim's return and to the notification (ms):
/// every round trip Hopper makes for the job, and none of its runtime. Two sessions
/// listen, as while Hopper's worker waits: the producer's broker and this listener (the
/// claiming broker does not).
async fn pg_latency_floor(scratch: &Scratch) -> Result<(Vec<f64>, Vec<f64>)> {
    use hopper::Broker;
    hopper::migrate(&scratch.url).await?;
    let producer = hopper::connect(&scratch.url).await?;
    producer.purge("latency").await?;
    let options = hopper::PgOptions::default()
        .schema(&scratch.name)
        .listen(false);
    let broker = hopper::PgBroker::connect_with(&scratch.url, options).await?;
    let channel = broker.wake_channel().to_owned();
    let server = hopper::redact_url(&scratch.server);
    let mut listener = sqlx::postgres::PgListener::connect(&scratch.server)
        .await
        .map_err(|e| Error::broker(format!("connecting a listener to {server}"), e))?;
    listener
        .listen(&channel)
        .await
        .map_err(|e| Error::broker(format!("LISTEN {channel} on {server}"), e))?;
    let (mut claimed, mut notified) = (Vec::new(), Vec::new());
    for i in 0..LATENCY_WARMUP + LATENCY_SAMPLES {
        let committed = enqueue_after_a_gap(&producer, i).await?;
        tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .map_err(|_| {
                Error::broker_msg(format!(
                    "no notification on {channel} at {server} within 10 s of an enqueue"
                ))
            })?
            .map_err(|e| Error::broker(format!("receiving on {channel} at {server}"), e))?;
        let notified_at = Instant::now();
        let fetched = broker
            .fetch(FetchRequest::one("latency", 1, Duration::from_secs(60)))
            .await?;
        let claimed_at = Instant::now();
        if fetched.jobs.len() != 1 {
            return Err(Error::broker_msg(format!(
                "the raw listener on {channel} claimed {} jobs after a notification, not 1",
                fetched.jobs.len()
            )));
        }
        broker
            .settle(fetched.jobs.iter().map(Settlement::ack).collect())
            .await?;
        if i >= LATENCY_WARMUP {
            let ms = |t: Instant| t.duration_since(committed).as_secs_f64() * 1000.0;
            claimed.push(ms(claimed_at));
            notified.push(ms(notified_at));
        }
    }
    broker.close().await;
    claimed.sort_by(f64::total_cmp);
    notified.sort_by(f64::total_cmp);
    Ok((claimed, notified))
}

/// A schema (PostgreSQL) or database (MySQL) made for one run and dropped after it.
struct Scratch {
    server: String,
    name: String,
    url: String,
    /// A database of its own (always on MySQL), not a schema.
    database: bool,
}

impl Scratch {
    fn mysql(server: &str) -> bool {
        server.starts_with("mysql:")
    }

    async fn create(server: &str, database: bool) -> Result<Self> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("hopper_bench_{}_{n}", std::process::id());
        // A MySQL database must exist before a broker connects to it; a schema is made by
        // the migration.
        let database = database || Self::mysql(server);
        let url = if database {
            Self::admin(server, &format!("CREATE DATABASE {name}"))
                .await
                .map_err(|e| Error::broker("creating a scratch database", e))?;
            with_database(server, &name)
        } else {
            let sep = if server.contains('?') { '&' } else { '?' };
            format!("{server}{sep}schema={name}")
        };
        Ok(Scratch {
            server: server.to_owned(),
            name,
            url,
            database,
        })
    }

    /// Runs one statement on `server` on a connection of its own.
    async fn admin(server: &str, statement: &str) -> std::result::Result<(), sqlx::Error> {
        let mut conn = AdminConn::connect(server).await?;
        let done = conn.execute(statement).await;
        conn.close().await;
        done
    }

    /// Runs `work` in a scratch schema or database of its own on `server`, dropped
    /// afterwards whatever `work` returned.
    async fn run<T>(server: &str, work: impl AsyncFnOnce(&Scratch) -> Result<T>) -> Result<T> {
        Self::run_in(server, false, work).await
    }

    /// [`Scratch::run`], in a database of its own on PostgreSQL too with `database`.
    async fn run_in<T>(
        server: &str,
        database: bool,
        work: impl AsyncFnOnce(&Scratch) -> Result<T>,
    ) -> Result<T> {
        let scratch = Scratch::create(server, database).await?;
        let result = work(&scratch).await;
        scratch.drop().await;
        result
    }

    async fn drop(self) {
        let statement = match (self.database, Self::mysql(&self.server)) {
            (true, true) => format!("DROP DATABASE IF EXISTS {}", self.name),
            (true, false) => format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            (false, _) => format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name),
        };
        let _ = Self::admin(&self.server, &statement).await;
    }
}

/// `url` connecting as `user` with `password` instead of its own credentials.
fn with_user(url: &str, user: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let host = rest.find('/').map_or(rest, |end| &rest[..end]);
    let host_at = host.rfind('@').map_or(0, |at| at + 1);
    format!("{scheme}://{user}:{password}@{}", &rest[host_at..])
}

/// `server`'s URL naming database `name` instead of its own, its parameters kept.
fn with_database(server: &str, name: &str) -> String {
    let (base, query) = match server.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (server, String::new()),
    };
    let (scheme, rest) = base.split_once("://").unwrap_or(("", base));
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    format!("{scheme}://{authority}/{name}{query}")
}

fn print_table(rows: &[Row]) {
    let num =
        |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let rate = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.0}", v.round()));
    println!(
        "| workload | jobs | raw jobs/s | Hopper jobs/s | ratio | p50 ms | p99 ms | fetches/1k | settles/1k | peak RSS MiB | note |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.workload,
            r.jobs,
            rate(r.raw_per_s),
            rate(r.hopper_per_s),
            num(r.ratio, 2),
            num(r.p50_ms, 3),
            num(r.p99_ms, 3),
            num(r.fetches_per_1k, 1),
            num(r.settles_per_1k, 1),
            num(r.peak_rss_mib, 1),
            r.note
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(rate: f64, p50: f64) -> Row {
        Row {
            workload: "w".into(),
            jobs: 1,
            raw_per_s: None,
            hopper_per_s: Some(rate),
            ratio: None,
            p50_ms: Some(p50),
            p99_ms: None,
            fetches_per_1k: None,
            settles_per_1k: None,
            peak_rss_mib: None,
            cpu_us_per_job: None,
            switches_per_job: None,
            idle_per_s: None,
            note: String::new(),
        }
    }

    /// A round whose mode flipped between its raw run and Hopper's moves the ratio of the
    /// medians (45 / 31 = 1.45 here) but not the median of the rounds' ratios (0.9, 0.9 and
    /// 1.45).
    #[test]
    fn the_ratio_pairs_each_round_with_its_own_raw_run() {
        let hopper = [row(45.0, 1.0), row(27.0, 1.0), row(45.0, 1.0)];
        let raw = [50.0, 30.0, 31.0];
        assert!((paired_ratio(&hopper, &raw) - 0.9).abs() < 1e-9);
    }

    /// The note's spread runs from the lowest round's ratio to the highest, whatever their
    /// order; one round has no spread.
    #[test]
    fn the_spread_names_the_lowest_and_highest_round() {
        let ratios = round_ratios(
            &[row(45.0, 1.0), row(24.0, 1.0), row(33.0, 1.0)],
            &[50.0, 20.0, 30.0],
        );
        assert_eq!(ratio_spread(&ratios), "; rounds' ratios 0.90–1.20");
        assert_eq!(ratio_spread(&ratios[..1]), "");
    }

    /// Each side's median, to the places asked; nothing when a side has no figure.
    #[test]
    fn raw_beside_hopper_gives_each_sides_median() {
        let note = raw_beside_hopper("switches", 2, vec![1.5, 0.25, 3.0], vec![0.5, 0.75, 0.6]);
        assert_eq!(note, "; switches: raw 1.50, Hopper 0.60");
        let note = raw_beside_hopper("CPU", 1, vec![17.04], vec![18.21, 19.0, 18.0]);
        assert_eq!(note, "; CPU: raw 17.0, Hopper 18.2");
        assert_eq!(raw_beside_hopper("CPU", 1, vec![], vec![1.0]), "");
        assert_eq!(raw_beside_hopper("CPU", 1, vec![1.0], vec![]), "");
    }

    /// A scratch database's URL keeps the server's scheme, credentials, host and
    /// parameters, and names the scratch database.
    #[test]
    fn a_scratch_database_keeps_the_rest_of_the_url() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/test", "scratch_1"),
            "postgres://postgres@127.0.0.1:5432/scratch_1"
        );
        assert_eq!(
            with_database("mysql://root:pw@db/test?ssl-mode=disabled", "scratch_2"),
            "mysql://root:pw@db/scratch_2?ssl-mode=disabled"
        );
        assert_eq!(
            with_database("postgres://app@db?sslmode=disable", "s"),
            "postgres://app@db/s?sslmode=disable"
        );
    }

    /// A counted user's URL replaces the credentials only.
    #[test]
    fn a_counted_user_keeps_the_rest_of_the_url() {
        assert_eq!(
            with_user("mysql://root:pw@db:3306/s?ssl-mode=disabled", "u", "p"),
            "mysql://u:p@db:3306/s?ssl-mode=disabled"
        );
        assert_eq!(with_user("mysql://db/s", "u", "p"), "mysql://u:p@db/s");
    }

    /// The median run is kept whole: its rate and the figures measured with it.
    #[test]
    fn median_row_keeps_the_middle_run() {
        let runs = vec![
            row(3.0, 30.0),
            row(1.0, 10.0),
            row(5.0, 50.0),
            row(2.0, 20.0),
            row(4.0, 40.0),
        ];
        let m = median_row(runs);
        assert_eq!((m.hopper_per_s, m.p50_ms), (Some(3.0), Some(30.0)));
        assert_eq!(median(&mut [4.0, 1.0, 3.0]), 3.0);
    }
}
