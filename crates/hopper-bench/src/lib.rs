//! The harness behind `hopper bench`: the performance matrix of BENCHMARKS.md in one run,
//! one table. [`run`] measures the workloads [`Options`] asks for and prints the table (or
//! one JSON array); the `hopper` binary's `bench` command parses its flags into [`Options`]
//! and calls it.
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
//! With round trips above 0 in [`Options::rtt`], the PostgreSQL, MySQL and RabbitMQ rows
//! run again at each of them, every connection through a [`proxy::DelayProxy`] (see `rtt`).
//!
//! SQL workloads run in scratch schemas (PostgreSQL; databases for the idle rows) or
//! databases (MySQL) created for the run and dropped afterwards; SQLite in a temporary file.
//!
//! # Layout
//! - `lib.rs`: [`Options`] and [`run`], which rows run in what order; the memory and
//!   SQLite drain rows.
//! - `table`: one row of the matrix, and the table printed of the rows.
//! - `rounds`: interleaved rounds, their medians, and the ratio of each round's pair.
//! - `raw`: the raw baselines of the memory and SQL rows.
//! - `claim_delete`: PostgreSQL's ceiling beside the wide row, clients deleting batches.
//! - `sql`: the PostgreSQL and MySQL drain rows, each a raw loop beside `hopper load`.
//! - [`load`]: `hopper load` as the bench drives it: the backlog it drains, its report, a
//!   run of it in a child process.
//! - `amqp`: the RabbitMQ rows, plain lapin consumers beside Hopper.
//! - `amqp_enqueue`: the RabbitMQ enqueue row, beside lapin publishing without confirms.
//! - `latency`: the idle latency rows, PostgreSQL's beside a raw listener.
//! - `idle`: the idle round-trip rows.
//! - `instrument`: drains with a metrics recorder, and with spans, beside the same drains
//!   without.
//! - `rtt`: the rows at a distance: a proxy per server and round trip, their job counts,
//!   labels, and rates against 0 ms.
//! - `scratch`: scratch schemas and databases, and the bench's own server connections.
//! - [`measure`]: this process's CPU time, context switches and peak RSS; percentiles.
//! - [`proxy`]: a TCP proxy delaying each direction by a fixed time, for the `--rtt` rows.

mod amqp;
mod amqp_enqueue;
mod claim_delete;
mod idle;
mod instrument;
mod latency;
pub mod load;
pub mod measure;
pub mod proxy;
mod raw;
mod rounds;
mod rtt;
mod scratch;
mod sql;
mod table;

use hopper::{Error, Result};

use crate::amqp::amqp_row;
use crate::amqp_enqueue::amqp_enqueue_row;
use crate::idle::{IDLE_WATCHED, IDLE_WATCHED_MIN, idle_round_trips};
use crate::instrument::{feature_rows, instrumentation_rows};
use crate::latency::{idle_latency, pg_idle_latency};
use crate::load::{hopper_load, hopper_load_with};
use crate::raw::{raw_broker_loop, raw_mpsc};
use crate::rounds::{SQL_ROUNDS, median, median_row, paired_rounds};
use crate::rtt::{Route, set_vs_0ms};
use crate::sql::SqlDrain;
use crate::table::{Row, print_table};

/// What `--only` accepts.
const WORKLOADS: [&str; 10] = [
    "memory",
    "sqlite",
    "postgres",
    "mysql",
    "amqp",
    "latency",
    "idle",
    "rss",
    "instrument",
    "features",
];

/// What to measure and where: `hopper bench`'s flags. [`run`]'s errors name a setting by
/// its flag (`--only`, `--scale`).
#[derive(Debug, Clone)]
pub struct Options {
    /// Workloads to run: any of memory, sqlite, postgres, mysql, amqp, latency, idle, rss,
    /// instrument, features (`--only`). The rows come in that order whatever the order asked.
    pub only: Vec<String>,
    /// The PostgreSQL server; each run uses a scratch schema of its own (the idle rows a
    /// scratch database).
    pub postgres: String,
    /// The MySQL / MariaDB server; each run uses a scratch database of its own.
    pub mysql: String,
    /// The RabbitMQ server; each run uses queues of its own, deleted afterwards.
    pub amqp: String,
    /// Multiplies every job count (a drain keeps 1,000 jobs at least) and the idle rows'
    /// 10 s watch (2 s at least): above 0, at most 10; 1 for figures worth publishing.
    pub scale: f64,
    /// The RabbitMQ windows to run with `amqp`, each 1 or more. Windows 1 and 10 drain
    /// 20,000 and 50,000 messages, any other 100,000 (before `scale`).
    pub amqp_windows: Vec<u16>,
    /// Round trips in milliseconds (`--rtt`) at which the postgres, mysql and amqp rows
    /// run, each from 0 to 1000: 0 reaches the servers directly; any other runs those
    /// rows again through a delay proxy of half the time each way, with fewer jobs, and
    /// adds rows of `hopper load` as users run it at every round trip. At least one.
    pub rtt: Vec<f64>,
    /// Interleaved rounds of the memory and RabbitMQ rows, 1 or more, whose medians are
    /// kept; the SQL rows run at most three.
    pub rounds: u16,
    /// Print one JSON array instead of a table.
    pub json: bool,
}

