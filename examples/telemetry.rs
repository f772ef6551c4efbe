//! Hopper's spans exported through OpenTelemetry, and its metrics through a Prometheus
//! recorder: the wiring a program adds at start, before it starts workers.
//!
//! Each job runs in a span named `process QUEUE` and each fetch in one named `receive`,
//! with OpenTelemetry's messaging attributes (`messaging.system`,
//! `messaging.destination.name`, `messaging.message.id`, `messaging.batch.message_count`);
//! `tracing-opentelemetry` turns them into OpenTelemetry spans of kind consumer. This
//! example prints them with the stdout exporter; a real program would use
//! `opentelemetry-otlp` instead, the rest unchanged.
//!
//! `cargo run -p hopper --example telemetry`

use hopper::{JobContext, NewJob, QueueOptions, Worker};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[tokio::main]
async fn main() -> hopper::Result<()> {
    // Spans: Hopper's job and fetch spans are at `info`, under the targets `hopper::job`
    // and `hopper::fetch`; everything else at `warn`.
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(opentelemetry_stdout::SpanExporter::default())
        .build();
    let filter = tracing_subscriber::EnvFilter::new("warn,hopper::job=info,hopper::fetch=info");
    tracing_subscriber::registry()
        .with(filter)
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("hopper-example")))
        .init();
    // Metrics: any `metrics` recorder; this one keeps Prometheus text to print at the end
    // (`with_http_listener` would serve it instead).
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("no other recorder is installed");

    let broker = hopper::connect("memory://").await?;
    let jobs = (1..=3u32)
        .map(|n| NewJob::json("emails", &n))
        .collect::<Result<_, _>>()?;
    broker.enqueue(jobs).await?;
    let worker = Worker::builder(broker.clone())
        .queue(
            "emails",
            QueueOptions::new().concurrency(2),
            |job: JobContext<u32>| async move {
                tracing::info!(n = job.payload, "sending");
                Ok(())
            },
        )
        .start()?;
    while worker.stats().completed < 3 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    worker.shutdown().await;

    provider.shutdown().expect("the exporter flushes");
    println!("{}", metrics.render());
    Ok(())
}
