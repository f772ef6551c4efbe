//! `hopper enqueue QUEUE [PAYLOAD]`: jobs from the command line, or one per line of JSON on
//! standard input, with the options a producer sets in code. Prints each new job's id, or,
//! for a job whose unique key another job holds, that job's id (and says so on stderr).

use std::io::BufRead;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::Args;
use hopper::{ConfigError, NewJob, Result, UniqueScope};

/// Jobs sent per enqueue call when reading standard input.
const CHUNK: usize = 1_000;

#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// The queue.
    queue: String,
    /// The payload, as JSON. Without it, each line of standard input is one job's JSON
    /// payload (blank lines skipped).
    payload: Option<String>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i32,
    /// Run no earlier than this long after enqueue: `30s`, `5m`, `1h 30m`.
    #[arg(long, conflicts_with = "at")]
    delay: Option<humantime::Duration>,
    /// Run no earlier than this time, RFC 3339 (`2026-12-05T10:00:00Z`); not in the past.
    #[arg(long)]
    at: Option<String>,
    /// Attempts before the job is dead-lettered.
    #[arg(long, default_value_t = hopper::broker::DEFAULT_MAX_ATTEMPTS)]
    max_attempts: u32,
    /// A header, `NAME=VALUE`; repeat for more.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    headers: Vec<String>,
    /// A unique key: while a job of the queue holds it, no other job with it is stored
    /// and the holder's id is printed instead.
    #[arg(long, value_name = "KEY")]
    unique_key: Option<String>,
    /// How long the key is held: `unfinished` (until the job completes, dies or is
    /// cancelled), `queued` (until a worker first takes it), or a period from the
    /// enqueue (`10m`, `1h`).
    #[arg(
        long,
        value_name = "SCOPE",
        requires = "unique_key",
        default_value = "unfinished"
    )]
    unique_for: String,
    /// An ordering key: jobs of the queue with the same key run one at a time, in the
    /// order they were enqueued (from standard input: in line order). A job with a
    /// unique key too takes its place on the key only when it is stored.
    #[arg(long, value_name = "KEY")]
    ordering_key: Option<String>,
    /// A group: the jobs join it, and once it is sealed (`hopper group seal`) and every
    /// member has settled, its completion job is enqueued.
    #[arg(long, value_name = "GROUP", conflicts_with_all = ["unique_key", "ordering_key"])]
    group: Option<String>,
    /// A rate key: under a limit per key (`hopper queue limit Q 5/1s --per-key`), the
    /// jobs' starts count against this key's window.
    #[arg(long, value_name = "KEY")]
    rate_key: Option<String>,
    /// The rate key from this field of each job's JSON payload (an object).
    #[arg(long, value_name = "FIELD", conflicts_with = "rate_key")]
    rate_key_from: Option<String>,
}

/// Reads the jobs, enqueues them in chunks, prints their ids, one a line.
pub async fn run(url: &str, args: EnqueueArgs) -> Result<ExitCode> {
    let template = template(&args)?;
    let payloads: Vec<Vec<u8>> = match &args.payload {
        Some(text) => vec![json_payload("PAYLOAD", text)?],
        None => {
            let mut out = Vec::new();
            for (n, line) in std::io::stdin().lock().lines().enumerate() {
                let line = line.map_err(|e| {
                    ConfigError::new("standard input", format!("line {}", n + 1), e.to_string())
                })?;
                if !line.trim().is_empty() {
                    out.push(json_payload(&format!("line {}", n + 1), &line)?);
                }
            }
            out
        }
    };
    if let Some(field) = &args.rate_key_from {
        // Every payload has the field before any job is stored.
        for p in &payloads {
            NewJob::new(&args.queue, p.clone()).rate_key_from(field)?;
        }
    }
    let broker = hopper::connect(url).await?;
    // Only a bulk load from standard input is long enough to want a bar.
    let bar = match args.payload {
        Some(_) => indicatif::ProgressBar::hidden(),
        None => crate::report::progress(payloads.len() as u64, "jobs enqueued"),
    };
    for chunk in payloads.chunks(CHUNK) {
        let jobs = chunk
            .iter()
            .map(|p| {
                let job = NewJob {
                    payload: p.clone(),
                    ..template.clone()
                };
                match &args.rate_key_from {
                    Some(field) => job.rate_key_from(field),
                    None => Ok(job),
                }
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for done in broker.enqueue_reported(jobs).await? {
            if done.existing {
                eprintln!(
                    "job {} already holds unique key `{}`: nothing enqueued",
                    done.id,
                    args.unique_key.as_deref().unwrap_or_default()
                );
            }
            println!("{}", done.id);
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    Ok(ExitCode::SUCCESS)
}

/// The job every payload is enqueued as: the options, checked before anything is read.
fn template(args: &EnqueueArgs) -> Result<NewJob> {
    let mut job = NewJob::new(&args.queue, Vec::new())
        .priority(args.priority)
        .max_attempts(args.max_attempts);
    if let Some(delay) = args.delay {
        job = job.delay(Duration::from(delay));
    }
    if let Some(at) = &args.at {
        let time = humantime::parse_rfc3339_weak(at).map_err(|e| {
            ConfigError::new(
                "--at",
                at,
                format!("an RFC 3339 time such as 2026-12-05T10:00:00Z ({e})"),
            )
        })?;
        if time < SystemTime::now() {
            return Err(ConfigError::new("--at", at, "a time not in the past").into());
        }
        job = job.run_at(time);
    }
    for header in &args.headers {
        let Some((name, value)) = header.split_once('=') else {
            return Err(ConfigError::new("--header", header, "NAME=VALUE").into());
        };
        job = job.header(name, value);
    }
    if let Some(key) = &args.unique_key {
        job = job.unique(key, unique_scope(&args.unique_for)?);
    }
    if let Some(key) = &args.ordering_key {
        job = job.ordering_key(key);
    }
    if let Some(key) = &args.rate_key {
        job = job.rate_key(key);
    }
    if let Some(group) = &args.group {
        job = job.group(group);
    }
    job.validate()?;
    Ok(job)
}

/// Reads `--unique-for`.
fn unique_scope(text: &str) -> Result<UniqueScope> {
    match text {
        "unfinished" => Ok(UniqueScope::Unfinished),
        "queued" => Ok(UniqueScope::Queued),
        period => match humantime::parse_duration(period) {
            Ok(d) => Ok(UniqueScope::For(d)),
            Err(e) => Err(ConfigError::new(
                "--unique-for",
                period,
                format!("`unfinished`, `queued`, or a period such as 10m ({e})"),
            )
            .into()),
        },
    }
}

/// `text` as a payload, if it is JSON; `what` names it in the refusal.
pub fn json_payload(what: &str, text: &str) -> Result<Vec<u8>> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(_) => Ok(text.trim().as_bytes().to_vec()),
        Err(e) => Err(ConfigError::new(what, text, format!("JSON ({e})")).into()),
    }
}
