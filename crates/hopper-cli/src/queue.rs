//! `hopper queue pause|resume|purge QUEUE`: a queue stopped for every worker, started
//! again, or emptied on purpose.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use hopper::{ConfigError, Result};

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Stop every worker of the broker from taking this queue's jobs (within a second);
    /// enqueues are still taken. Jobs already fetched run to the end.
    Pause(QueueArg),
    /// Let workers take the queue's jobs again (within a second).
    Resume(QueueArg),
    /// Delete every job of a queue, in every state. Asks first on a terminal; elsewhere it
    /// needs `--yes`.
    Purge(PurgeArgs),
}

#[derive(Debug, Args)]
pub struct QueueArg {
    /// The queue.
    queue: String,
}

#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// The queue.
    queue: String,
    /// Do not ask.
    #[arg(long)]
    yes: bool,
}

pub async fn run(url: &str, command: QueueCommand) -> Result<ExitCode> {
    let (queue, paused) = match command {
        QueueCommand::Purge(args) => return purge(url, args).await,
        QueueCommand::Pause(QueueArg { queue }) => (queue, true),
        QueueCommand::Resume(QueueArg { queue }) => (queue, false),
    };
    hopper::broker::validate_queue_name(&queue)?;
    let broker = hopper::connect(url).await?;
    let changed = broker.set_paused(&queue, paused).await?;
    let state = if paused { "paused" } else { "resumed" };
    match changed {
        true => println!("{queue}: {state}"),
        false => println!(
            "{queue}: already {}",
            if paused { "paused" } else { "running" }
        ),
    }
    Ok(ExitCode::SUCCESS)
}

async fn purge(url: &str, args: PurgeArgs) -> Result<ExitCode> {
    hopper::broker::validate_queue_name(&args.queue)?;
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            return Err(ConfigError::new(
                "--yes",
                "missing",
                format!("--yes to purge {} without a terminal to ask on", args.queue),
            )
            .into());
        }
        eprint!(
            "Delete every job of queue {} in {}, in every state? [y/N] ",
            args.queue,
            hopper::redact_url(url)
        );
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            eprintln!("nothing deleted");
            return Ok(ExitCode::FAILURE);
        }
    }
    let broker = hopper::connect(url).await?;
    let n = broker.purge(&args.queue).await?;
    println!("{}: {n} jobs deleted", args.queue);
    Ok(ExitCode::SUCCESS)
}
