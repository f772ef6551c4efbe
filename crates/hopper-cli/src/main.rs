//! The `hopper` command. Thin: parse arguments, call the command's module.
//!
//! # Layout
//! - `bench`: the performance matrix, raw baselines beside Hopper (`hopper bench`): its
//!   flags; the harness is the `hopper-bench` crate.
//! - `demo`: the prefetch demonstration (`hopper demo`).
//! - `enqueue`: jobs from the command line or standard input (`hopper enqueue`).
//! - `inspect`: one job's record (`hopper jobs show`), a queue purged (`hopper queue purge`).
//! - `load`: enqueue a backlog and drain it, printing throughput and latency (`hopper load`).
//! - `migrate`: bring a SQL broker's schema up to date (`hopper migrate`).
//! - `report`: small formatting helpers shared by the commands.
//! - `work`: a worker that runs a command per job, for any language (`hopper work`).

mod bench;
mod demo;
mod enqueue;
mod inspect;
mod load;
mod migrate;
mod report;
mod steady;
mod work;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "hopper",
    version,
    about = "Background jobs and messages: enqueue, work, inspect and purge jobs; demonstrate, load-test, benchmark and migrate brokers",
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
    /// Inspect jobs.
    Jobs {
        #[command(subcommand)]
        command: inspect::JobsCommand,
    },
    /// Act on a queue.
    Queue {
        #[command(subcommand)]
        command: inspect::QueueCommand,
    },
    /// Work queues by running a command per job (payload on its standard input).
    Work(work::WorkArgs),
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
fn init_logs(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
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
    init_logs(cli.log_format);
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
            Command::Jobs { command } => inspect::jobs(&cli.broker, command).await,
            Command::Queue { command } => inspect::queue(&cli.broker, command).await,
            Command::Work(args) => work::run(&cli.broker, args).await,
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
