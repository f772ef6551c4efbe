//! `hopper serve`: the dashboard's pages and JSON API over a broker, guarded by a token, a
//! CSRF token and a read-only switch.
//!
//! [`router`] builds the whole application for a broker; [`serve`] checks the options,
//! binds and serves until told to stop. The API's OpenAPI document is generated from the
//! handlers and their types and served at `/api/openapi.json`, so it cannot drift from
//! them.
//!
//! # Layout
//! - `auth`: the guard every request passes: loopback host names, the token, CSRF, read-only.
//! - `api`: the reads (session, queues, jobs, workers); `actions`: the POSTs.
//! - `views`: what the API answers; `error`: how it fails; `openapi`: the document.
//! - `pages`: the HTML pages over the same calls, with their stylesheet and script.

mod actions;
mod api;
pub mod auth;
mod error;
mod openapi;
mod pages;
pub mod timeline;
pub mod views;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use hopper::{Broker, ConfigError};

pub use error::ErrorBody;
pub use openapi::openapi_json;

/// How `hopper serve` runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Where to listen.
    pub bind: SocketAddr,
    /// The token every request must carry; required unless `bind` is a loopback address.
    pub token: Option<String>,
    /// Refuse every action.
    pub read_only: bool,
    /// What `/metrics` serves; without it, `/metrics` answers 404.
    pub metrics: Option<Metrics>,
    /// How often the server reads the workers' reports to draw how they fetch; the
    /// workers report every 5 s by default.
    pub follow_every: std::time::Duration,
}

/// Renders the process's metrics as Prometheus text, for `/metrics`.
#[derive(Clone)]
pub struct Metrics(pub Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl ServeOptions {
    /// Refuses a bind beyond this machine without a token, and an empty token.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.token.as_deref() == Some("") {
            return Err(ConfigError::new(
                "--token",
                "empty",
                "a secret of one character or more",
            ));
        }
        if self.token.is_none() && !self.bind.ip().is_loopback() {
            return Err(ConfigError::new(
                "--bind",
                self.bind,
                "a loopback address (127.0.0.1, [::1]) unless --token is given: anyone who \
                 can reach the address could read jobs and purge queues",
            ));
        }
        Ok(())
    }
}

/// What every handler shares.
#[derive(Debug)]
pub(crate) struct App {
    pub(crate) broker: Arc<dyn Broker>,
    pub(crate) token: Option<String>,
    pub(crate) read_only: bool,
    /// The token state-changing requests carry (see `auth`).
    pub(crate) csrf: String,
    /// The session cookie's value once logged in with the token.
    pub(crate) session: String,
    pub(crate) metrics: Option<Metrics>,
    pub(crate) timeline: timeline::Timeline,
    /// How often the server reads the workers' reports.
    pub(crate) follow_every: std::time::Duration,
}

/// The application: the pages and the API under `/api`, behind the guard. Nothing follows
/// the workers' reports: [`serve`] does.
pub fn router(broker: Arc<dyn Broker>, options: &ServeOptions) -> Router {
    routes(app(broker, options))
}

fn app(broker: Arc<dyn Broker>, options: &ServeOptions) -> Arc<App> {
    Arc::new(App {
        broker,
        token: options.token.clone(),
        read_only: options.read_only,
        csrf: auth::secret(),
        session: auth::secret(),
        metrics: options.metrics.clone(),
        timeline: timeline::Timeline::default(),
        follow_every: options.follow_every,
    })
}

fn routes(app: Arc<App>) -> Router {
    Router::new()
        .route("/api/session", get(api::session))
        .route("/api/openapi.json", get(openapi::document))
        .route("/api/queues", get(api::queues))
        .route("/api/queues/{queue}", get(api::queue))
        .route("/api/queues/{queue}/jobs", get(api::jobs))
        .route("/api/queues/{queue}/fetching", get(api::fetching))
        .route("/api/queues/{queue}/pause", post(actions::pause))
        .route("/api/queues/{queue}/resume", post(actions::resume))
        .route("/api/queues/{queue}/purge", post(actions::purge))
        .route("/api/queues/{queue}/dead/retry", post(actions::retry_dead))
        .route(
            "/api/queues/{queue}/dead/discard",
            post(actions::discard_dead),
        )
        .route("/api/jobs/{id}", get(api::job))
        .route("/api/jobs/{id}/retry", post(actions::retry_job))
        .route("/api/jobs/{id}/discard", post(actions::discard_job))
        .route("/api/jobs/{id}/cancel", post(actions::cancel_job))
        .route("/api/groups/{group}", get(api::group))
        .route("/api/workers", get(api::workers))
        .route("/metrics", get(metrics))
        .route("/login", get(auth::login_form).post(auth::login))
        .route("/", get(pages::overview))
        .route("/queues/{queue}", get(pages::queue))
        .route("/jobs/{id}", get(pages::job))
        .route("/groups/{group}", get(pages::group))
        .route("/workers", get(pages::workers))
        .route("/assets/app.css", get(pages::css))
        .route("/assets/app.js", get(pages::js))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            auth::guard,
        ))
        .with_state(app)
}

/// `GET /metrics`: Prometheus text, where the server was given a renderer.
async fn metrics(State(app): State<Arc<App>>) -> axum::response::Response {
    use axum::response::IntoResponse;
    match &app.metrics {
        Some(render) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4",
            )],
            (render.0)(),
        )
            .into_response(),
        None => error::ApiError::not_found("this server records no metrics").into_response(),
    }
}

/// Checks `options`, binds, and serves until `stop` completes.
pub async fn serve(
    broker: Arc<dyn Broker>,
    options: ServeOptions,
    stop: impl Future<Output = ()> + Send + 'static,
) -> hopper::Result<()> {
    options.check()?;
    let listener = tokio::net::TcpListener::bind(options.bind)
        .await
        .map_err(|e| hopper::Error::broker_msg(format!("binding {}: {e}", options.bind)))?;
    serve_on(listener, broker, options, stop).await
}

/// [`serve`] on a listener already bound (tests bind port 0 and read the port).
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    broker: Arc<dyn Broker>,
    options: ServeOptions,
    stop: impl Future<Output = ()> + Send + 'static,
) -> hopper::Result<()> {
    options.check()?;
    let address = listener.local_addr().map_or(options.bind, |a| a);
    tracing::info!(%address, "serving the dashboard");
    let app = app(broker, &options);
    let follower = app
        .broker
        .capabilities()
        .admin
        .workers
        .then(|| tokio::spawn(timeline::follow(app.clone(), options.follow_every)));
    let served = axum::serve(listener, routes(app))
        .with_graceful_shutdown(stop)
        .await
        .map_err(|e| hopper::Error::broker_msg(format!("serving {address}: {e}")));
    if let Some(follower) = follower {
        follower.abort();
    }
    served
}
