//! `hopper load` as the bench drives it: the backlog it drains, the report it prints with
//! `--json`, and a run of it in a child process.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use hopper::{Broker, Error, NewJob, Result};
use serde::{Deserialize, Serialize};

use crate::table::Row;

/// Jobs per enqueue call when a backlog is loaded: one round trip each.
pub const ENQUEUE_CHUNK: usize = 1000;

/// Now, in microseconds since the Unix epoch (0 before it): the enqueue time a backlog
/// job carries in its payload, `[index, enqueued_at_µs]`.
pub fn micros_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// What one `hopper load` run measured: the one JSON object `hopper load --json` prints,
/// which the bench reads back from its child process.
#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    /// The broker's URL, its password hidden.
    pub broker: String,
    /// Jobs to drain (`--jobs`).
    pub jobs: usize,
    /// Jobs run at least once.
    pub completed: u64,
    /// Jobs never run.
    pub lost: u64,
    /// Runs of a job after its first.
    pub duplicates: u64,
    /// Fetches that returned jobs, over every worker (on a pushed broker, batches handed to
    /// handlers: see `WorkerStats::fetches`).
    pub fetches: u64,
    /// Jobs per fetch, over every worker.
    pub jobs_per_fetch: f64,
    /// Every worker's fetch sizes, each worker's in order, one worker after the other (the
    /// first `SIZES_KEPT` of each): as many as `fetches` counts, unless one was cut short.
    pub batch_sizes: Vec<u32>,
    /// Worker runtimes, each on its own broker connection.
    pub workers: usize,
    /// Handlers running at once per queue, per worker.
    pub concurrency: usize,
    /// The window policy asked for, or `default`.
    pub prefetch: String,
    /// Seconds the enqueue of the backlog took; 0 with `--prefilled`.
    pub enqueue_s: f64,
    /// Seconds from the workers' start until every job finished (or the run gave up,
    /// nothing having run for a while).
    pub drain_s: f64,
    /// Jobs completed per second of the drain.
    pub jobs_per_s: f64,
    /// Enqueue-to-start latency.
    pub latency_ms: Latency,
    /// Settlement round trips, over every worker.
    pub settle_calls: u64,
    /// Pool tasks spawned, over every worker.
    pub pool_tasks_started: u64,
    /// Jobs per hand-off to a pool task, over every worker.
    pub jobs_per_handoff: f64,
    /// Hand-offs run on the event loop's own task, over every worker.
    pub inline_handoffs: u64,
    /// The peak RSS of this process, backlog included for the memory broker.
    pub peak_rss_mib: Option<f64>,
    /// Context switches of this process's threads per job during the drain.
    pub switches_per_job: Option<f64>,
    /// CPU time this process spent per job during the drain, every thread (an in-process
    /// broker's own work included), in microseconds. Steadier than the rate when the
    /// machine is shared: it does not count time spent waiting on a server.
    pub cpu_us_per_job: Option<f64>,
}

/// Percentiles of a load run's enqueue-to-start latency, in milliseconds.
#[derive(Debug, Serialize, Deserialize)]
pub struct Latency {
    /// The median.
    pub p50: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The longest recorded (of the sample, in a load of more jobs than it holds).
    #[serde(default)]
    pub max: f64,
}

/// Empties `queue` and enqueues a backlog of `jobs` as `hopper load` writes one (payloads
/// `[index, enqueued_at_µs]`, so `hopper load --prefilled` can drain it), a chunk at a time.
pub(crate) async fn fill(broker: &Arc<dyn Broker>, queue: &str, jobs: usize) -> Result<()> {
    broker.purge(queue).await?;
    for start in (0..jobs).step_by(ENQUEUE_CHUNK) {
        let chunk = (start..jobs.min(start + ENQUEUE_CHUNK))
            .map(|i| NewJob::json(queue, &(i, micros_now())))
            .collect::<Result<Vec<_>>>()?;
        broker.enqueue(chunk).await?;
    }
    Ok(())
}

/// Runs `hopper load --json` in a child process, after migrating the broker's schema;
/// returns its row and its enqueue rate.
pub(crate) async fn hopper_load(
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
        Some(max_batch),
        workload,
        &["--prefetch", "slots"],
    )
    .await
}

/// [`hopper_load`] with other `hopper load` arguments in place of `--prefetch slots`, and
/// `--max-batch` only when `max_batch` is given.
pub(crate) async fn hopper_load_with(
    url: &str,
    jobs: usize,
    concurrency: usize,
    max_batch: Option<usize>,
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
        .args(
            max_batch
                .iter()
                .flat_map(|n| ["--max-batch".to_owned(), n.to_string()]),
        )
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
