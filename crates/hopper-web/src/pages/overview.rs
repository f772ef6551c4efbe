//! `/`: every queue with its counts, lag, pause, consumers and last minute; the last
//! hour's throughput of all queues together; the live workers.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use hopper::{QueueStatus, WorkerInfo};
use maud::{Markup, html};

use super::chart::{chart, per_minute};
use super::{PageResult, ago, count, layout, maybe, now_ms, span, time};
use crate::App;
use crate::api::queue_statuses;

/// Every queue's status (see [`queue_statuses`]); `None` where the broker cannot list its
/// queues.
async fn statuses(app: &App, workers: &[WorkerInfo]) -> hopper::Result<Option<Vec<QueueStatus>>> {
    match queue_statuses(app, workers).await {
        Ok(statuses) => Ok(Some(statuses)),
        Err(hopper::Error::NotSupported { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The live workers, or none where the broker keeps no reports: as the server last read
/// them following their reports, when that was within two report intervals, so an open
/// page costs the broker no query for them.
pub(super) async fn live_workers(app: &App) -> hopper::Result<Vec<WorkerInfo>> {
    if !app.broker.capabilities().admin.workers {
        return Ok(Vec::new());
    }
    match app.timeline.latest(app.follow_every * 2) {
        Some(workers) => Ok(workers),
        None => app.broker.workers().await,
    }
}

/// `GET /`.
pub(crate) async fn overview(State(app): State<Arc<App>>) -> PageResult {
    let workers = live_workers(&app).await?;
    let queues = statuses(&app, &workers).await?;
    let caps = app.broker.capabilities().admin;
    let mut buckets = Vec::new();
    if caps.throughput {
        for q in queues.iter().flatten() {
            buckets.extend(crate::timeline::buckets(&app, &q.queue).await?);
        }
    }
    let body = html! {
        h1 { "Queues" }
        @match &queues {
            None => {
                p.note {
                    "This broker holds messages, not records: it cannot list its queues, their "
                    "jobs or its workers. Open a queue by name to see its depth, consumers and "
                    "dead letters."
                }
                form #open-queue onsubmit="location.href='/queues/'+encodeURIComponent(this.queue.value);return false" {
                    input name="queue" placeholder="queue name" required aria-label="queue name";
                    " "
                    button { "Open" }
                }
            },
            Some(queues) if queues.is_empty() => p.muted { "No queue holds jobs." },
            Some(queues) => section.panel { (queue_table(queues)) },
        }
        @if caps.throughput {
            h2 { "Throughput" }
            section.panel { (chart(&per_minute(&buckets, now_ms()))) }
        }
        h2 { "Workers" }
        @if caps.workers {
            section.panel { (worker_table(&workers)) }
        } @else {
            p.note { "This broker keeps no worker reports: consumers are counted per queue instead." }
        }
    };
    Ok(layout(&app, "Queues", body))
}

fn queue_table(queues: &[QueueStatus]) -> Markup {
    html! {
        table #queues {
            thead { tr {
                th { "queue" } th.num { "pending" } th.num { "scheduled" } th.num { "leased" }
                th.num { "dead" } th.num { "lag" } th.num { "consumers" } th.num { "done/min" }
                th.num { "failed/min" } th.num { "dead/min" } th {}
            } }
            tbody {
                @for q in queues {
                    @let c = q.counts;
                    @let minute = q.last_minute;
                    tr data-queue=(q.queue) {
                        td { a href=(format!("/queues/{}", q.queue)) { (q.queue) } }
                        td.num.pending { (count(c.pending, q.bound)) }
                        td.num.scheduled { (count(c.scheduled, q.bound)) }
                        td.num.leased { (count(c.leased, q.bound)) }
                        td.num.dead {
                            @if c.dead > 0 {
                                a href=(format!("/queues/{}?state=dead", q.queue)) { (count(c.dead, q.bound)) }
                            } @else { "0" }
                        }
                        td.num { (q.lag.map(span).unwrap_or_else(|| "-".into())) }
                        td.num { (maybe(q.consumers)) }
                        td.num { (maybe(minute.map(|t| t.completed))) }
                        td.num { (maybe(minute.map(|t| t.failed))) }
                        td.num { (maybe(minute.map(|t| t.dead))) }
                        td { @if q.paused { span.badge.paused { "paused" } } }
                    }
                }
            }
        }
    }
}

/// The live workers, with each queue's slots, what it holds and its window.
pub(super) fn worker_table(workers: &[WorkerInfo]) -> Markup {
    html! {
        @if workers.is_empty() {
            p.muted { "No live workers." }
        } @else {
            table #workers {
                thead { tr {
                    th { "worker" } th { "queues: running / held of slots, window" }
                    th { "started" } th { "last report" } th { "report expires in" }
                    th { "earliest lease expires in" }
                } }
                tbody {
                    @for w in workers {
                        tr data-worker=(w.id) data-pid=(w.pid) {
                            td { (w.host) " " span.muted { "pid " (w.pid) } br; span.muted { (w.id) } }
                            td {
                                @for q in &w.queues {
                                    div.taken data-queue=(q.queue) data-slots=(q.concurrency) {
                                        a href=(format!("/queues/{}", q.queue)) { (q.queue) } " "
                                        (q.running) " / " (q.held) " of " (q.concurrency)
                                        span.muted { ", window " (q.window) }
                                        @if q.paused { " " span.badge.paused { "paused" } }
                                    }
                                }
                            }
                            td { (time(w.started_at)) }
                            td { (ago(w.heartbeat_at)) }
                            td { (span(Duration::from_millis((w.expires_at - now_ms()).max(0) as u64))) }
                            td.lease {
                                @match w.queues.iter().filter_map(|q| q.lease_expires_at).min() {
                                    Some(at) => (span(Duration::from_millis((at - now_ms()).max(0) as u64))),
                                    None => span.muted { "no lease held" },
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
