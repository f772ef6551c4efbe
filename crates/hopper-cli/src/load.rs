//! `hopper load`: enqueue a backlog first, then drain it with W worker runtimes, each on its
//! own broker connection, and report throughput, fetches and latency.
//!
//! Every job carries its index and its enqueue time. Handlers mark each index seen, so the
//! report counts jobs lost (never run) and duplicates (run more than once) exactly.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use hopper::{
    Broker, ConfigError, Error, JobContext, JobResult, NewJob, Prefetch, QueueOptions, Result,
    Worker, WorkerBuilder,
};
use hopper_bench::load::{ENQUEUE_CHUNK, Latency, Report, micros_now};
use hopper_bench::measure::{
    context_switches, cpu_us_per, peak_rss_mib, percentile, process_cpu_s, switches_per,
};
use tokio::sync::Notify;

use crate::steady;

/// Enqueue calls kept in flight, so the broker is never idle while the next chunk is built
/// and sent: how a producer with a backlog to load would call it.
const ENQUEUE_IN_FLIGHT: usize = 2;
/// A latency slot of a job that has not started.
const NOT_STARTED: u32 = u32::MAX;
/// Consecutive job indexes counted by one [`Stripe`].
const STRIPE: usize = 64;
/// Latencies recorded at most: a larger load records every n-th job's (see
/// [`Tally::started`]).
const LATENCY_SAMPLES: usize = 65_536;

/// What `hopper load --instrument` turns on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Instrument {
    /// A metrics recorder.
    Metrics,
    /// A metrics recorder, and job and fetch spans.
    All,
}

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Jobs to enqueue and drain.
    #[arg(long)]
    jobs: usize,
    /// What each job does: sleep this many milliseconds (0: nothing).
    #[arg(long, default_value_t = 0)]
    job_ms: u64,
    /// Queues to spread the jobs over, comma-separated. They must be empty: a load never
    /// touches jobs it did not make, unless told `--purge-first`.
    #[arg(long, value_delimiter = ',', default_value = "load")]
    queues: Vec<String>,
    /// Delete every job of the queues first, in every state (pending, scheduled, leased,
    /// dead): for a queue a crashed load left jobs on. Without it, a queue holding any job
    /// is refused, named, and nothing is changed.
    #[arg(long, conflicts_with = "prefilled")]
    purge_first: bool,
    /// Handlers running at once per queue, per worker.
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// Window policy: `slots`, `auto` or a number (default: the broker's default).
    #[arg(long)]
    prefetch: Option<Prefetch>,
    /// The most jobs one fetch may ask for.
    #[arg(long, default_value_t = hopper::worker::DEFAULT_MAX_BATCH)]
    max_batch: usize,
    /// Worker runtimes, each with its own broker connection.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Record the worker's metrics (kept, not served), and with `all` its job and fetch
    /// spans too (at `info`, through the log subscriber): to measure what that costs.
    #[arg(long, value_enum)]
    pub instrument: Option<Instrument>,
    /// Give each job a unique key of its own (`load-INDEX`): to measure what keys cost.
    #[arg(long)]
    unique_keys: bool,
    /// Give job INDEX the ordering key `load-(INDEX mod N)`, so each key holds about
    /// jobs/N jobs that run one at a time: to measure what ordered keys cost.
    #[arg(long, value_name = "N", conflicts_with = "unique_keys",
          value_parser = clap::value_parser!(u64).range(1..))]
    ordering_keys: Option<u64>,
    /// Give job INDEX the rate key `load-(INDEX mod N)`: with `--rate-limit "…per key"`, to
    /// measure what a limit per key costs.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    rate_keys: Option<u64>,
    /// Limit each queue as `hopper work --rate-limit` does (`5000/1s`, or `"500/1s per
    /// key"`) while the load runs, and lift the limit after. The load waits for every job:
    /// a limit that holds them back for long ends it at its stall timeout.
    #[arg(long, value_name = "N/PERIOD", value_parser = crate::queue::parse_limit)]
    rate_limit: Option<hopper::RateLimit>,
    /// Use a batch handler taking batches of this size.
    #[arg(long)]
    batch: Option<usize>,
    /// With --batch: close a batch this many milliseconds after its first job.
    #[arg(long, default_value_t = 50)]
    batch_wait: u64,
    /// The queues already hold the jobs, as `hopper bench` leaves them before a raw
    /// baseline: payloads `[index, enqueued_at_µs]` for every index below `--jobs`, spread
    /// over the queues in turn. Nothing is purged or enqueued, so the drain starts from the
    /// same backlog a raw consumer gets; `enqueue_s` is then 0.
    #[arg(long)]
    prefilled: bool,
    /// Enqueue the jobs at this many a second while the workers run, instead of as a
    /// backlog before they start: the latency is then each job's wait in service.
    #[arg(long)]
    rate: Option<u32>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// How many jobs of one stripe of [`STRIPE`] consecutive indexes ran at least once, on a
