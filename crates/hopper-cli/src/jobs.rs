//! `hopper jobs list` and `hopper jobs show ID`: a queue's jobs in one state a page at a
//! time, and one job's record with the error of every attempt kept.

use std::process::ExitCode;

use clap::Subcommand;
use comfy_table::Table;
use hopper::{
    Broker, CancelOutcome, ConfigError, Cursor, JobId, JobQuery, JobRecord, ListState, Result,
};

use crate::report::{payload_text, table, time};

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// A page of a queue's jobs in one state. Pending and scheduled jobs list in the order
    /// workers take them; leased by lease expiry; dead, completed and cancelled by when
    /// they ended. A full page ends with the `--after` value of the next.
    List {
        /// The queue; may be left out when the broker holds only one.
        #[arg(long)]
        queue: Option<String>,
        /// pending, scheduled, leased, dead, completed or cancelled.
        #[arg(long, default_value = "pending")]
        state: ListState,
        /// Jobs on the page, 1 to 1000.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Start after this place, as the previous page printed it.
        #[arg(long)]
        after: Option<Cursor>,
        /// The state's order reversed: the newest first.
        #[arg(long)]
        newest: bool,
        /// Print one JSON object: `{"jobs": [...], "next": CURSOR or null}`.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a job that has not started: it never runs. A job a worker holds is not
    /// stopped; the command says which lease holds it.
    Cancel {
        /// The job's id.
        id: String,
    },
    /// One job: state, attempts, times, headers, payload and the error of each attempt.
    Show {
        /// The job's id, as `enqueue` printed it.
        id: String,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// Parses a job id argument, naming it when it is not one.
pub fn parse_id(text: &str) -> Result<JobId> {
    text.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .map(JobId)
        .ok_or_else(|| ConfigError::new("ID", text, "a job id, a positive whole number").into())
}

pub async fn run(url: &str, command: JobsCommand) -> Result<ExitCode> {
    match command {
        JobsCommand::Show { id, json } => show(url, parse_id(&id)?, json).await,
        JobsCommand::Cancel { id } => cancel(url, parse_id(&id)?).await,
        JobsCommand::List {
            queue,
            state,
            limit,
            after,
            newest,
            json,
        } => {
            if let Some(q) = &queue {
                hopper::broker::validate_queue_name(q)?;
            }
            let mut query = JobQuery::new(queue.clone().unwrap_or_default(), state, limit);
            query.after = after;
            query.newest_first = newest;
            if queue.is_some() {
                query.validate()?;
            }
            let broker = hopper::connect(url).await?;
            if queue.is_none() {
                query.queue = only_queue(&*broker).await?;
                query.validate()?;
            }
            let page = broker.list_jobs(&query).await?;
            let next = page.next.map(|c| c.to_string());
            if json {
                let jobs: Vec<_> = page.jobs.iter().map(record_json).collect();
                println!("{}", serde_json::json!({ "jobs": jobs, "next": next }));
            } else {
                println!("{}", list_table(&page.jobs));
                if let Some(next) = next {
                    eprintln!("more: --after {next}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The queue to list when none was named: the broker's only one.
async fn only_queue(broker: &dyn Broker) -> Result<String> {
    let queues = broker.queues().await?;
    match queues.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(
            ConfigError::new("--queue", "missing", "a queue name (the broker holds none)").into(),
        ),
        many => Err(ConfigError::new(
            "--queue",
            "missing",
            format!("one of the broker's queues: {}", many.join(", ")),
        )
        .into()),
    }
}

async fn cancel(url: &str, id: JobId) -> Result<ExitCode> {
    let broker = hopper::connect(url).await?;
    match broker.cancel(id).await? {
        CancelOutcome::Cancelled => {
            println!("job {id}: cancelled");
            Ok(ExitCode::SUCCESS)
        }
        CancelOutcome::Held(lease) => {
            eprintln!("error: job {id} is running under lease {lease}; it was not cancelled");
            Ok(ExitCode::FAILURE)
        }
        CancelOutcome::NotFound => {
            eprintln!("error: no pending job {id} in {}", hopper::redact_url(url));
            Ok(ExitCode::FAILURE)
        }
    }
}

async fn show(url: &str, id: JobId, json: bool) -> Result<ExitCode> {
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

/// The first line of `error`, at most `chars` characters of it.
fn brief(error: &str, chars: usize) -> String {
    let line = error.trim().lines().next_back().unwrap_or("");
    let mut out: String = line.chars().take(chars).collect();
    if line.chars().count() > chars {
        out.push('…');
    }
    out
}

fn list_table(records: &[JobRecord]) -> Table {
    let mut t = table(["id", "state", "attempt", "priority", "run at", "last error"]);
    for r in records {
        let j = &r.job;
        t.add_row([
            j.id.to_string(),
            r.state.name().to_owned(),
            format!("{}/{}", j.attempt, j.max_attempts),
            j.priority.to_string(),
            time(j.run_at),
            r.last_error
                .as_deref()
                .map(|e| brief(e, 60))
                .unwrap_or_default(),
        ]);
    }
    t
}

fn record_text(r: &JobRecord) -> String {
    let j = &r.job;
    let mut out = format!(
        "id           {}\nqueue        {}\nstate        {}\nattempts     {} of {}\npriority     {}\n\
         created at   {}\nrun at       {}\n",
        j.id,
        j.queue,
        r.state.name(),
        j.attempt,
        j.max_attempts,
        j.priority,
        time(j.created_at),
        time(j.run_at),
    );
    if let Some(at) = r.started_at {
        out += &format!("started at   {}\n", time(at));
    }
    if let Some(at) = r.finished_at {
        out += &format!("finished at  {}\n", time(at));
    }
    if let Some(key) = &r.unique_key {
        out += &format!("unique key   {key}\n");
    }
    if let Some(key) = &r.ordering_key {
        let waits = match r.blocked {
            true => "  (waits for its turn on the key)",
            false => "",
        };
        out += &format!("ordering key {key}{waits}\n");
    }
    if let Some(key) = &r.rate_key {
        out += &format!("rate key     {key}\n");
    }
    for (k, v) in &j.headers {
        out += &format!("header       {k}={v}\n");
    }
    match (r.errors.as_slice(), &r.last_error) {
        ([], Some(e)) => out += &format!("last error   {e}\n"),
        (errors, _) => {
            for e in errors {
                let text = e.error.trim_end().replace('\n', "\n             ");
                out += &format!("attempt {:<4} {}  {text}\n", e.attempt, time(e.at));
            }
        }
    }
    out += &format!("payload      {}\n", payload_text(&j.payload));
    out
}

pub fn record_json(r: &JobRecord) -> serde_json::Value {
    let j = &r.job;
    let payload = serde_json::from_slice::<serde_json::Value>(&j.payload)
        .unwrap_or_else(|_| serde_json::Value::String(payload_text(&j.payload)));
    let errors: Vec<_> = r
        .errors
        .iter()
        .map(|e| serde_json::json!({ "attempt": e.attempt, "at": time(e.at), "error": e.error }))
        .collect();
    serde_json::json!({
        "id": j.id.0,
        "queue": j.queue,
        "state": r.state.name(),
        "attempt": j.attempt,
        "max_attempts": j.max_attempts,
        "priority": j.priority,
        "created_at": time(j.created_at),
        "run_at": time(j.run_at),
        "started_at": r.started_at.map(time),
        "finished_at": r.finished_at.map(time),
        "unique_key": r.unique_key,
        "ordering_key": r.ordering_key,
        "blocked": r.blocked,
        "rate_key": r.rate_key,
        "headers": j.headers,
        "last_error": r.last_error,
        "errors": errors,
        "payload": payload,
    })
}
