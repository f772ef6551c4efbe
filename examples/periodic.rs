//! Periodic jobs on the memory broker: two workers hold the same schedule, every second,
//! and each slot is enqueued once between them.
//!
//! `cargo run -p hopper --example periodic`

use std::time::Duration;

use hopper::{JobContext, Missed, NewJob, QueueOptions, Schedule, Worker};

#[tokio::main]
async fn main() -> hopper::Result<()> {
    let broker = hopper::connect("memory://").await?;
    let tick = || {
        Schedule::every(
            "tick",
            Duration::from_secs(1),
            NewJob::json("ticks", &"tick")?,
        )
        .map(|s| s.missed(Missed::Skip))
        .map_err(hopper::Error::from)
    };
    // Cron expressions take an optional seconds field and a time zone.
    let nightly = Schedule::cron(
        "nightly",
        "0 30 3 * * *",
        NewJob::json("reports", &"night")?,
    )?
    .time_zone("Europe/Paris")?;
    println!("{}: {}", nightly.name(), nightly.spec());

    let workers = [tick()?, tick()?].map(|schedule| {
        Worker::builder(broker.clone())
            .poll_interval(Duration::from_millis(20))
            .schedule(schedule)
            .queue(
                "ticks",
                QueueOptions::new(),
                |job: JobContext<String>| async move {
                    println!("{} at slot {}", job.payload, job.job.headers["hopper-slot"]);
                    Ok(())
                },
            )
            .start()
    });
    tokio::time::sleep(Duration::from_millis(3500)).await;
    for worker in workers {
        let stats = worker?.shutdown().await;
        println!(
            "a worker enqueued {} slots and found {} taken by the other",
            stats.slots_enqueued, stats.slots_taken_elsewhere
        );
    }
    Ok(())
}