/// cache line of its own. A hand-off carries consecutive indexes, so handlers on two
/// threads count in different stripes; one counter for every job was a line bounced
/// between the cores on each job.
#[repr(align(128))]
struct Stripe(AtomicU32);

struct Tally {
    seen: Vec<AtomicU8>,
    stripes: Vec<Stripe>,
    /// Stripes whose every job ran.
    full_stripes: AtomicUsize,
    duplicates: AtomicU64,
    /// Each sampled job's enqueue-to-start latency, in its own slot ([`NOT_STARTED`]
    /// until it starts), so recording one takes no lock shared by every handler.
    latencies_us: Vec<AtomicU32>,
    /// Every how many jobs one's latency is recorded.
    latency_every: usize,
    /// Latencies of second and later starts of a job (duplicates), which must count too.
    extra_latencies_us: std::sync::Mutex<Vec<u32>>,
    all_seen: Notify,
    total: u64,
}

impl Tally {
    fn new(jobs: usize) -> Self {
        let latency_every = jobs.div_ceil(LATENCY_SAMPLES).max(1);
        Tally {
            seen: (0..jobs).map(|_| AtomicU8::new(0)).collect(),
            stripes: (0..jobs.div_ceil(STRIPE))
                .map(|_| Stripe(AtomicU32::new(0)))
                .collect(),
            full_stripes: AtomicUsize::new(0),
            duplicates: AtomicU64::new(0),
            latencies_us: (0..jobs.div_ceil(latency_every))
                .map(|_| AtomicU32::new(NOT_STARTED))
                .collect(),
            latency_every,
            extra_latencies_us: std::sync::Mutex::new(Vec::new()),
            all_seen: Notify::new(),
            total: jobs as u64,
        }
    }

