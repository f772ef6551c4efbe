//! `hopper serve`: the dashboard's pages and JSON API over the broker, and each queue's
//! gauges at `/metrics`, until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use hopper::{Broker, Result};
use hopper_web::{Metrics, ServeOptions};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen. An address beyond this machine needs --token.
    #[arg(long, default_value = "127.0.0.1:8080")]
    bind: SocketAddr,
    /// The token every request must carry: `Authorization: Bearer TOKEN` for the API, the
    /// login form (`/login`) for a browser.
    #[arg(long, env = "HOPPER_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Refuse every action (retry, discard, cancel, pause, resume, purge).
    #[arg(long)]
    read_only: bool,
    /// How often `/metrics` reads each queue's depth, lag and pause from the broker.
    #[arg(long, default_value = "15s")]
    sample_every: humantime::Duration,
}

pub async fn run(url: &str, args: ServeArgs) -> Result<ExitCode> {
    let mut options = ServeOptions {
        bind: args.bind,
        token: args.token,
        read_only: args.read_only,
        metrics: None,
        follow_every: hopper::registry::HEARTBEAT_EVERY,
    };
    // Refused before the broker is reached, as bad usage.
    options.check()?;
    let broker = hopper::connect(url).await?;
    let handle = crate::metrics::record()?;
    options.metrics = Some(Metrics(Arc::new(move || handle.render())));
    tokio::spawn(sample(broker.clone(), Duration::from(args.sample_every)));
    let listener = tokio::net::TcpListener::bind(options.bind)
        .await
        .map_err(|e| hopper::Error::broker_msg(format!("binding {}: {e}", options.bind)))?;
    let address = listener.local_addr().map_or(options.bind, |a| a);
    println!("serving http://{address}/ (API: /api/openapi.json, metrics: /metrics)");
    hopper_web::serve_on(listener, broker, options, stopped()).await?;
    Ok(ExitCode::SUCCESS)
}

/// Sets every queue's gauges every `every`, the queues listed afresh each time; stops
/// where the broker cannot list its queues or keeps no statistics.
async fn sample(broker: Arc<dyn Broker>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let queues = match broker.queues().await {
            Ok(queues) => queues,
            Err(hopper::Error::NotSupported { .. }) => return,
            Err(e) => {
                tracing::warn!(error = %e.chain(), "listing queues for /metrics failed");
                continue;
            }
        };
        if !hopper::set_queue_gauges(&*broker, &queues).await {
            return;
        }
    }
}

/// Completes on SIGINT or SIGTERM.
async fn stopped() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
