//! A rate limit on the memory broker: two workers of 10 slots share a limit of 5 calls a
//! second to a partner's API, kept by the broker, so together they never start more than
//! 5 jobs in any second however many slots are free.
//!
//! `cargo run -p hopper --example rate_limit`

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hopper::{JobContext, NewJob, QueueOptions, RateLimit, Worker};

#[tokio::main]
async fn main() -> hopper::Result<()> {
    let broker = hopper::connect("memory://").await?;
    let jobs: Vec<NewJob> = (0..15u32)
        .map(|n| NewJob::json("partner-api", &n))
        .collect::<hopper::Result<_>>()?;
    broker.enqueue(jobs).await?;

    let limit = RateLimit::new(5, Duration::from_secs(1))?;
    let begun = Instant::now();
    let starts = Arc::new(Mutex::new(Vec::<Duration>::new()));
    let workers: Vec<Worker> = (0..2)
        .map(|_| {
            let starts = starts.clone();
            Worker::builder(broker.clone())
                .queue(
                    "partner-api",
                    QueueOptions::new().concurrency(10).rate_limit(limit),
                    move |job: JobContext<u32>| {
                        let at = begun.elapsed();
                        starts.lock().unwrap().push(at);
                        println!("call {:>2} at {:.2} s", job.payload, at.as_secs_f64());
                        async { Ok(()) }
                    },
                )
                .start()
        })
        .collect::<hopper::Result<_>>()?;
    while starts.lock().unwrap().len() < 15 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for worker in workers {
        worker.shutdown().await;
    }
    let mut starts = starts.lock().unwrap().clone();
    starts.sort();
    let busiest = (0..starts.len())
        .map(|i| {
            starts[i..]
                .iter()
                .take_while(|t| **t - starts[i] < limit.per)
                .count()
        })
        .max()
        .unwrap_or(0);
    println!(
        "15 calls in {:.1} s; at most {busiest} in any second",
        begun.elapsed().as_secs_f64()
    );
    Ok(())
}
