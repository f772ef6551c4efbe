//! Unique jobs and snoozing on the memory broker: a second "refresh account 7" while the
//! first is still waiting is not stored, and a job whose upstream is not ready puts itself
//! off without using up an attempt.
//!
//! `cargo run -p hopper --example unique`

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use hopper::{JobContext, JobError, NewJob, QueueOptions, UniqueScope, Worker};

#[tokio::main]
async fn main() -> hopper::Result<()> {
    let broker = hopper::connect("memory://").await?;

    // Two producers ask for the same refresh: the broker keeps one job and tells the
    // second which job already holds the key.
    let refresh = |n: u32| NewJob::json("accounts", &n).map(|j| j.unique_key("refresh:7"));
    let first = broker.enqueue_reported(vec![refresh(1)?]).await?;
    let second = broker.enqueue_reported(vec![refresh(2)?]).await?;
    println!(
        "first: job {} (stored: {})",
        first[0].id, !first[0].existing
    );
    println!(
        "second: job {} (stored: {})",
        second[0].id, !second[0].existing
    );

    // At most one digest an hour, whatever becomes of the first.
    let digest = NewJob::json("digests", &"daily")?
        .unique("digest", UniqueScope::For(Duration::from_secs(3600)));
    broker.enqueue(vec![digest]).await?;

    // The refresh waits for an upstream export: it snoozes twice, on its one attempt.
    let checks = Arc::new(AtomicU32::new(0));
    let seen = checks.clone();
    let worker = Worker::builder(broker.clone())
        .poll_interval(Duration::from_millis(20))
        .queue(
            "accounts",
            QueueOptions::new(),
            move |job: JobContext<u32>| {
                let check = seen.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    if check < 3 {
                        println!("export not ready (attempt {}): snoozing", job.job.attempt);
                        return Err(JobError::snooze(Duration::from_millis(100)));
                    }
                    println!("refreshed account 7 on attempt {}", job.job.attempt);
                    Ok(())
                }
            },
        )
        .start()?;
    while worker.stats().completed < 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stats = worker.shutdown().await;
    println!("snoozed {}, completed {}", stats.snoozed, stats.completed);

    // The refresh finished, so the key is free again.
    let third = broker.enqueue_reported(vec![refresh(3)?]).await?;
    println!(
        "after it finished: job {} (stored: {})",
        third[0].id, !third[0].existing
    );
    Ok(())
}
