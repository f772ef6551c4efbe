//! Raw baselines without a worker runtime: a tokio mpsc channel for the memory rows, and
//! the broker's own `fetch` and `settle` in a loop for the SQL rows.

use std::time::{Duration, Instant};

use hopper::broker::{FetchRequest, Settlement};
use hopper::{Error, Result};

use crate::load::fill;

/// One producer and one consumer over a bounded tokio mpsc channel.
pub(crate) async fn raw_mpsc(n: usize) -> f64 {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<u64>(1024);
    let started = Instant::now();
    let producer = tokio::spawn(async move {
        for i in 0..n as u64 {
            if tx.send(i).await.is_err() {
                break;
            }
        }
    });
    let mut sum = 0u64;
    let mut got = 0usize;
    while let Some(v) = rx.recv().await {
        sum = sum.wrapping_add(v);
        got += 1;
    }
    let _ = producer.await;
    let rate = got as f64 / started.elapsed().as_secs_f64();
    std::hint::black_box(sum);
    rate
}

/// Fills a queue, then drains it with one loop of `fetch(batch)` and `settle` (acks).
pub(crate) async fn raw_broker_loop(url: &str, jobs: usize, batch: usize) -> Result<f64> {
    hopper::migrate(url).await?;
    let broker = hopper::connect(url).await?;
    let queue = "raw";
    fill(&broker, queue, jobs).await?;
    let started = Instant::now();
    let mut done = 0;
    while done < jobs {
        let fetched = broker
            .fetch(FetchRequest::one(queue, batch, Duration::from_secs(60)))
            .await?;
        if fetched.jobs.is_empty() {
            break;
        }
        done += fetched.jobs.len();
        let acks = fetched.jobs.iter().map(Settlement::ack).collect();
        broker.settle(acks).await?;
    }
    let rate = done as f64 / started.elapsed().as_secs_f64();
    if done < jobs {
        return Err(Error::broker_msg(format!(
            "raw loop on {} drained {done} of {jobs} jobs",
            hopper::redact_url(url)
        )));
    }
    Ok(rate)
}
