//! `hopper cron list`: the schedules of periodic jobs that live workers hold, merged by
//! name, with their next and latest slots. Schedules live in the programs that run the
//! workers, so a broker lists them while a worker holding them reports itself.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use hopper::registry::{ScheduleInfo, schedules};
use hopper::{Error, Result};

use crate::report::{table, time};

#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// The schedules live workers hold: queue, expression, next and latest slot.
    List(ListArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON: one object per schedule in an array.
    #[arg(long)]
    json: bool,
}

pub async fn run(url: &str, command: CronCommand) -> Result<ExitCode> {
    let CronCommand::List(args) = command;
    let broker = hopper::connect(url).await?;
    let workers = match broker.workers().await {
        Ok(w) => w,
        Err(Error::NotSupported { broker, .. }) => {
            return Err(Error::NotSupported {
                broker,
                what: "listing schedules (it keeps no worker reports, and it runs no periodic jobs)",
            });
        }
        Err(e) => return Err(e),
    };
    let listed = schedules(&workers);
    let text = match args.json {
        true => serde_json::Value::Array(listed.iter().map(json).collect()).to_string(),
        false => render(&listed),
    };
    println!("{text}");
    Ok(ExitCode::SUCCESS)
}

fn render(listed: &[ScheduleInfo]) -> String {
    if listed.is_empty() {
        return "no live worker holds a schedule".into();
    }
    let mut t = table(["schedule", "queue", "when", "next", "latest", "workers"]);
    let at = |ms: Option<i64>| ms.map_or_else(|| "-".to_owned(), time);
    for s in listed {
        let b = &s.schedule;
        t.add_row([
            b.name.clone(),
            b.queue.clone(),
            b.spec.clone(),
            at(b.next_at),
            at(b.last_at),
            s.workers.to_string(),
        ]);
    }
    t.to_string()
}

fn json(s: &ScheduleInfo) -> serde_json::Value {
    let b = &s.schedule;
    serde_json::json!({
        "name": b.name,
        "queue": b.queue,
        "spec": b.spec,
        "next_at": b.next_at,
        "last_at": b.last_at,
        "workers": s.workers,
    })
}
