//! Ordered keys on the memory broker: each customer's events run one at a time and in the
//! order they were enqueued, even when one fails and is retried, while different customers
//! run side by side on 8 slots. Then the same with `retries_hold_key(false)`: a failed
//! event steps aside, so the customer's later events run during its backoff, still one at
//! a time, and the failed one runs again after them.
//!
//! `cargo run -p hopper --example ordered`

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper::{JobContext, JobError, NewJob, QueueOptions, RetryPolicy, Worker};

#[tokio::main]
async fn main() -> hopper::Result<()> {
    println!("-- retries hold their key (the default)");
    run(true).await?;
    println!("-- retries_hold_key(false): a failed event steps aside");
    run(false).await
}

/// Runs twelve events of three customers, Ben's second failing once, and prints the order
/// each customer's events completed in.
async fn run(hold_key: bool) -> hopper::Result<()> {
    let broker = hopper::connect("memory://").await?;

    // Three customers, four events each, enqueued interleaved in one batch.
    let mut jobs = Vec::new();
    for event in 1..=4u32 {
        for customer in ["ana", "ben", "cleo"] {
            let job = NewJob::json("events", &(customer, event))?.ordering_key(customer);
            jobs.push(job);
        }
    }
    broker.enqueue(jobs).await?;

    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = log.clone();
    let worker = Worker::builder(broker.clone())
        .poll_interval(Duration::from_millis(20))
        .retry(RetryPolicy {
            base: Duration::from_millis(200),
            ..RetryPolicy::default()
        })
        .queue(
            "events",
            QueueOptions::new()
                .concurrency(8)
                .retries_hold_key(hold_key),
            move |job: JobContext<(String, u32)>| {
                let seen = seen.clone();
                async move {
                    let (customer, event) = job.payload;
                    // Ben's second event fails once: his third and fourth wait for it, or
                    // run during its backoff when it steps aside.
                    if customer == "ben" && event == 2 && job.job.attempt == 1 {
                        println!("{customer} event {event}: failed, retrying");
                        return Err(JobError::retry("upstream busy"));
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    println!("{customer} event {event}: done");
                    seen.lock().unwrap().push(format!("{customer}{event}"));
                    Ok(())
                }
            },
        )
        .start()?;
    while worker.stats().completed < 12 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await;

    let log = log.lock().unwrap();
    for customer in ["ana", "ben", "cleo"] {
        let order: Vec<&str> = log
            .iter()
            .filter(|e| e.starts_with(customer))
            .map(|e| &e[customer.len()..])
            .collect();
        println!("{customer}: events in order {}", order.join(", "));
    }
    Ok(())
}
