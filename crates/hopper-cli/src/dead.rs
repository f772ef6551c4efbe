//! `hopper dead retry|discard (ID… | --queue Q --all)`: dead letters sent back to their
//! queue with attempts reset, or deleted.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use hopper::{Broker, JobId, JobState, Result, Selection};

use crate::jobs::parse_id;
use crate::report::progress;

/// Dead letters taken per call with `--all`: small enough that no statement holds a
/// million rows, large enough that the round trips do not dominate.
const CHUNK: usize = 1_000;

#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// Send dead letters back to their queue, due now, attempts reset, errors kept.
    Retry(Which),
    /// Delete dead letters.
    Discard(Which),
}

#[derive(Debug, Args)]
pub struct Which {
    /// The jobs, by id; each must be dead (nothing changes otherwise).
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    ids: Vec<String>,
    /// Every dead letter of `--queue`.
    #[arg(long, requires = "queue")]
    all: bool,
    /// The queue for `--all`.
    #[arg(long)]
    queue: Option<String>,
}

pub async fn run(url: &str, command: DeadCommand) -> Result<ExitCode> {
    let (which, retry) = match command {
        DeadCommand::Retry(which) => (which, true),
        DeadCommand::Discard(which) => (which, false),
    };
    let verb = if retry { "retried" } else { "discarded" };
    if which.all {
        let queue = which.queue.unwrap_or_default();
        hopper::broker::validate_queue_name(&queue)?;
        let broker = hopper::connect(url).await?;
        let n = all(&*broker, &queue, retry).await?;
        println!("{queue}: {n} dead letters {verb}");
        return Ok(ExitCode::SUCCESS);
    }
    let ids = which
        .ids
        .iter()
        .map(|s| parse_id(s))
        .collect::<Result<Vec<JobId>>>()?;
    let broker = hopper::connect(url).await?;
    // Every id is checked before anything changes, so a wrong one changes nothing.
    for id in &ids {
        match broker.job(*id).await? {
            None => return refuse(format!("no job {id}")),
            Some(r) if r.state != JobState::Dead => {
                return refuse(format!("job {id} is {}, not dead", r.state.name()));
            }
            Some(_) => {}
        }
    }
    let selection = Selection::Jobs(ids.clone());
    let n = match retry {
        true => broker.retry_dead(&selection).await?,
        false => broker.discard_dead(&selection).await?,
    };
    println!("{n} dead letters {verb}");
    if n < ids.len() as u64 {
        eprintln!(
            "error: {} of the jobs were no longer dead",
            ids.len() as u64 - n
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn refuse(why: String) -> Result<ExitCode> {
    eprintln!("error: {why}; nothing changed");
    Ok(ExitCode::FAILURE)
}

/// Every dead letter of `queue`, a chunk at a time, with a progress bar on a terminal.
async fn all(broker: &dyn Broker, queue: &str, retry: bool) -> Result<u64> {
    let dead = broker.counts(queue).await?.dead;
    let bar = progress(dead, "dead letters");
    let chunk = Selection::Queue {
        queue: queue.to_owned(),
        at_most: CHUNK,
    };
    let mut done = 0;
    loop {
        let n = match retry {
            true => broker.retry_dead(&chunk).await?,
            false => broker.discard_dead(&chunk).await?,
        };
        done += n;
        bar.set_position(done);
        // Stops at the count it started with: jobs retried here that die again while it
        // runs are not taken round a second time.
        if n < CHUNK as u64 || done >= dead {
            break;
        }
    }
    bar.finish_and_clear();
    Ok(done)
}
