//! `hopper bench`: the performance matrix of BENCHMARKS.md in one run, one table. The
//! harness is the `hopper-bench` crate; this command parses its flags and runs it.

use std::process::ExitCode;

use clap::Args;
use hopper::Result;

/// `hopper bench`'s flags, one for each field of [`hopper_bench::Options`].
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Workloads to run, comma-separated: memory, sqlite, postgres, mysql, amqp, latency,
    /// idle, rss, instrument (metrics and spans on beside off), features (unique and
    /// ordering keys on beside off).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "memory,sqlite,postgres,mysql,amqp,latency,idle,rss,instrument,features"
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
    /// Round trips to measure the postgres, mysql and amqp rows at, in milliseconds,
    /// comma-separated (e.g. `0,1,5`). 0 reaches the servers as they are. Each other runs
    /// those rows again, named `… @ N ms RTT`, with every connection (the raw baseline's
    /// and Hopper's) through a proxy on 127.0.0.1 that delays each direction by half of it;
    /// their job counts shrink so that a raw drain lasts about 3 s, and `vs 0 ms` sets
    /// Hopper's rate against the same row at 0 ms. Such a run adds, at every round trip,
    /// PostgreSQL and MySQL rows of `hopper load` as users run it: its defaults
    /// (concurrency 10), and concurrency 100 with max_batch 100.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    rtt: Vec<f64>,
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

/// Runs the workloads asked for and prints their rows (see [`hopper_bench::run`]).
pub async fn run(args: BenchArgs) -> Result<ExitCode> {
    let BenchArgs {
        only,
        postgres,
        mysql,
        amqp,
        scale,
        amqp_windows,
        rtt,
        rounds,
        json,
    } = args;
    hopper_bench::run(hopper_bench::Options {
        only,
        postgres,
        mysql,
        amqp,
        scale,
        amqp_windows,
        rtt,
        rounds,
        json,
    })
    .await?;
    Ok(ExitCode::SUCCESS)
}