/// Runs the workloads `options` asks for, one after the other, and prints their rows on
/// stdout, as a table or as one JSON array; the RabbitMQ rows print each round on stderr
/// as they go.
///
/// Call it from the `hopper` binary: Hopper's side of each drain row runs the current
/// executable as `hopper load --json` in a child process.
///
/// # Errors
/// A workload `run` does not know, a `scale` out of range, or a server or child process
/// that fails; the rows measured until then are not printed.
///
/// # Panics
/// With `rounds` at 0 and a workload other than latency, idle or rss: such a row has no
/// round to take the median of.
pub async fn run(options: Options) -> Result<()> {
    for w in &options.only {
        if !WORKLOADS.contains(&w.as_str()) {
            return Err(hopper::ConfigError::new("--only", w, WORKLOADS.join(", ")).into());
        }
    }
    if !(options.scale > 0.0 && options.scale <= 10.0) {
        return Err(
            hopper::ConfigError::new("--scale", options.scale, "above 0, at most 10").into(),
        );
    }
    if options.rtt.is_empty() || !options.rtt.iter().all(|ms| (0.0..=1000.0).contains(ms)) {
        let given: Vec<String> = options.rtt.iter().map(f64::to_string).collect();
        return Err(hopper::ConfigError::new(
            "--rtt",
            given.join(","),
            "from 0 to 1000, one or more",
        )
        .into());
    }
    // Rows at 0 ms carry `rtt_ms` only when there is a distance to set them against.
    let tag_direct = options.rtt.iter().any(|&ms| ms > 0.0);
    let wants = |w: &str| options.only.iter().any(|o| o == w);
    let n = |jobs: usize| ((jobs as f64 * options.scale) as usize).max(1000);
    let rounds = usize::from(options.rounds);
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
                    hopper_load_with("memory://", jobs, 8, Some(*max_batch), workload, &[]).await?;
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
    // The last figure: round trips of one raw fetch and settle (see `rtt`). In a run at a
    // distance, `hopper load` as users run it too (`SqlDrain::defaults` and `wide`), at
    // 0 ms as well, so that each has a rate at 0 ms to be set against.
    for (name, server, base, batches, trips) in [
        (
            "postgres",
            &options.postgres,
            100_000,
            &[100, 50, 10][..],
            3,
        ),
        ("mysql", &options.mysql, 50_000, &[100, 10][..], 8),
    ] {
        if !wants(name) {
            continue;
        }
        for &rtt_ms in &options.rtt {
            let route = Route::to(server, rtt_ms, tag_direct).await?;
            for drain in SqlDrain::rows(name, batches, tag_direct) {
                let (raw, hopper) = drain.per_round_trip(trips);
                let jobs = (n(route.jobs(base, raw)), n(route.jobs(base, hopper)));
                let row = drain.run(server, &route, jobs, sql_rounds).await?;
                rows.push(route.label(row));
            }
        }
    }
    if wants("amqp") {
        // Each drain lasts seconds, so it spans the server's fast and slow modes rather
        // than falling in one. At windows 100 and 1000 the raw rounds of 20,000 messages
        // (drains of about half a second) ran at 28–85k msgs/s, four of 22 above 63k;
        // those of 100,000 (about three seconds) at 31–43k, 14 rounds (1 December).
        for &rtt_ms in &options.rtt {
            let route = Route::to(&options.amqp, rtt_ms, tag_direct).await?;
            let url = route.url(&options.amqp)?;
            let row = amqp_enqueue_row(&url, n(100_000), rounds).await?;
            rows.push(route.label(row));
            for &window in &options.amqp_windows {
                let base = match window {
                    1 => 20_000,
                    10 => 50_000,
                    _ => 100_000,
                };
                // A window of deliveries is in flight each round trip.
                let jobs = n(route.jobs(base, f64::from(window)));
                let row = amqp_row(&url, jobs, window, rounds).await?;
                rows.push(route.label(row));
            }
        }
    }
    if wants("latency") {
        rows.push(idle_latency("memory://", "memory").await?);
        let url = format!("sqlite://{}/latency.db", dir.display());
        rows.push(idle_latency(&url, "sqlite").await?);
        rows.push(pg_idle_latency(&options.postgres).await?);
    }
    if wants("idle") {
        let watch = IDLE_WATCHED.mul_f64(options.scale).max(IDLE_WATCHED_MIN);
        rows.push(idle_round_trips("postgres", &options.postgres, watch).await?);
        rows.push(idle_round_trips("mysql", &options.mysql, watch).await?);
    }
    if wants("instrument") {
        let (memory, pg) = (n(1_000_000), n(100_000));
        let found = instrumentation_rows(&options.postgres, memory, pg, rounds, sql_rounds).await?;
        rows.extend(found);
    }
    if wants("features") {
        rows.extend(feature_rows(&options.postgres, n(100_000), sql_rounds).await?);
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
    set_vs_0ms(&mut rows);

    if options.json {
        println!(
            "{}",
            serde_json::to_string(&rows).map_err(|e| Error::Encode(e.to_string()))?
        );
    } else {
        print_table(&rows);
    }
    Ok(())
}

/// The row with its ratio, Hopper's rate over the raw one, where it has both.
fn finish(mut row: Row) -> Row {
    if let (Some(raw), Some(h)) = (row.raw_per_s, row.hopper_per_s) {
        row.ratio = Some(h / raw);
    }
    row
}
