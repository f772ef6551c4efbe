//! The dashboard's pages, rendered on the server with maud, which escapes every value it
//! interpolates: a payload holding `<script>` is shown as text. The stylesheet and the
//! script are compiled in (`assets/`), so `cargo build` alone serves them.
//!
//! - `overview`: every queue, the last hour's throughput, live workers;
//! - `queue`: one queue's counts, chart, jobs by state, its actions; dead letters picked
//!   and re-driven; `fetching`: how its workers fetch; `job`: one job, and the workers
//!   page; `group`: a group of jobs and its completion job.

mod chart;
mod fetching;
mod group;
mod job;
mod overview;
mod queue;

use std::time::{Duration, SystemTime};

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use crate::App;

pub(crate) use group::group;
pub(crate) use job::{job, workers};
pub(crate) use overview::overview;
pub(crate) use queue::queue;

/// How often a page refreshes its main part, in seconds.
const REFRESH_S: u32 = 5;

const CSS: &str = include_str!("../../assets/app.css");
const JS: &str = include_str!("../../assets/app.js");

/// `GET /assets/app.css`.
pub(crate) async fn css() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS).into_response()
}

/// `GET /assets/app.js`.
pub(crate) async fn js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        JS,
    )
        .into_response()
}

/// A page: the header with its navigation, `body` as the main part.
fn layout(app: &App, title: &str, body: Markup) -> Markup {
    let broker = app.broker.capabilities().name;
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="csrf" content=(app.csrf);
                title { (title) " · Hopper" }
                link rel="stylesheet" href="/assets/app.css";
                script src="/assets/app.js" defer {}
            }
            body data-refresh=(REFRESH_S) {
                header {
                    a.brand href="/" { "Hopper" }
                    nav { a href="/" { "Queues" } a href="/workers" { "Workers" } }
                    span.broker {
                        (broker) " broker"
                        @if app.read_only { " " span.badge.ro { "read-only" } }
                    }
                }
                main { (body) }
                div #flash role="status" {}
            }
        }
    }
}

/// A page that failed: its status and what went wrong, in the layout.
pub(crate) struct PageError(pub(crate) StatusCode, pub(crate) String);

impl From<crate::error::ApiError> for PageError {
    fn from(e: crate::error::ApiError) -> Self {
        PageError(e.status, e.message)
    }
}

impl From<hopper::Error> for PageError {
    fn from(e: hopper::Error) -> Self {
        crate::error::ApiError::from(e).into()
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let body = html! {
            h1 { (self.0.as_u16()) " " (self.0.canonical_reason().unwrap_or("")) }
            p.note { (self.1) }
            p { a href="/" { "Back to the queues" } }
        };
        let page = html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { "Hopper" }
                    link rel="stylesheet" href="/assets/app.css";
                }
                body { main { (body) } }
            }
        };
        (self.0, page).into_response()
    }
}

pub(crate) type PageResult = Result<Markup, PageError>;

/// Now, in ms since the epoch.
fn now_ms() -> i64 {
    hopper::broker::to_millis(SystemTime::now())
}

/// A time as UTC, to the second.
fn time(ms: i64) -> String {
    let at = hopper::broker::from_millis(ms);
    humantime::format_rfc3339_seconds(at)
        .to_string()
        .replace('T', " ")
        .replace('Z', " UTC")
}

/// A span as a person reads it: `850ms`, `12s`, `3m 4s`.
fn span(d: Duration) -> String {
    let rounded = match d < Duration::from_secs(1) {
        true => Duration::from_millis(d.as_millis() as u64),
        false => Duration::from_secs(d.as_secs()),
    };
    humantime::format_duration(rounded).to_string()
}

/// How long ago `ms` was.
fn ago(ms: i64) -> String {
    let d = Duration::from_millis(now_ms().saturating_sub(ms).max(0) as u64);
    format!("{} ago", span(d))
}

/// A count as a glance read it: `10000+` past its bound.
fn count(n: u64, bound: Option<u64>) -> String {
    match bound {
        Some(b) if n > b => format!("{b}+"),
        _ => n.to_string(),
    }
}

/// A count, or `-` where the broker does not keep it.
fn maybe(n: Option<u64>) -> String {
    n.map_or_else(|| "-".into(), |n| n.to_string())
}