    /// A job started: its enqueue-to-start latency, if the job is one of the sample. A
    /// load of over [`LATENCY_SAMPLES`] jobs records every n-th job's, evenly over the
    /// whole drain: the percentiles come out the same, and a clock read on every job was
    /// a twelfth of a memory drain's time, the harness's cost and not Hopper's.
    fn started(&self, index: usize, enqueued_us: u64) {
        if index % self.latency_every != 0 {
            return;
        }
        let now_us = micros_now();
        let lat = now_us
            .saturating_sub(enqueued_us)
            .min(u64::from(NOT_STARTED - 1)) as u32;
        let slot = self.latencies_us.get(index / self.latency_every);
        let first = slot.is_some_and(|slot| {
            slot.compare_exchange(NOT_STARTED, lat, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        });
        if !first {
            if let Ok(mut l) = self.extra_latencies_us.lock() {
                l.push(lat);
            }
        }
    }

    /// Every latency recorded, in milliseconds, unsorted.
    fn latencies_ms(&self) -> Vec<f64> {
        let mut out: Vec<f64> = self
            .latencies_us
            .iter()
            .map(|slot| slot.load(Ordering::Relaxed))
            .filter(|&us| us != NOT_STARTED)
            .map(|us| us as f64 / 1000.0)
            .collect();
        if let Ok(l) = self.extra_latencies_us.lock() {
            out.extend(l.iter().map(|&us| us as f64 / 1000.0));
        }
        out
    }

    /// A job's work is done: the drain ends when every job finished, not started, so that
    /// `--job-ms` jobs are all run before the workers stop.
    fn finished(&self, index: usize) {
        let Some(seen) = self.seen.get(index) else {
            return;
        };
        if seen.fetch_add(1, Ordering::Relaxed) > 0 {
            self.duplicates.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let stripe = index / STRIPE;
        let size = STRIPE.min(self.seen.len() - stripe * STRIPE) as u32;
        if self.stripes[stripe].0.fetch_add(1, Ordering::Relaxed) + 1 == size
            && self.full_stripes.fetch_add(1, Ordering::Relaxed) + 1 == self.stripes.len()
        {
            self.all_seen.notify_one();
        }
    }

    /// Jobs run at least once.
    fn distinct(&self) -> u64 {
        self.stripes
            .iter()
            .map(|s| u64::from(s.0.load(Ordering::Relaxed)))
            .sum()
    }
}

/// The outcome of one spawned enqueue call.
fn joined<T: Default>(
    done: Option<std::result::Result<Result<T>, tokio::task::JoinError>>,
) -> Result<T> {
    match done {
        Some(Ok(result)) => result,
        Some(Err(e)) => Err(Error::broker_msg(format!("an enqueue task failed: {e}"))),
        None => Ok(T::default()),
    }
}

fn validate(args: &LoadArgs) -> Result<()> {
    let refuse = |setting: &str, value: &dyn std::fmt::Display, allowed: &str| {
        Err(Error::Config(ConfigError::new(setting, value, allowed)))
    };
    if args.jobs == 0 {
        return refuse("--jobs", &0, "1 or more");
    }
    if args.workers == 0 {
        return refuse("--workers", &0, "1 or more");
    }
    if args.queues.is_empty() {
        return refuse("--queues", &"", "one or more queue names");
    }
    if args.batch == Some(0) {
        return refuse("--batch", &0, "1 or more");
    }
    if args.rate == Some(0) {
        return refuse("--rate", &0, "1 or more jobs a second");
    }
    if args.rate.is_some() && args.prefilled {
        return refuse("--rate", &"with --prefilled", "one or the other");
    }
    Ok(())
}

/// Refuses a queue that holds any job: a load counts every job it drains as its own, and
/// must never purge an application's jobs without being told to.
async fn refuse_unless_empty(broker: &Arc<dyn Broker>, queue: &str) -> Result<()> {
    let c = broker.counts(queue).await?;
    let held = c.pending + c.scheduled + c.leased + c.dead;
    if held == 0 {
        return Ok(());
    }
    let found = format!(
        "{queue} ({held} jobs: {} pending, {} scheduled, {} leased, {} dead)",
        c.pending, c.scheduled, c.leased, c.dead
    );
    Err(hopper::ConfigError::new(
        "queues",
        found,
        "empty queues only: name another with --queues, or pass --purge-first to delete \
         its jobs first",
    )
    .into())
}

/// Runs the load and prints the report; exit 1 when a job was lost.
pub async fn run(url: &str, args: LoadArgs) -> Result<ExitCode> {
    validate(&args)?;
    let _recorder = args
        .instrument
        .map(|_| crate::metrics::record())
        .transpose()?;
    let producer = hopper::connect(url).await?;
    let tally = Arc::new(Tally::new(args.jobs));
    // Every worker's settings are checked before anything is enqueued or purged.
    let in_process = producer.capabilities().in_process;
    let mut builders = Vec::with_capacity(args.workers);
    for _ in 0..args.workers {
        // An in-process broker exists once: every worker shares it. Others connect anew.
        let broker: Arc<dyn Broker> = if in_process {
            producer.clone()
        } else {
            hopper::connect(url).await?
        };
        builders.push(build_worker(broker, &args, tally.clone())?);
    }
    if !args.prefilled {
        for q in &args.queues {
            if args.purge_first {
                producer.purge(q).await?;
            } else {
                refuse_unless_empty(&producer, q).await?;
            }
        }
    }
    let mut enqueue_s = match (args.prefilled, args.rate) {
        (false, None) => enqueue(&producer, &args).await?,
        _ => 0.0,
    };

    let mut workers = Vec::with_capacity(args.workers);
    let cpu_before = process_cpu_s();
    let switches_before = context_switches();
    let drain_started = Instant::now();
    for worker in builders {
        workers.push(worker.start()?);
    }
    let steady = args.rate.map(|rate| {
        let (producer, queues) = (producer.clone(), args.queues.clone());
        tokio::spawn(steady::produce(producer, queues, args.jobs, rate))
    });

    // Wait for every job, or give up when nothing new ran for a long while.
    let stall = Duration::from_secs(30) + Duration::from_millis(args.job_ms * 4);
    let mut last = 0;
    let mut last_progress = Instant::now();
    let bar = crate::report::progress(tally.total, "jobs run");
    loop {
        let waited =
            tokio::time::timeout(Duration::from_millis(200), tally.all_seen.notified()).await;
        let distinct = tally.distinct();
        bar.set_position(distinct);
        if waited.is_ok() || distinct >= tally.total {
            break;
        }
        if distinct != last {
            last = distinct;
            last_progress = Instant::now();
        } else if last_progress.elapsed() > stall {
            eprintln!(
                "no progress for {stall:?}: stopping with {distinct} of {} jobs run",
                tally.total
            );
            break;
        }
    }
    bar.finish_and_clear();
    let drain_s = drain_started.elapsed().as_secs_f64();
    if let Some(producer) = steady {
        enqueue_s = joined(Some(producer.await))?;
    }
    let cpu_after = process_cpu_s();
    let switches_after = context_switches();
    // Read before the report's own tables (a latency per job) are built: the workers' peak.
    let peak_rss = peak_rss_mib();

    let mut all_stats = Vec::with_capacity(workers.len());
    for w in workers {
        all_stats.push(w.shutdown_with(Duration::from_secs(5)).await);
    }
    if args.rate_limit.is_some() {
        for q in &args.queues {
            producer.set_rate_limit(q, None).await?;
        }
    }
    let completed = tally.distinct();
    let fetches: u64 = all_stats.iter().map(|s| s.fetches).sum();
    let fetched: u64 = all_stats.iter().map(|s| s.fetched_jobs).sum();
    let mut lat = tally.latencies_ms();
    lat.sort_by(f64::total_cmp);
    let report = Report {
        broker: hopper::redact_url(url),
        jobs: args.jobs,
        completed,
        lost: args.jobs as u64 - completed,
        duplicates: tally.duplicates.load(Ordering::Relaxed),
        fetches,
        jobs_per_fetch: if fetches == 0 {
            0.0
        } else {
            fetched as f64 / fetches as f64
        },
        batch_sizes: all_stats
            .iter()
            .flat_map(|s| s.batch_sizes.iter().copied())
            .collect(),
        workers: args.workers,
        concurrency: args.concurrency,
        prefetch: args.prefetch.map_or("default".into(), |p| p.to_string()),
        enqueue_s,
        drain_s,
        jobs_per_s: completed as f64 / drain_s.max(1e-9),
        latency_ms: Latency {
            p50: percentile(&lat, 50.0),
            p99: percentile(&lat, 99.0),
            max: lat.last().copied().unwrap_or(0.0),
        },
        settle_calls: all_stats.iter().map(|s| s.settle_calls).sum(),
        pool_tasks_started: all_stats.iter().map(|s| s.pool_tasks_started).sum(),
        jobs_per_handoff: fetched as f64
            / all_stats.iter().map(|s| s.handoffs).sum::<u64>().max(1) as f64,
        inline_handoffs: all_stats.iter().map(|s| s.inline_handoffs).sum(),
        peak_rss_mib: peak_rss,
        cpu_us_per_job: cpu_us_per(cpu_before, cpu_after, completed),
        switches_per_job: switches_per(switches_before, switches_after, completed),
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| Error::Encode(e.to_string()))?
        );
    } else {
        crate::report::print_load(&report);
    }
    Ok(if report.lost == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Enqueues the backlog into the purged queues; returns the seconds it took.
async fn enqueue(producer: &Arc<dyn Broker>, args: &LoadArgs) -> Result<f64> {
    let started = Instant::now();
    let mut chunk = Vec::with_capacity(ENQUEUE_CHUNK);
    let mut in_flight = tokio::task::JoinSet::new();
    for i in 0..args.jobs {
        let queue = &args.queues[i % args.queues.len()];
        let job = NewJob::json(queue, &(i, micros_now()))?;
        let job = match (args.unique_keys, args.ordering_keys) {
            (true, _) => job.unique_key(format!("load-{i}")),
            (false, Some(n)) => job.ordering_key(format!("load-{}", i as u64 % n)),
            (false, None) => job,
        };
        chunk.push(match args.rate_keys {
            Some(n) => job.rate_key(format!("load-{}", i as u64 % n)),
            None => job,
        });
        if chunk.len() == ENQUEUE_CHUNK || i + 1 == args.jobs {
            if in_flight.len() == ENQUEUE_IN_FLIGHT {
                joined(in_flight.join_next().await)?;
            }
            let (producer, jobs) = (producer.clone(), std::mem::take(&mut chunk));
            in_flight.spawn(async move { producer.enqueue(jobs).await.map(drop) });
        }
    }
    while let Some(done) = in_flight.join_next().await {
        joined(Some(done))?;
    }
    Ok(started.elapsed().as_secs_f64())
}

fn build_worker(
    broker: Arc<dyn Broker>,
    args: &LoadArgs,
    tally: Arc<Tally>,
) -> Result<WorkerBuilder> {
    let mut opts = QueueOptions::new()
        .concurrency(args.concurrency)
        .max_batch(args.max_batch);
    if let Some(p) = args.prefetch {
        opts = opts.prefetch(p);
    }
    if let Some(limit) = args.rate_limit {
        opts = opts.rate_limit(limit);
    }
    let job_ms = args.job_ms;
    let mut builder = Worker::builder(broker);
    for q in &args.queues {
        let tally = tally.clone();
        builder = match args.batch {
            None => builder.queue(q, opts.clone(), move |job: JobContext<(usize, u64)>| {
                let index = job.payload.0;
                tally.started(index, job.payload.1);
                // A job that does nothing is done here; only one that sleeps takes the
                // tally along (a count shared by every handler, on every job).
                let sleeper = (job_ms > 0).then(|| tally.clone());
                if sleeper.is_none() {
                    tally.finished(index);
                }
                async move {
                    if let Some(tally) = sleeper {
                        tokio::time::sleep(Duration::from_millis(job_ms)).await;
                        tally.finished(index);
                    }
                    Ok(())
                }
            }),
            Some(size) => builder.batch_queue(
                q,
                opts.clone()
                    .batch(size, Duration::from_millis(args.batch_wait)),
                move |jobs: Vec<JobContext<(usize, u64)>>| {
                    for job in &jobs {
                        tally.started(job.payload.0, job.payload.1);
                    }
                    let tally = tally.clone();
                    async move {
                        if job_ms > 0 {
                            tokio::time::sleep(Duration::from_millis(job_ms)).await;
                        }
                        for job in &jobs {
                            tally.finished(job.payload.0);
                        }
                        jobs.iter().map(|_| JobResult::Ok(())).collect()
                    }
                },
            ),
        };
    }
    builder.check()?;
    Ok(builder)
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    /// 130 jobs: stripes of 64, 64 and 2. Every job is counted once whatever the order and
    /// the repeats, and the wait ends on the last new one, not before.
    #[test]
    fn the_tally_counts_each_job_once_and_signals_the_last() {
        let tally = Tally::new(130);
        let signalled = || tally.all_seen.notified().now_or_never().is_some();
        for i in (0..130).rev().filter(|&i| i != 64) {
            tally.finished(i);
        }
        tally.finished(129);
        tally.finished(0);
        assert_eq!(
            (tally.distinct(), tally.duplicates.load(Ordering::Relaxed)),
            (129, 2)
        );
        assert!(!signalled(), "job 64 has not run");
        tally.finished(64);
        assert_eq!(tally.distinct(), 130);
        assert!(signalled());
        tally.finished(200); // no such job: ignored
        assert_eq!(tally.distinct(), 130);
    }

    /// A small load records every job's latency; one of 200,000 jobs every fourth job's
    /// (at most 65,536 slots), a repeat start of a sampled job too.
    #[test]
    fn the_tally_samples_latencies_of_large_loads() {
        let small = Tally::new(130);
        for i in 0..130 {
            small.started(i, 0);
        }
        assert_eq!(small.latencies_ms().len(), 130);

        let large = Tally::new(200_000);
        assert_eq!((large.latency_every, large.latencies_us.len()), (4, 50_000));
        for i in 0..1_000 {
            large.started(i, 0);
        }
        large.started(8, 0);
        large.started(9, 0);
        assert_eq!(large.latencies_ms().len(), 250 + 1);
    }
}
