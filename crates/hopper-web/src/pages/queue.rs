//! `/queues/{queue}`: the queue's counts and actions, its last hour, the workers taking it,
//! and a page of its jobs in one state. Dead letters can be picked and retried or
//! discarded, or all of them at once.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use hopper::{Cursor, JobQuery, JobRecord, ListState, QueueStatus};
use maud::{Markup, html};

use super::chart::{chart, per_minute};
use super::fetching::fetching;
use super::overview::{live_workers, worker_table};
use super::{PageResult, count, layout, maybe, now_ms, span, time};
use crate::App;
use crate::api::PageParams;
use hopper::admin::COUNT_BOUND;

/// Jobs a page lists.
const PAGE: usize = 50;

/// `GET /queues/{queue}`.
pub(crate) async fn queue(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
    Query(p): Query<PageParams>,
) -> PageResult {
    hopper::broker::validate_queue_name(&queue).map_err(hopper::Error::from)?;
    let state = match &p.state {
        Some(s) => s.parse::<ListState>().map_err(hopper::Error::from)?,
        None => ListState::Pending,
    };
    let after = p
        .after
        .as_deref()
        .map(str::parse::<Cursor>)
        .transpose()
        .map_err(hopper::Error::from)?;
    let newest = p.newest.unwrap_or(false);
    let caps = app.broker.capabilities().admin;
    let mut status = app.broker.queue_glance(&queue, COUNT_BOUND).await?;
    let workers: Vec<_> = live_workers(&app)
        .await?
        .into_iter()
        .filter(|w| w.takes(&queue))
        .collect();
    if caps.workers {
        status.consumers = Some(workers.len() as u64);
    }
    let buckets = match caps.throughput {
        true => crate::timeline::buckets(&app, &queue).await?,
        false => Vec::new(),
    };
    let page = match caps.list {
        true => {
            let mut query = JobQuery::new(queue.clone(), state, PAGE);
            query.after = after;
            query.newest_first = newest;
            Some(app.broker.list_jobs(&query).await?)
        }
        false => None,
    };
    let body = html! {
        h1 {
            (queue)
            @if status.paused { span.badge.paused { "paused" } }
            @if let Some(limit) = status.rate_limit {
                span.badge title="at most this many jobs start per window, across every worker" {
                    "limit " (limit)
                }
            }
        }
        (counts(&status))
        @if !app.read_only { (queue_actions(&app, &status)) }
        @if caps.throughput {
            h2 { "Last hour" }
            section.panel { (chart(&per_minute(&buckets, now_ms()))) }
        }
        @if caps.workers {
            h2 { "Workers taking it" }
            section.panel { (worker_table(&workers)) }
            h2 { "How they fetch" }
            section.panel #fetching { (fetching(&app.timeline.of_queue(&queue))) }
        }
        h2 { "Jobs" }
        @match &page {
            None => p.note {
                "This broker holds messages, not records: its jobs cannot be listed. "
                "Depths, consumers and dead letters are counted above, and dead letters can be "
                "retried or discarded all together."
            },
            Some(page) => {
                (tabs(&queue, state, &status))
                section.panel { (jobs_table(&app, &queue, state, &page.jobs)) }
                div.pager {
                    @if after.is_some() {
                        a href=(format!("/queues/{queue}?state={state}{}", if newest { "&newest=true" } else { "" })) { "← first page" }
                    }
                    @if let Some(next) = page.next {
                        a #next href=(format!("/queues/{queue}?state={state}&after={next}{}", if newest { "&newest=true" } else { "" })) { "next page →" }
                    }
                    a href=(format!("/queues/{queue}?state={state}{}", if newest { "" } else { "&newest=true" })) {
                        @if newest { "oldest first" } @else { "newest first" }
                    }
                }
            },
        }
    };
    Ok(layout(&app, &queue, body))
}

