//! `hopper workers`: the live workers of a broker that keeps their reports, with their
//! queues, slots, what they hold and when they last reported.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::Args;
use hopper::broker::to_millis;
use hopper::{Result, WorkerInfo};

use crate::report::{span, table, time};

#[derive(Debug, Args)]
pub struct WorkersArgs {
    /// Print JSON: one object per worker in an array.
    #[arg(long)]
    json: bool,
}

pub async fn run(url: &str, args: WorkersArgs) -> Result<ExitCode> {
    let broker = hopper::connect(url).await?;
    let workers = broker.workers().await?;
    let text = match args.json {
        true => serde_json::Value::Array(workers.iter().map(json).collect()).to_string(),
        false => render(&workers, to_millis(SystemTime::now())),
    };
    println!("{text}");
    Ok(ExitCode::SUCCESS)
}

/// A time `ms` before `now`, as a person reads it: `4s ago`.
fn ago(ms: i64, now: i64) -> String {
    let d = Duration::from_millis(now.saturating_sub(ms).max(0) as u64);
    format!("{} ago", span(d))
}

fn render(workers: &[WorkerInfo], now: i64) -> String {
    if workers.is_empty() {
        return "no live workers".into();
    }
    let mut t = table([
        "worker",
        "host",
        "pid",
        "queues (running/held of slots)",
        "started",
        "last report",
    ]);
    for w in workers {
        let queues = w
            .queues
            .iter()
            .map(|q| {
                let paused = if q.paused { " paused" } else { "" };
                format!(
                    "{} {}/{} of {}{paused}",
                    q.queue, q.running, q.held, q.concurrency
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        t.add_row([
            w.id.clone(),
            w.host.clone(),
            w.pid.to_string(),
            queues,
            time(w.started_at),
            ago(w.heartbeat_at, now),
        ]);
    }
    t.to_string()
}

fn json(w: &WorkerInfo) -> serde_json::Value {
    serde_json::json!({
        "id": w.id,
        "host": w.host,
        "pid": w.pid,
        "started_at": time(w.started_at),
        "heartbeat_at": time(w.heartbeat_at),
        "expires_at": time(w.expires_at),
        "queues": w.queues,
    })
}
