//! A rate limit per key on the memory broker: exports of two tenants share a queue limited
//! to 2 a second per tenant, the tenant read from each job's payload. One tenant's backlog
//! of 8 does not hold back the other's 2: both start at once, and the rest of the first
//! tenant's follow two a second.
//!
//! `cargo run -p hopper --example rate_limit_per_key`

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hopper::{JobContext, NewJob, QueueOptions, RateLimit, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Export {
    tenant: String,
    n: u32,
}

#[tokio::main]
async fn main() -> hopper::Result<()> {
    let broker = hopper::connect("memory://").await?;
    let tenants = ["acme"; 8].into_iter().chain(["bob"; 2]);
    let jobs: Vec<NewJob> = tenants
        .enumerate()
        .map(|(n, tenant)| {
            let export = Export {
                tenant: tenant.into(),
                n: n as u32,
            };
            Ok(NewJob::json("exports", &export)?.rate_key_from("tenant")?)
        })
        .collect::<hopper::Result<_>>()?;
    broker.enqueue(jobs).await?;

    let limit = RateLimit::new(2, Duration::from_secs(1))?.per_key();
    let begun = Instant::now();
    let starts = Arc::new(Mutex::new(Vec::<(String, Duration)>::new()));
    let seen = starts.clone();
    let worker = Worker::builder(broker)
        .queue(
            "exports",
            QueueOptions::new().concurrency(10).rate_limit(limit),
            move |job: JobContext<Export>| {
                let at = begun.elapsed();
                let tenant = job.payload.tenant.clone();
                println!(
                    "{tenant:>4} export {} at {:.2} s",
                    job.payload.n,
                    at.as_secs_f64()
                );
                seen.lock().unwrap().push((tenant, at));
                async { Ok(()) }
            },
        )
        .start()?;
    while starts.lock().unwrap().len() < 10 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await;
    let starts = starts.lock().unwrap().clone();
    let last = |t: &str| {
        starts
            .iter()
            .filter(|(n, _)| n == t)
            .map(|(_, at)| *at)
            .max()
    };
    println!(
        "bob's last export at {:.1} s, acme's at {:.1} s",
        last("bob").unwrap_or_default().as_secs_f64(),
        last("acme").unwrap_or_default().as_secs_f64()
    );
    Ok(())
}
