//! A group with a completion job on the memory broker: an import of 20 rows runs as 20
//! jobs, two of which cannot succeed, and a report job runs once, after the last row
//! settled, told how many succeeded and which died.
//!
//! `cargo run -p hopper --example group`

use std::time::Duration;

use hopper::{GroupOutcome, JobContext, JobError, NewJob, QueueOptions, Worker};

#[tokio::main]
async fn main() -> hopper::Result<()> {
    let broker = hopper::connect("memory://").await?;

    // The rows, then the seal: one enqueue per 1,000 members, and the report job to run
    // when every row has completed, died or been cancelled.
    let rows: Vec<NewJob> = (1..=20u32)
        .map(|row| NewJob::json("import-rows", &row))
        .collect::<hopper::Result<_>>()?;
    let report = NewJob::json("import-report", "import 7")?;
    broker.enqueue_group("import-7", rows, report).await?;

    let reader = broker.clone();
    let worker = Worker::builder(broker.clone())
        .poll_interval(Duration::from_millis(20))
        .queue(
            "import-rows",
            QueueOptions::new().concurrency(4),
            |job: JobContext<u32>| async move {
                // Rows 7 and 13 are malformed: retrying cannot help.
                if job.payload % 13 == 0 || job.payload == 7 {
                    return Err(JobError::discard(format!(
                        "row {} is malformed",
                        job.payload
                    )));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(())
            },
        )
        .queue(
            "import-report",
            QueueOptions::new().concurrency(1),
            move |job: JobContext<String>| {
                let reader = reader.clone();
                async move {
                    let outcome = GroupOutcome::of(&job.job).expect("a completion job");
                    let group = reader.group(&outcome.group).await?.expect("its group");
                    println!(
                        "{}: {} of {} rows imported, {} died: jobs {:?}",
                        job.payload, outcome.succeeded, outcome.members, outcome.dead, group.dead
                    );
                    Ok(())
                }
            },
        )
        .start()?;
    while worker.stats().completed < 19 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await;
    let status = broker.group("import-7").await?.expect("the group");
    println!(
        "group {}: complete, completion job {}",
        status.group,
        status.completion.expect("it ran")
    );
    Ok(())
}
