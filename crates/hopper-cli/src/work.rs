//! `hopper work QUEUE... -- COMMAND ARGS...`: a worker for any language. Each job runs
//! COMMAND once, with the payload on its standard input and the job in its environment;
//! its exit status settles the job.

use std::io::Write;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;

use clap::Args;
use hopper::{
    ConfigError, JobContext, JobError, JobResult, Prefetch, QueueOptions, Result, Worker,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The exit status with which a command says its job can never succeed: it is
/// dead-lettered at once, whatever attempts are left (sysexits' EX_DATAERR).
pub const DEAD_LETTER_EXIT: i32 = 65;
/// The bytes of a failed command's standard error kept as the attempt's error: its end.
const STDERR_TAIL: usize = 2_048;

#[derive(Debug, Args)]
#[command(after_help = "COMMAND gets the job's payload on standard input and \
    HOPPER_JOB_ID, HOPPER_QUEUE and HOPPER_ATTEMPT in its environment. Exit 0: done. \
    Exit 65: dead-lettered at once. Any other exit, or a signal: a failed attempt, retried \
    with backoff, the end of its standard error kept as the error. SIGTERM or SIGINT: no \
    more jobs are taken, jobs not started go back at once, running commands get --grace to \
    finish and are then killed (with their process group).")]
pub struct WorkArgs {
    /// The queues to work.
    #[arg(required = true)]
    queues: Vec<String>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
    /// Commands running at once, per queue.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Window policy: `slots`, `auto` or a number.
    #[arg(long)]
    prefetch: Option<Prefetch>,
    /// The most jobs one fetch may ask for.
    #[arg(long, default_value_t = hopper::worker::DEFAULT_MAX_BATCH)]
    max_batch: usize,
    /// Kill a command (and its process group) still running after this long: a failed
    /// attempt. `30s`, `5m`.
    #[arg(long)]
    timeout: Option<humantime::Duration>,
    /// Let at most N jobs of each queue start per PERIOD, across every worker of the
    /// broker (`50/1s`), or of each rate key (`"50/1s per key"`): set on the broker before
    /// the first fetch, and kept there.
    #[arg(long, value_name = "N/PERIOD", value_parser = crate::queue::parse_limit)]
    rate_limit: Option<hopper::RateLimit>,
    /// At SIGTERM or SIGINT, how long running commands may finish before they are killed.
    #[arg(long, default_value = "30s")]
    grace: humantime::Duration,
    /// Serve metrics as Prometheus text at this address (`127.0.0.1:9464`): job counters,
    /// durations, fetch sizes, and each queue's depth and lag read every `--sample-every`.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// How often `--metrics` reads the queues' depth and lag from the broker.
    #[arg(long, default_value = "5s")]
    sample_every: humantime::Duration,
}

/// Kills a command's process group when dropped before the command was waited for: a
/// timeout or the end of the grace period drops the job's future, and whatever the
/// command started must stop with it.
struct Group(Option<u32>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            // `kill -- -PGID` signals the whole group; the workspace allows no `unsafe`.
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pgid}")])
                .stderr(Stdio::null())
                .status();
        }
    }
}

pub async fn run(url: &str, args: WorkArgs) -> Result<ExitCode> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| ConfigError::new("COMMAND", "", "a command after --"))?;
    let command = Arc::new((program.clone(), rest.to_vec()));
    let mut options = QueueOptions::new()
        .concurrency(args.concurrency)
        .max_batch(args.max_batch);
    if let Some(p) = args.prefetch {
        options = options.prefetch(p);
    }
    if let Some(t) = args.timeout {
        options = options.timeout(t.into());
    }
    if let Some(limit) = args.rate_limit {
        options = options.rate_limit(limit);
    }
    if let Some(addr) = args.metrics {
        crate::metrics::serve(addr)?;
    }
    let broker = hopper::connect(url).await?;
    let sampler = args.metrics.map(|_| {
        let every = args.sample_every.into();
        tokio::spawn(hopper::sample_queue_metrics(
            broker.clone(),
            args.queues.clone(),
            every,
        ))
    });
    let mut builder = Worker::builder(broker).grace(args.grace.into());
    for queue in &args.queues {
        let command = command.clone();
        let queue_name = queue.clone();
        builder = builder.queue(
            queue,
            options.clone(),
            move |job: JobContext<serde_json::Value>| {
                run_one(command.clone(), queue_name.clone(), job)
            },
        );
    }
    let worker = builder.start()?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| hopper::Error::broker_msg(format!("listening for SIGTERM: {e}")))?;
    // Logged once SIGTERM is handled: from here a stop is a clean one.
    tracing::info!(
        queues = ?args.queues,
        command = %program,
        concurrency = args.concurrency,
        "working"
    );
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    let stats = worker.shutdown().await;
    if let Some(sampler) = sampler {
        sampler.abort();
    }
    eprintln!(
        "hopper work: stopped: {} done, {} retried, {} dead, {} handed back",
        stats.completed, stats.retried, stats.dead, stats.released
    );
    Ok(ExitCode::SUCCESS)
}

/// Runs the command for one job and settles it by the command's exit status.
async fn run_one(
    command: Arc<(String, Vec<String>)>,
    queue: String,
    job: JobContext<serde_json::Value>,
) -> JobResult {
    let (program, args) = &*command;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .env("HOPPER_JOB_ID", job.job.id.to_string())
        .env("HOPPER_QUEUE", &queue)
        .env("HOPPER_ATTEMPT", job.job.attempt.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| JobError::retry(format!("cannot run {program}: {e}")))?;
    let mut group = Group(child.id());
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let payload = job.job.payload;
    // Written beside the command's run: one that exits without reading its input is fine.
    let feed = async move {
        let _ = stdin.write_all(&payload).await;
    };
    let drain = async move {
        let mut tail = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf).await {
            if n == 0 {
                break;
            }
            tail.extend_from_slice(&buf[..n]);
            if tail.len() > STDERR_TAIL {
                tail.drain(..tail.len() - STDERR_TAIL);
            }
        }
        tail
    };
    let (_, tail, status) = tokio::join!(feed, drain, child.wait());
    group.0 = None;
    let status = status.map_err(|e| JobError::retry(format!("waiting for {program}: {e}")))?;
    let said = String::from_utf8_lossy(&tail).trim().to_owned();
    let why = |what: String| {
        let mut out = Vec::new();
        let _ = write!(out, "{program} {what}");
        if !said.is_empty() {
            let _ = write!(out, ": {said}");
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    match status.code() {
        Some(0) => Ok(()),
        Some(DEAD_LETTER_EXIT) => Err(JobError::discard(why(format!(
            "exited {DEAD_LETTER_EXIT} (dead-letter)"
        )))),
        Some(code) => Err(JobError::retry(why(format!("exited {code}")))),
        None => Err(JobError::retry(why("was killed by a signal".to_owned()))),
    }
}
