//! `hopper load --rate`: the jobs arrive at a steady rate while the workers run, as in
//! service, instead of as a backlog loaded first. Each job's latency is then its wait from
//! its enqueue to its start, which a stall anywhere (a claim held up by a lock, a worker
//! reconnecting) shows as a spike.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hopper::{Broker, NewJob, Result};
use hopper_bench::load::micros_now;

/// How often the producer enqueues what came due since its last call.
const TICK: Duration = Duration::from_millis(10);

/// Enqueues `jobs` jobs at `rate` a second, spread over `queues` in turn, one call per
/// [`TICK`] with the jobs due by then (more after a slow call, so the rate holds on
/// average); returns the seconds it took.
pub(crate) async fn produce(
    producer: Arc<dyn Broker>,
    queues: Vec<String>,
    jobs: usize,
    rate: u32,
) -> Result<f64> {
    let started = Instant::now();
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut sent = 0;
    while sent < jobs {
        ticks.tick().await;
        let due = ((started.elapsed().as_secs_f64() * f64::from(rate)) as usize).min(jobs);
        if due == sent {
            continue;
        }
        let batch = (sent..due)
            .map(|i| NewJob::json(&queues[i % queues.len()], &(i, micros_now())))
            .collect::<Result<Vec<_>>>()?;
        producer.enqueue(batch).await?;
        sent = due;
    }
    Ok(started.elapsed().as_secs_f64())
}
