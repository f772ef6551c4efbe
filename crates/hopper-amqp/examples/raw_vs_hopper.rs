//! Consume throughput on RabbitMQ: a Hopper worker (what `hopper load --broker amqp://…
//! --jobs 20000 --concurrency 50 --prefetch W` runs) against a plain lapin consumer on the
//! same queue with the same window, acking each message, for windows 1, 10, 100 and 1000.
//! Prints jobs/s of each and the ratio hopper/raw per window.
//!
//! ```text
//! cargo run --release -p hopper-amqp --example raw_vs_hopper [-- JOBS [URL]]
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hopper_amqp::{AmqpBroker, AmqpOptions};
use hopper_core::{Broker, JobContext, NewJob, Prefetch, QueueOptions, Worker};
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};

const WINDOWS: [u16; 4] = [1, 10, 100, 1000];

async fn fill(broker: &AmqpBroker, queue: &str, jobs: usize) {
    for start in (0..jobs).step_by(1000) {
        let chunk: Vec<NewJob> = (start..(start + 1000).min(jobs))
            .map(|i| NewJob::json(queue, &(i, 0u64)).unwrap())
            .collect();
        broker.enqueue(chunk).await.expect("enqueue");
    }
}

/// A plain lapin consumer: `basic.qos(window)`, then ack each delivery as it comes.
async fn raw(url: &str, queue: &str, jobs: usize, window: u16) -> f64 {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .expect("connect");
    let ch = conn.create_channel().await.unwrap();
    ch.basic_qos(window, BasicQosOptions::default())
        .await
        .unwrap();
    let started = Instant::now();
    let mut consumer = ch
        .basic_consume(
            queue.into(),
            "raw".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut n = 0;
    while let Some(d) = consumer.next().await {
        let d = d.expect("delivery");
        // Decode as Hopper's handler would, so both sides do the same work per message.
        let _: (usize, u64) = serde_json::from_slice(&d.data).unwrap();
        d.ack(BasicAckOptions::default()).await.unwrap();
        n += 1;
        if n == jobs {
            break;
        }
    }
    let rate = jobs as f64 / started.elapsed().as_secs_f64();
    let _ = conn.close(200, "done".into()).await;
    rate
}

/// A Hopper worker at concurrency 50 and prefetch `window`, as `hopper load` runs it.
async fn hopper(url: &str, queue: &str, jobs: usize, window: u16) -> f64 {
    let broker: Arc<dyn Broker> = Arc::new(AmqpBroker::connect(url).await.expect("connect"));
    let done = Arc::new(AtomicU64::new(0));
    let d = done.clone();
    let started = Instant::now();
    let worker = Worker::builder(broker)
        .queue(
            queue,
            QueueOptions::new()
                .concurrency(50)
                .prefetch(Prefetch::Fixed(window as usize)),
            move |_job: JobContext<(usize, u64)>| {
                d.fetch_add(1, Ordering::Relaxed);
                async { Ok(()) }
            },
        )
        .start()
        .expect("worker");
    while worker.stats().completed < jobs as u64 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let rate = jobs as f64 / started.elapsed().as_secs_f64();
    worker.shutdown().await;
    assert!(done.load(Ordering::Relaxed) >= jobs as u64);
    rate
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let jobs: usize = args.next().map_or(20_000, |a| a.parse().expect("JOBS"));
    let url = args
        .next()
        .unwrap_or_else(|| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let queue = format!("hopper_bench_{}", std::process::id());
    let admin = AmqpBroker::connect_with(&url, AmqpOptions::new().declare(true))
        .await
        .expect("connect");
    admin.purge(&queue).await.expect("declare and purge");
    println!("{jobs} jobs per run, acking each; hopper: concurrency 50, prefetch = window");
    println!(
        "{:>7} {:>12} {:>12} {:>8}",
        "window", "raw/s", "hopper/s", "ratio"
    );
    for window in WINDOWS {
        fill(&admin, &queue, jobs).await;
        let r = raw(&url, &queue, jobs, window).await;
        fill(&admin, &queue, jobs).await;
        let h = hopper(&url, &queue, jobs, window).await;
        println!("{window:>7} {r:>12.0} {h:>12.0} {:>8.2}", h / r);
    }
    let dead = hopper_amqp::topology::dead_queue(&queue);
    admin.delete_queues(&[queue, dead]).await.expect("delete");
    admin.close().await;
}
