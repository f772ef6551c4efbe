//! The idle latency rows: a worker at concurrency 1 waits on an empty queue; one job is
//! enqueued at a time, and the time from the enqueue's return (the commit) to the
//! handler's start is recorded. PostgreSQL's row sets beside it the floor a plain
//! listener reaches with the broker's own claim.

use std::time::{Duration, Instant};

use hopper::broker::{FetchRequest, Settlement};
use hopper::{Error, JobContext, NewJob, QueueOptions, Result, Worker};

use crate::measure::percentile;
use crate::scratch::Scratch;
use crate::table::Row;

/// Samples of the idle latency.
const LATENCY_SAMPLES: usize = 200;
/// Samples taken first and not counted: they warm connections and statement caches.
const LATENCY_WARMUP: usize = 5;

/// Enqueue-to-start of an idle worker, measured from the enqueue's commit (see
/// [`enqueue_after_a_gap`]).
pub(crate) async fn idle_latency(url: &str, name: &str) -> Result<Row> {
    hopper::migrate(url).await?;
    let producer = hopper::connect(url).await?;
    let broker = if producer.capabilities().in_process {
        producer.clone()
    } else {
        hopper::connect(url).await?
    };
    producer.purge("latency").await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = Worker::builder(broker)
        .queue(
            "latency",
            QueueOptions::new().concurrency(1),
            move |_job: JobContext<u64>| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(Instant::now());
                    Ok(())
                }
            },
        )
        .start()?;
    let mut waits = Vec::with_capacity(LATENCY_SAMPLES);
    for i in 0..LATENCY_WARMUP + LATENCY_SAMPLES {
        let committed = enqueue_after_a_gap(&producer, i).await?;
        let started = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .map_err(|_| Error::broker_msg(format!("{name}: an idle worker took over 10 s")))?
            .ok_or_else(|| Error::broker_msg(format!("{name}: the worker stopped")))?;
        if i >= LATENCY_WARMUP {
            waits.push(started.saturating_duration_since(committed).as_secs_f64() * 1000.0);
        }
    }
    worker.shutdown().await;
    waits.sort_by(f64::total_cmp);
    Ok(Row {
        workload: format!("{name} idle latency, commit to start"),
        jobs: LATENCY_SAMPLES,
        p50_ms: Some(percentile(&waits, 50.0)),
        p99_ms: Some(percentile(&waits, 99.0)),
        note: if producer.capabilities().in_process {
            "one job at a time to an idle worker; from the enqueue's call, in which the job \
             is queued"
                .into()
        } else {
            "one job at a time to an idle worker".into()
        },
        ..Row::default()
    })
}

/// Lets the worker fall idle (5 ms), enqueues job `i` on the `latency` queue, and returns
/// the moment the job was committed: the enqueue's return for a database or a server (the
/// commit is the last thing the call waits for), and the call itself for the in-process
/// memory broker, whose job is queued, and may start on the worker's other thread, before
/// the call has returned (measured from the return, half the memory broker's samples came
/// out as zero).
async fn enqueue_after_a_gap(
    producer: &std::sync::Arc<dyn hopper::Broker>,
    i: usize,
) -> Result<Instant> {
    tokio::time::sleep(Duration::from_millis(5)).await;
    let called = Instant::now();
    producer
        .enqueue(vec![NewJob::json("latency", &(i as u64))?])
        .await?;
    Ok(if producer.capabilities().in_process {
        called
    } else {
        Instant::now()
    })
}

/// PostgreSQL's idle latency, with its floor on this machine measured just before it (see
/// [`pg_latency_floor`]). Each in a schema of its own: every claim leaves a dead entry in
/// the pending index that later claims walk over until a vacuum, so the second would
/// otherwise start behind the first.
pub(crate) async fn pg_idle_latency(server: &str) -> Result<Row> {
    let (claimed, notified) = Scratch::run(server, pg_latency_floor).await?;
    let mut row = Scratch::run(server, async |s| idle_latency(&s.url, "postgres").await).await?;
    row.note = format!(
        "{}; raw (LISTEN, then the broker's own fetch), commit to claimed: p50 {:.3}, p99 \
         {:.3}, of which to the notification p50 {:.3}",
        row.note,
        percentile(&claimed, 50.0),
        percentile(&claimed, 99.0),
        percentile(&notified, 50.0)
    );
    Ok(row)
}

/// The floor of PostgreSQL's idle latency: a plain listener on the broker's wake channel
/// that, on each notification, claims with the broker's own fetch. Returns, sorted, the
/// times from each enqueue's commit to the claim's return and to the notification (ms):
/// every round trip Hopper makes for the job, and none of its runtime. Two sessions
/// listen, as while Hopper's worker waits: the producer's broker and this listener (the
/// claiming broker does not).
async fn pg_latency_floor(scratch: &Scratch) -> Result<(Vec<f64>, Vec<f64>)> {
    use hopper::Broker;
    hopper::migrate(&scratch.url).await?;
    let producer = hopper::connect(&scratch.url).await?;
    producer.purge("latency").await?;
    let options = hopper::PgOptions::default()
        .schema(&scratch.name)
        .listen(false);
    let broker = hopper::PgBroker::connect_with(&scratch.url, options).await?;
    let channel = broker.wake_channel().to_owned();
    let server = hopper::redact_url(&scratch.server);
    let mut listener = sqlx::postgres::PgListener::connect(&scratch.server)
        .await
        .map_err(|e| Error::broker(format!("connecting a listener to {server}"), e))?;
    listener
        .listen(&channel)
        .await
        .map_err(|e| Error::broker(format!("LISTEN {channel} on {server}"), e))?;
    let (mut claimed, mut notified) = (Vec::new(), Vec::new());
    for i in 0..LATENCY_WARMUP + LATENCY_SAMPLES {
        let committed = enqueue_after_a_gap(&producer, i).await?;
        tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .map_err(|_| {
                Error::broker_msg(format!(
                    "no notification on {channel} at {server} within 10 s of an enqueue"
                ))
            })?
            .map_err(|e| Error::broker(format!("receiving on {channel} at {server}"), e))?;
        let notified_at = Instant::now();
        let fetched = broker
            .fetch(FetchRequest::one("latency", 1, Duration::from_secs(60)))
            .await?;
        let claimed_at = Instant::now();
        if fetched.jobs.len() != 1 {
            return Err(Error::broker_msg(format!(
                "the raw listener on {channel} claimed {} jobs after a notification, not 1",
                fetched.jobs.len()
            )));
        }
        broker
            .settle(fetched.jobs.iter().map(Settlement::ack).collect())
            .await?;
        if i >= LATENCY_WARMUP {
            let ms = |t: Instant| t.duration_since(committed).as_secs_f64() * 1000.0;
            claimed.push(ms(claimed_at));
            notified.push(ms(notified_at));
        }
    }
    broker.close().await;
    claimed.sort_by(f64::total_cmp);
    notified.sort_by(f64::total_cmp);
    Ok((claimed, notified))
}
