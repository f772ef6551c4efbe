//! `/jobs/{id}`: one job with its payload, headers, times, the error of every failed
//! attempt, and what can be done with it; `/workers`: the live workers.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use hopper::{JobRecord, JobState};
use maud::{Markup, html};

use super::overview::{live_workers, worker_table};
use super::{PageError, PageResult, layout, time};
use crate::App;
use crate::api::job_id;
use crate::views::JobView;

/// `GET /jobs/{id}`.
pub(crate) async fn job(State(app): State<Arc<App>>, Path(id): Path<String>) -> PageResult {
    let id = job_id(&id)?;
    let Some(record) = app.broker.job(id).await? else {
        return Err(PageError(StatusCode::NOT_FOUND, format!("no job {id}")));
    };
    let title = format!("job {id}");
    Ok(layout(&app, &title, job_body(&app, &record)))
}

fn job_body(app: &App, r: &JobRecord) -> Markup {
    let j = &r.job;
    let view = JobView::from(r);
    let payload = match (&view.payload_json, &view.payload_text, &view.payload_hex) {
        (Some(json), _, _) => serde_json::to_string_pretty(json).unwrap_or_default(),
        (_, Some(text), _) => text.clone(),
        (_, _, Some(hex)) => format!("{} bytes, not UTF-8, as hex:\n{hex}", view.payload_bytes),
        _ => String::new(),
    };
    let caps = app.broker.capabilities().admin;
    html! {
        h1 {
            "Job " (j.id.0)
            span class=(format!("badge {}", r.state.name())) #state { (r.state.name()) }
        }
        @if !app.read_only {
            div.actions {
                @if r.state == JobState::Dead && caps.redrive {
                    button #retry data-post=(format!("/api/jobs/{}/retry", j.id.0)) { "Retry" }
                    button.danger #discard data-post=(format!("/api/jobs/{}/discard", j.id.0))
                        data-confirm="Discard this dead letter?" data-then=(format!("/queues/{}?state=dead", j.queue)) { "Discard" }
                }
                @if r.state == JobState::Pending {
                    button.danger #cancel data-post=(format!("/api/jobs/{}/cancel", j.id.0))
                        data-confirm="Cancel this job? It will never run." { "Cancel" }
                }
            }
        }
        section.panel {
            dl.fields {
                dt { "queue" } dd { a href=(format!("/queues/{}", j.queue)) { (j.queue) } }
                @if let Some(group) = j.headers.get(hopper::group::GROUP_HEADER) {
                    dt { "completes group" }
                    dd { a href=(super::group::group_href(group)) #group { (group) } }
                }
                dt { "attempts" } dd { (j.attempt) " of " (j.max_attempts) }
                dt { "priority" } dd { (j.priority) }
                dt { "enqueued" } dd { (time(j.created_at)) }
                dt { "due" } dd { (time(j.run_at)) }
                @if let Some(at) = r.started_at { dt { "last started" } dd { (time(at)) } }
                @if let Some(at) = r.finished_at { dt { "finished" } dd { (time(at)) } }
                @if let Some(key) = &r.unique_key { dt { "unique key" } dd #unique-key { code { (key) } } }
                @if let Some(key) = &r.ordering_key {
                    dt { "ordering key" }
                    dd #ordering-key {
                        code { (key) }
                        @if r.blocked { " — waits for its turn on this key" }
                    }
                }
                @if let Some(key) = &r.rate_key { dt { "rate key" } dd #rate-key { code { (key) } } }
            }
        }
        h2 { "Payload" }
        pre #payload { (payload) }
        @if !j.headers.is_empty() {
            h2 { "Headers" }
            section.panel {
                dl.fields {
                    @for (name, value) in &j.headers { dt { (name) } dd { (value) } }
                }
            }
        }
        h2 { "Errors" }
        @if r.errors.is_empty() {
            @match &r.last_error {
                Some(e) => pre { (e) },
                None => p.muted { "No failed attempt." },
            }
        } @else {
            @for e in r.errors.iter().rev() {
                div.error-entry {
                    span.muted { "attempt " (e.attempt) ", " (time(e.at)) }
                    pre { (e.error) }
                }
            }
        }
    }
}

/// `GET /workers`.
pub(crate) async fn workers(State(app): State<Arc<App>>) -> PageResult {
    let body = match app.broker.capabilities().admin.workers {
        true => {
            let workers = live_workers(&app).await?;
            html! {
                h1 { "Workers" }
                section.panel { (worker_table(&workers)) }
                h2 { "Schedules" }
                section.panel { (schedule_table(&hopper::registry::schedules(&workers))) }
            }
        }
        false => html! {
            h1 { "Workers" }
            p.note { "This broker keeps no worker reports. Each queue's page counts its consumers." }
        },
    };
    Ok(layout(&app, "Workers", body))
}

/// The schedules of periodic jobs the live workers hold, merged by name.
fn schedule_table(schedules: &[hopper::ScheduleInfo]) -> Markup {
    let at = |ms: Option<i64>| ms.map_or_else(|| "-".to_owned(), time);
    html! {
        @if schedules.is_empty() {
            p.muted { "No live worker holds a schedule." }
        } @else {
            table #schedules {
                thead { tr {
                    th { "schedule" } th { "queue" } th { "when" } th { "next slot" }
                    th { "latest slot" } th.num { "workers" }
                } }
                tbody {
                    @for s in schedules {
                        @let b = &s.schedule;
                        tr data-schedule=(b.name) {
                            td { (b.name) }
                            td { a href=(format!("/queues/{}", b.queue)) { (b.queue) } }
                            td { code { (b.spec) } }
                            td { (at(b.next_at)) }
                            td { (at(b.last_at)) }
                            td.num { (s.workers) }
                        }
                    }
                }
            }
        }
    }
}
