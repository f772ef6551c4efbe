//! `hopper queue pause|resume|purge|limit QUEUE`: a queue stopped for every worker, started
//! again, emptied on purpose, or limited to so many starts per window.

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
    /// Let at most N of the queue's jobs start in any window of a period, across every
    /// worker of the broker (`50/1s`, `1000/1h`), or of each rate key's jobs with
    /// `--per-key`; or lift the limit with `--off`.
    Limit(LimitArgs),
}

#[derive(Debug, Args)]
pub struct LimitArgs {
    /// The queue.
    queue: String,
    /// Starts per window: `N/PERIOD`, such as `50/1s`, `10/500ms` or `1000/1h`.
    #[arg(required_unless_present = "off", conflicts_with = "off")]
    limit: Option<String>,
    /// A window for each rate key of the queue's jobs (`hopper enqueue --rate-key`), not
    /// one for the queue: `5/1s --per-key` lets every key's jobs start 5 times a second.
    #[arg(long, conflicts_with = "off")]
    per_key: bool,
    /// Lift the queue's limit.
    #[arg(long)]
    off: bool,
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
        QueueCommand::Limit(args) => return limit(url, args).await,
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

/// Reads `N/PERIOD` as a rate limit, or `N/PERIOD per key` as a limit per key (as limits
/// are shown), refusing by name what is not one.
pub fn parse_limit(text: &str) -> Result<hopper::RateLimit> {
    let refused = |why: String| ConfigError::new("rate limit", text, why);
    if let Some(limit) = text.trim_end().strip_suffix("per key") {
        return Ok(parse_limit(limit)?.per_key());
    }
    let Some((max, per)) = text.split_once('/') else {
        return Err(refused("N/PERIOD, such as 50/1s".into()).into());
    };
    let max: u32 = max
        .trim()
        .parse()
        .map_err(|_| refused(format!("a whole number of jobs before `/`, not `{max}`")))?;
    let per = humantime::parse_duration(per.trim())
        .map_err(|e| refused(format!("a period after `/` such as 1s or 500ms: {e}")))?;
    Ok(hopper::RateLimit::new(max, per)?)
}

async fn limit(url: &str, args: LimitArgs) -> Result<ExitCode> {
    hopper::broker::validate_queue_name(&args.queue)?;
    let limit = match &args.limit {
        Some(text) if args.per_key => Some(parse_limit(text)?.per_key()),
        Some(text) => Some(parse_limit(text)?),
        None => None,
    };
    let broker = hopper::connect(url).await?;
    broker.set_rate_limit(&args.queue, limit).await?;
    match limit {
        Some(l) if l.per_key => {
            let each = hopper::RateLimit {
                per_key: false,
                ..l
            };
            println!("{}: at most {each} jobs of each rate key start", args.queue)
        }
        Some(l) => println!("{}: at most {l} jobs start", args.queue),
        None => println!("{}: no rate limit", args.queue),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::parse_limit;

    #[test]
    fn limits_are_read_or_refused_by_name() {
        let l = parse_limit("50/1s").unwrap();
        assert_eq!((l.max, l.per.as_millis()), (50, 1000));
        assert_eq!(parse_limit(" 10 / 500ms ").unwrap().to_string(), "10/500ms");
        let keyed = parse_limit("5/1s per key").unwrap();
        assert_eq!(
            (keyed.per_key, keyed.to_string()),
            (true, "5/1s per key".into())
        );
        for bad in ["50", "x/1s", "50/soon", "0/1s", "5/0s", "-1/1s"] {
            let e = parse_limit(bad).unwrap_err().to_string();
            assert!(e.contains("rate limit"), "{bad}: {e}");
        }
    }
}
