//! `hopper stats [--watch]`: every queue's jobs by state, lag, pause, consumers and
//! throughput, as a table or JSON, once or redrawn every interval. Consumers are the
//! server's count on RabbitMQ, and the live workers taking the queue where workers report
//! themselves.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use hopper::{Broker, ConfigError, QueueStatus, Result, Throughput};

use crate::report::{span, table};

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Only these queues (repeat for more); every queue of the broker by default.
    #[arg(long = "queue")]
    queues: Vec<String>,
    /// Redraw every `--every` until interrupted.
    #[arg(long)]
    watch: bool,
    /// How often `--watch` redraws: `1s`, `500ms`.
    #[arg(long, default_value = "1s")]
    every: humantime::Duration,
    /// Print JSON: one object per queue in an array (one array a line with `--watch`).
    #[arg(long)]
    json: bool,
}

pub async fn run(url: &str, args: StatsArgs) -> Result<ExitCode> {
    for q in &args.queues {
        hopper::broker::validate_queue_name(q)?;
    }
    let broker = hopper::connect(url).await?;
    let clear = args.watch && !args.json && std::io::stdout().is_terminal();
    loop {
        let rows = read(&*broker, &args.queues).await?;
        let mut out = std::io::stdout().lock();
        if clear {
            // Home and clear: only on a terminal, so no escape code reaches a pipe.
            let _ = write!(out, "\x1b[H\x1b[2J");
        }
        let text = match args.json {
            true => serde_json::Value::Array(rows.iter().map(json).collect()).to_string(),
            false => render(&rows),
        };
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
        drop(out);
        if !args.watch {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from(args.every)) => {}
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        }
    }
}

async fn read(broker: &dyn Broker, only: &[String]) -> Result<Vec<QueueStatus>> {
    let names = match only.is_empty() {
        true => match broker.queues().await {
            Err(hopper::Error::NotSupported { broker, .. }) => {
                let why = format!("the queues to show, by name: {broker} cannot list its queues");
                return Err(ConfigError::new("--queue", "missing", why).into());
            }
            names => names?,
        },
        false => only.to_vec(),
    };
    let mut rows = Vec::with_capacity(names.len());
    for name in names {
        rows.push(broker.queue_stats(&name).await?);
    }
    // Where workers report themselves, a queue's consumers are the live workers taking it.
    if broker.capabilities().admin.workers {
        let workers = broker.workers().await?;
        for row in &mut rows {
            row.consumers = Some(hopper::registry::consumers(&workers, &row.queue));
        }
    }
    Ok(rows)
}

fn rate(t: Option<Throughput>, pick: fn(&Throughput) -> u64) -> String {
    t.map(|t| pick(&t).to_string())
        .unwrap_or_else(|| "-".into())
}

fn render(rows: &[QueueStatus]) -> String {
    if rows.is_empty() {
        return "no queues".into();
    }
    let mut t = table([
        "queue",
        "pending",
        "scheduled",
        "leased",
        "dead",
        "lag",
        "paused",
        "limit",
        "consumers",
        "done/min",
        "failed/min",
        "dead/min",
        "done/hour",
    ]);
    for s in rows {
        let c = s.counts;
        t.add_row([
            s.queue.clone(),
            c.pending.to_string(),
            c.scheduled.to_string(),
            c.leased.to_string(),
            c.dead.to_string(),
            s.lag.map(span).unwrap_or_else(|| "-".into()),
            if s.paused { "yes" } else { "" }.to_owned(),
            s.rate_limit.map_or_else(String::new, |l| l.to_string()),
            s.consumers.map_or_else(|| "-".into(), |n| n.to_string()),
            rate(s.last_minute, |t| t.completed),
            rate(s.last_minute, |t| t.failed),
            rate(s.last_minute, |t| t.dead),
            rate(s.last_hour, |t| t.completed),
        ]);
    }
    t.to_string()
}

fn throughput(t: Option<Throughput>) -> serde_json::Value {
    match t {
        Some(t) => {
            serde_json::json!({"completed": t.completed, "failed": t.failed, "dead": t.dead})
        }
        None => serde_json::Value::Null,
    }
}

fn json(s: &QueueStatus) -> serde_json::Value {
    serde_json::json!({
        "queue": s.queue,
        "pending": s.counts.pending,
        "scheduled": s.counts.scheduled,
        "leased": s.counts.leased,
        "dead": s.counts.dead,
        "lag_ms": s.lag.map(|d| d.as_millis() as u64),
        "paused": s.paused,
        "rate_limit": s.rate_limit.map(|l| {
            let per_ms = l.per.as_millis() as u64;
            serde_json::json!({"max": l.max, "per_ms": per_ms, "per_key": l.per_key})
        }),
        "consumers": s.consumers,
        "last_minute": throughput(s.last_minute),
        "last_hour": throughput(s.last_hour),
    })
}