fn counts(s: &QueueStatus) -> Markup {
    let c = s.counts;
    let minute = s.last_minute;
    html! {
        div.counts #counts {
            div.count { b #pending { (count(c.pending, s.bound)) } span { "pending" } }
            div.count { b #scheduled { (count(c.scheduled, s.bound)) } span { "scheduled" } }
            div.count { b #leased { (count(c.leased, s.bound)) } span { "leased" } }
            div.count { b #dead { (count(c.dead, s.bound)) } span { "dead" } }
            div.count { b { (s.lag.map(span).unwrap_or_else(|| "-".into())) } span { "lag" } }
            div.count { b { (maybe(s.consumers)) } span { "consumers" } }
            div.count { b { (maybe(minute.map(|t| t.completed))) } span { "done last minute" } }
            div.count { b { (maybe(minute.map(|t| t.failed + t.dead))) } span { "failed last minute" } }
        }
    }
}

fn queue_actions(app: &App, s: &QueueStatus) -> Markup {
    let q = &s.queue;
    let caps = app.broker.capabilities().admin;
    html! {
        div.actions {
            @if caps.pause {
                @if s.paused {
                    button #resume data-post=(format!("/api/queues/{q}/resume")) { "Resume" }
                } @else {
                    button #pause data-post=(format!("/api/queues/{q}/pause")) { "Pause" }
                }
            }
            @if caps.redrive && s.counts.dead > 0 {
                button #retry-all data-post=(format!("/api/queues/{q}/dead/retry")) data-body="all"
                    data-confirm=(format!("Retry all {} dead letters of {q}?", count(s.counts.dead, s.bound))) { "Retry all dead" }
                button.danger #discard-all data-post=(format!("/api/queues/{q}/dead/discard")) data-body="all"
                    data-confirm=(format!("Discard all {} dead letters of {q}?", count(s.counts.dead, s.bound))) { "Discard all dead" }
            }
            button.danger #purge data-post=(format!("/api/queues/{q}/purge?confirm={q}")) data-typed=(q) data-then="/" { "Purge…" }
        }
    }
}

fn tabs(queue: &str, on: ListState, s: &QueueStatus) -> Markup {
    let shown = |state: ListState| match state {
        ListState::Pending => Some(s.counts.pending),
        ListState::Scheduled => Some(s.counts.scheduled),
        ListState::Leased => Some(s.counts.leased),
        ListState::Dead => Some(s.counts.dead),
        _ => None,
    };
    html! {
        nav.tabs {
            @for state in ListState::ALL {
                a class=[(state == on).then_some("on")] href=(format!("/queues/{queue}?state={state}")) {
                    (state) @if let Some(n) = shown(state) { " " span.muted { (count(n, s.bound)) } }
                }
            }
        }
    }
}

fn jobs_table(app: &App, queue: &str, state: ListState, jobs: &[JobRecord]) -> Markup {
    let picking =
        state == ListState::Dead && !app.read_only && app.broker.capabilities().admin.redrive;
    html! {
        @if jobs.is_empty() {
            p.muted #no-jobs { "No " (state) " jobs." }
        } @else {
            @if picking {
                div.actions {
                    button #retry-picked data-post=(format!("/api/queues/{queue}/dead/retry")) data-body="picked" { "Retry selected" }
                    button.danger #discard-picked data-post=(format!("/api/queues/{queue}/dead/discard")) data-body="picked" { "Discard selected" }
                }
            }
            table #jobs {
                thead { tr {
                    @if picking { th { input #pick-all type="checkbox" aria-label="select all"; } }
                    th { "id" } th.num { "priority" } th.num { "attempt" } th { "due" }
                    th { "finished" } th { "last error" }
                } }
                tbody {
                    @for r in jobs {
                        @let j = &r.job;
                        tr data-id=(j.id.0) {
                            @if picking { td { input.pick type="checkbox" value=(j.id.0) aria-label=(format!("select job {}", j.id.0)); } }
                            td { a href=(format!("/jobs/{}", j.id.0)) { (j.id.0) } }
                            td.num { (j.priority) }
                            td.num { (j.attempt) "/" (j.max_attempts) }
                            td { (time(j.run_at)) }
                            td { (r.finished_at.map(time).unwrap_or_default()) }
                            td.error { (r.last_error.as_deref().map(brief).unwrap_or_default()) }
                        }
                    }
                }
            }
        }
    }
}

/// The last line of an error, at most 120 characters.
pub(super) fn brief(error: &str) -> String {
    let line = error.trim().lines().next_back().unwrap_or("");
    let mut out: String = line.chars().take(120).collect();
    if line.chars().count() > 120 {
        out.push('…');
    }
    out
}
