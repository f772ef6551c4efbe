//! `hopper jobs show ID` and `hopper queue purge QUEUE`: one job's record, and a queue
//! emptied on purpose.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use hopper::{ConfigError, JobId, JobRecord, JobState, Result};

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// One job: state, attempts, times, headers, payload and its last error.
    Show {
        /// The job's id, as `enqueue` printed it.
        id: String,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Delete every job of a queue, in every state. Asks first on a terminal; elsewhere it
    /// needs `--yes`.
    Purge(PurgeArgs),
}

#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// The queue.
    queue: String,
    /// Do not ask.
    #[arg(long)]
    yes: bool,
}

pub async fn jobs(url: &str, command: JobsCommand) -> Result<ExitCode> {
    let JobsCommand::Show { id, json } = command;
    let id = id
        .parse::<i64>()
        .map(JobId)
        .map_err(|_| ConfigError::new("ID", &id, "a job id, a whole number"))?;
    let broker = hopper::connect(url).await?;
    let Some(record) = broker.job(id).await? else {
        eprintln!("error: no job {id} in {}", hopper::redact_url(url));
        return Ok(ExitCode::FAILURE);
    };
    if json {
        println!("{}", record_json(&record));
    } else {
        print!("{}", record_text(&record));
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn queue(url: &str, command: QueueCommand) -> Result<ExitCode> {
    let QueueCommand::Purge(args) = command;
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

fn state_name(state: JobState) -> &'static str {
    match state {
        JobState::Pending => "pending",
        JobState::Leased => "leased",
        JobState::Completed => "completed",
        JobState::Dead => "dead",
        JobState::Cancelled => "cancelled",
    }
}

/// A time in ms since the epoch, as RFC 3339 (milliseconds).
fn time(ms: hopper::broker::Millis) -> String {
    humantime::format_rfc3339_millis(hopper::broker::from_millis(ms)).to_string()
}

/// The payload as text when it is UTF-8, else as hex bytes.
fn payload_text(payload: &[u8]) -> String {
    match std::str::from_utf8(payload) {
        Ok(text) => text.to_owned(),
        Err(_) => payload.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

fn record_text(r: &JobRecord) -> String {
    let j = &r.job;
    let mut out = format!(
        "id           {}\nqueue        {}\nstate        {}\nattempts     {} of {}\npriority     {}\n\
         created at   {}\nrun at       {}\n",
        j.id,
        j.queue,
        state_name(r.state),
        j.attempt,
        j.max_attempts,
        j.priority,
        time(j.created_at),
        time(j.run_at),
    );
    for (k, v) in &j.headers {
        out += &format!("header       {k}={v}\n");
    }
    if let Some(e) = &r.last_error {
        out += &format!("last error   {e}\n");
    }
    out += &format!("payload      {}\n", payload_text(&j.payload));
    out
}

fn record_json(r: &JobRecord) -> serde_json::Value {
    let j = &r.job;
    let payload = serde_json::from_slice::<serde_json::Value>(&j.payload)
        .unwrap_or_else(|_| serde_json::Value::String(payload_text(&j.payload)));
    serde_json::json!({
        "id": j.id.0,
        "queue": j.queue,
        "state": state_name(r.state),
        "attempt": j.attempt,
        "max_attempts": j.max_attempts,
        "priority": j.priority,
        "created_at": time(j.created_at),
        "run_at": time(j.run_at),
        "headers": j.headers,
        "last_error": r.last_error,
        "payload": payload,
    })
}
