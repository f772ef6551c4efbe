//! Enqueue a few jobs on the memory broker and work them: one succeeds, one is retried
//! once, one is discarded to the dead letters.
//!
//! `cargo run -p hopper --example quickstart`

use std::time::Duration;

use hopper::{JobContext, JobError, NewJob, QueueOptions, RetryPolicy, Worker};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Email {
    to: String,
}

#[tokio::main]
async fn main() -> hopper::Result<()> {
    let broker = hopper::connect("memory://").await?;
    let ids = broker
        .enqueue(vec![
            NewJob::json(
                "emails",
                &Email {
                    to: "ada@example.com".into(),
                },
            )?,
            NewJob::json(
                "emails",
                &Email {
                    to: "flaky@example.com".into(),
                },
            )?,
            NewJob::json("emails", &Email { to: String::new() })?,
        ])
        .await?;

    let worker = Worker::builder(broker.clone())
        .retry(RetryPolicy {
            base: Duration::from_millis(50),
            ..RetryPolicy::default()
        })
        .poll_interval(Duration::from_millis(20))
        .queue(
            "emails",
            QueueOptions::new().concurrency(4),
            |job: JobContext<Email>| async move {
                match job.payload.to.as_str() {
                    "" => Err(JobError::discard("no address")),
                    "flaky@example.com" if job.job.attempt == 1 => {
                        Err(JobError::retry("mail server busy"))
                    }
                    to => {
                        println!("sent to {to} on attempt {}", job.job.attempt);
                        Ok(())
                    }
                }
            },
        )
        .start()?;

    while worker.stats().completed + worker.stats().dead < 3 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stats = worker.shutdown().await;
    println!(
        "completed {}, retried {}, dead {}",
        stats.completed, stats.retried, stats.dead
    );
    let dead = broker.job(ids[2]).await?.expect("dead letters are kept");
    println!("dead letter: {:?}", dead.last_error);
    assert_eq!((stats.completed, stats.retried, stats.dead), (2, 1, 1));
    Ok(())
}
