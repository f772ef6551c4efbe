//! The `hopper` command. Thin: parse arguments, call the command's module.
//!
//! # Layout
//! - `bench`: the performance matrix, raw baselines beside Hopper (`hopper bench`): its
//!   flags; the harness is the `hopper-bench` crate.
//! - `demo`: the prefetch demonstration (`hopper demo`).
//! - `enqueue`: jobs from the command line or standard input (`hopper enqueue`).
//! - `jobs`: a page of a queue's jobs, one job's record (`hopper jobs list|show`).
//! - `dead`: dead letters retried or discarded (`hopper dead retry|discard`).
//! - `queue`: a queue paused, resumed or purged (`hopper queue pause|resume|purge`).
//! - `stats`: every queue's counts, lag and pause (`hopper stats [--watch]`).
//! - `load`: enqueue a backlog and drain it, printing throughput and latency (`hopper load`).
//! - `metrics`: the Prometheus exporter of `hopper work --metrics` and `load --instrument`.
//! - `migrate`: bring a SQL broker's schema up to date (`hopper migrate`).
//! - `report`: tables, times, payloads and progress bars shared by the commands.
//! - `serve`: the dashboard's JSON API (`hopper serve`); the server is the `hopper-web` crate.
//! - `work`: a worker that runs a command per job, for any language (`hopper work`).
//! - `workers`: the live workers a broker lists (`hopper workers`).

mod bench;
mod cron;
mod dead;
mod demo;
mod enqueue;
mod group;
mod jobs;
mod load;
mod metrics;
mod migrate;
mod queue;
mod report;
mod serve;
mod stats;
mod steady;
mod work;
mod workers;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "hopper",
    version,
    about = "Background jobs and messages: enqueue and work jobs; list, retry and discard them; pause, resume and purge queues; list live workers; serve a JSON API for dashboards; demonstrate, load-test, benchmark and migrate brokers",
    after_help = "Exit codes: 0 done; 1 the operation failed (a broker error, a lost job, a \
                  failed check); 2 bad usage (an unknown command or flag, a value refused).\n\
                  Logs go to standard error: RUST_LOG sets what is logged (default `warn`; \
                  `hopper=debug,info` and so on), --log-format how."
)]
struct Cli {
    /// Broker URL: memory://, sqlite://PATH, postgres://USER:PASSWORD@HOST/DB[?schema=NAME], mysql://USER:PASSWORD@HOST/DB, amqp://USER:PASSWORD@HOST:PORT/VHOST.
    #[arg(long, global = true, default_value = hopper::DEFAULT_BROKER_URL, env = "HOPPER_BROKER")]
    broker: String,
    /// Log lines as text (coloured only on a terminal) or as one JSON object each.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "HOPPER_LOG_FORMAT"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show how prefetch sizes fetches: prefetch 1, then auto on short and on long jobs.
    Demo,
    /// Enqueue jobs: one from the arguments, or one per line of JSON on standard input.
    Enqueue(enqueue::EnqueueArgs),
    /// Every queue's jobs by state, lag, pause and throughput, once or redrawn (`--watch`).
    Stats(stats::StatsArgs),
    /// List a queue's jobs by state, or show one job with the error of each attempt.
    Jobs {
        #[command(subcommand)]
        command: jobs::JobsCommand,
    },
    /// Retry or discard dead letters.
    Dead {
        #[command(subcommand)]
        command: dead::DeadCommand,
    },
    /// Pause, resume, purge or rate-limit a queue.
    Queue {
        #[command(subcommand)]
        command: queue::QueueCommand,
    },
    /// Groups of jobs: seal one with its completion job, or show how its members did.
    Group {
        #[command(subcommand)]
        command: group::GroupCommand,
    },
    /// Periodic jobs: the schedules live workers hold, with their next and latest slots.
    Cron {
        #[command(subcommand)]
        command: cron::CronCommand,
    },
    /// Serve the dashboard's JSON API (queues, jobs, dead letters, workers) over HTTP.
    Serve(serve::ServeArgs),
    /// Work queues by running a command per job (payload on its standard input).
    Work(work::WorkArgs),
    /// The live workers: host, pid, queues, what they hold, their last report.
    Workers(workers::WorkersArgs),
    /// Enqueue a backlog, drain it with one or more workers, and report the figures.
    Load(load::LoadArgs),
    /// Run the performance matrix: raw baselines beside Hopper, one table (BENCHMARKS.md).
    Bench(bench::BenchArgs),
    /// Create or upgrade the broker's schema (PostgreSQL, MySQL); a no-op elsewhere.
    Migrate,
}

/// `demo` and `load` work on queues of their own making: on RabbitMQ, where the library
/// declares nothing unless asked, they ask (`declare=true`) unless the URL says otherwise.
fn own_queues(url: &str) -> String {
    if !url.starts_with("amqp://") || url.contains("declare=") {
        return url.to_owned();
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}declare=true")
}

/// Logs to standard error, filtered by `RUST_LOG` (default `warn`), in `format`; colour
/// codes only when standard error is a terminal, so none reach a pipe or a file.
fn init_logs(format: LogFormat, spans: bool) {
    use std::io::IsTerminal;
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    if spans {
        for directive in ["hopper::job=info", "hopper::fetch=info"] {
            filter = filter.add_directive(directive.parse().expect("a valid directive"));
        }
    }
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let spans = matches!(&cli.command, Command::Load(args) if args.instrument == Some(load::Instrument::All));
    init_logs(cli.log_format, spans);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Demo => demo::run(&own_queues(&cli.broker)).await,
            Command::Enqueue(args) => enqueue::run(&cli.broker, args).await,
            Command::Stats(args) => stats::run(&cli.broker, args).await,
            Command::Jobs { command } => jobs::run(&cli.broker, command).await,
            Command::Dead { command } => dead::run(&cli.broker, command).await,
            Command::Queue { command } => queue::run(&cli.broker, command).await,
            Command::Cron { command } => cron::run(&cli.broker, command).await,
            Command::Group { command } => group::run(&cli.broker, command).await,
            Command::Serve(args) => serve::run(&cli.broker, args).await,
            Command::Work(args) => work::run(&cli.broker, args).await,
            Command::Workers(args) => workers::run(&cli.broker, args).await,
            Command::Load(args) => load::run(&own_queues(&cli.broker), args).await,
            Command::Bench(args) => bench::run(args).await,
            Command::Migrate => migrate::run(&cli.broker).await,
        }
    });
    match result {
        Ok(code) => code,
        // A value refused before anything ran is bad usage, as clap's own refusals are.
        Err(e @ hopper::Error::Config(_)) => {
            eprintln!("error: {}", e.chain());
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {}", e.chain());
            ExitCode::FAILURE
        }
    }
}
