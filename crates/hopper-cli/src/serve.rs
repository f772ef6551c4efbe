//! `hopper serve`: the dashboard's JSON API over the broker, until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Args;
use hopper::Result;
use hopper_web::ServeOptions;

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
}

pub async fn run(url: &str, args: ServeArgs) -> Result<ExitCode> {
    let options = ServeOptions {
        bind: args.bind,
        token: args.token,
        read_only: args.read_only,
    };
    // Refused before the broker is reached, as bad usage.
    options.check()?;
    let broker = hopper::connect(url).await?;
    let listener = tokio::net::TcpListener::bind(options.bind)
        .await
        .map_err(|e| hopper::Error::broker_msg(format!("binding {}: {e}", options.bind)))?;
    let address = listener.local_addr().map_or(options.bind, |a| a);
    println!("serving http://{address}/api/queues (OpenAPI: /api/openapi.json)");
    hopper_web::serve_on(listener, broker, options, stopped()).await?;
    Ok(ExitCode::SUCCESS)
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
