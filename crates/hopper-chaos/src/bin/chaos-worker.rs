//! `chaos-worker`: one real worker process for the chaos tests.
//!
//! ```text
//! chaos-worker --broker URL --queue Q --log FILE --concurrency N
//!              [--job-ms M] [--lease-ms L] [--name NAME]
//! ```
//!
//! Works queue `Q` on the broker `URL` names (through [`hopper::connect`]). Each job's
//! payload is its `u64` id; the handler appends one line `<id> <attempt> <unix µs>` to
//! `FILE` when it starts (see [`hopper_chaos::checker::RunLine`]), sleeps `M` ms (default:
//! one) and succeeds. The window is held to the concurrency and each fetch to at most that
//! many jobs (on RabbitMQ the window is the channel's `basic.qos`, which bounds what a cut
//! connection can hand back; see `hopper_chaos::checker`). `--lease-ms` sets the lease
//! (default 2 s, so a killed worker's jobs come back quickly). `--name` names the AMQP
//! connection, so a test can close its own connections and no one else's. Runs until
//! SIGTERM (drains and exits) or SIGKILL.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use hopper::{Broker, JobContext, Prefetch, QueueOptions, Worker};
use hopper_chaos::checker::{RunEnd, RunLine};

#[derive(Debug)]
struct Args {
    broker: String,
    queue: String,
    log: String,
    concurrency: usize,
    job_ms: u64,
    lease_ms: u64,
    name: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let (mut broker, mut queue, mut log, mut concurrency) = (None, None, None, None);
    let (mut job_ms, mut lease_ms, mut name) = (1, 2_000, None);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--broker" => broker = Some(value),
            "--queue" => queue = Some(value),
            "--log" => log = Some(value),
            "--concurrency" => concurrency = Some(number(&value)? as usize),
            "--job-ms" => job_ms = number(&value)?,
            "--lease-ms" => lease_ms = number(&value)?,
            "--name" => name = Some(value),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args {
        broker: broker.ok_or("--broker is required")?,
        queue: queue.ok_or("--queue is required")?,
        log: log.ok_or("--log is required")?,
        concurrency: concurrency.ok_or("--concurrency is required")?,
        job_ms,
        lease_ms,
        name,
    })
}

/// The broker `args` names; an AMQP connection carries `--name` when given.
async fn open(args: &Args) -> hopper::Result<Arc<dyn Broker>> {
    if let (Some(name), true) = (&args.name, args.broker.starts_with("amqp://")) {
        let options = hopper::AmqpOptions::new().connection_name(name.clone());
        return Ok(Arc::new(
            hopper::AmqpBroker::connect_with(&args.broker, options).await?,
        ));
    }
    hopper::connect(&args.broker).await
}

/// Logs the end of a run when dropped ([`RunEnd`]).
struct Ended(RunLine, Arc<File>);

impl Drop for Ended {
    fn drop(&mut self) {
        let line = RunEnd::now(self.0).to_line();
        let _ = (&*self.1).write_all(line.as_bytes());
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // Warnings by default (`RUST_LOG` overrides): the fleet keeps each process's stderr.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("chaos-worker: {e}");
        std::process::exit(2)
    });
    // One `write` per line on an O_APPEND file: lines of concurrent handlers (and of other
    // processes on the same file) never interleave, and a SIGKILL loses no written line.
    let log: Arc<File> = Arc::new(
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&args.log)
            .unwrap_or_else(|e| panic!("cannot open log {}: {e}", args.log)),
    );
    // A broker that is down when the worker starts (a restart in progress) is retried.
    let broker = loop {
        match open(&args).await {
            Ok(b) => break b,
            Err(e) => {
                eprintln!("chaos-worker: connecting: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let job_time = Duration::from_millis(args.job_ms);
    let options = QueueOptions::new()
        .concurrency(args.concurrency)
        .prefetch(Prefetch::Fixed(args.concurrency))
        .max_batch(args.concurrency.min(hopper::worker::MAX_BATCH_LIMIT));
    let worker = Worker::builder(broker)
        .lease_ttl(Duration::from_millis(args.lease_ms))
        .queue(&args.queue, options, move |job: JobContext<u64>| {
            let run = RunLine::now(job.payload, job.job.attempt);
            (&*log)
                .write_all(run.to_line().as_bytes())
                .expect("appending to the run log");
            // Written when the handler's future ends, however it ends: finished, or dropped
            // by the worker (a timeout, a lease given up).
            let ended = Ended(run, log.clone());
            async move {
                tokio::time::sleep(job_time).await;
                drop(ended);
                Ok(())
            }
        })
        .start()
        .unwrap_or_else(|e| panic!("cannot start the worker: {e}"));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    term.recv().await;
    let stats = worker.shutdown().await;
    eprintln!("chaos-worker: stopped: {} completed", stats.completed);
}
