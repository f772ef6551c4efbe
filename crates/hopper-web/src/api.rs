//! The API's reads: the session, queues, a queue's jobs by state, one job, a group, live
//! workers.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use hopper::{Cursor, JobId, JobQuery, ListState};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::App;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::timeline::Track;
use crate::views::{GroupView, JobView, PageView, QueueDetail, QueueView, SessionView, WorkerView};
use hopper::admin::COUNT_BOUND;

/// The broker's name and abilities, and the token state-changing calls carry.
#[utoipa::path(get, path = "/api/session", responses(
    (status = 200, body = SessionView),
    (status = 401, body = ErrorBody),
))]
pub async fn session(State(app): State<Arc<App>>) -> Json<SessionView> {
    let caps = app.broker.capabilities();
    Json(SessionView {
        broker: caps.name.to_owned(),
        csrf: app.csrf.clone(),
        read_only: app.read_only,
        list: caps.admin.list,
        redrive: caps.admin.redrive,
        pause: caps.admin.pause,
        stats: caps.admin.stats,
        throughput: caps.admin.throughput,
        workers: caps.admin.workers,
    })
}

/// Every queue holding jobs or paused, with its counts, lag, consumers and throughput.
#[utoipa::path(get, path = "/api/queues", responses(
    (status = 200, body = [QueueView]),
    (status = 404, description = "the broker cannot list its queues", body = ErrorBody),
))]
pub async fn queues(State(app): State<Arc<App>>) -> ApiResult<Json<Vec<QueueView>>> {
    let workers = match app.broker.capabilities().admin.workers {
        true => app.broker.workers().await?,
        false => Vec::new(),
    };
    let statuses = queue_statuses(&app, &workers).await?;
    Ok(Json(statuses.into_iter().map(QueueView::from).collect()))
}

/// Every queue's glance, with its consumers counted from `workers` where the broker lists
/// workers. A broker that cannot list its queues answers `NotSupported`.
pub(crate) async fn queue_statuses(
    app: &App,
    workers: &[hopper::WorkerInfo],
) -> hopper::Result<Vec<hopper::QueueStatus>> {
    let names = app.broker.queues().await?;
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let mut status = app.broker.queue_glance(&name, COUNT_BOUND).await?;
        if app.broker.capabilities().admin.workers {
            status.consumers = Some(hopper::registry::consumers(workers, &name));
        }
        out.push(status);
    }
    Ok(out)
}

/// Refuses an invalid queue name, and one the broker does not hold where it can say.
async fn known_queue(app: &App, queue: &str) -> ApiResult<()> {
    hopper::broker::validate_queue_name(queue)?;
    match app.broker.queues().await {
        Ok(names) if !names.iter().any(|n| n == queue) => Err(ApiError::not_found(format!(
            "no queue named {queue}: it holds no jobs and is not paused"
        ))),
        Ok(_) | Err(hopper::Error::NotSupported { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// One queue, with its throughput over the last hour.
#[utoipa::path(get, path = "/api/queues/{queue}",
    params(("queue" = String, Path, description = "the queue's name")),
    responses(
        (status = 200, body = QueueDetail),
        (status = 400, description = "an invalid queue name", body = ErrorBody),
        (status = 404, description = "no such queue", body = ErrorBody),
    ))]
pub async fn queue(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
) -> ApiResult<Json<QueueDetail>> {
    known_queue(&app, &queue).await?;
    let status = app.broker.queue_glance(&queue, COUNT_BOUND).await?;
    let throughput = match app.broker.capabilities().admin.throughput {
        true => app.broker.throughput(&queue).await?,
        false => Vec::new(),
    };
    Ok(Json(QueueDetail {
        status: status.into(),
        throughput: throughput.into_iter().map(Into::into).collect(),
    }))
}

/// A page of a queue's jobs.
#[derive(Debug, Deserialize, IntoParams)]
pub struct PageParams {
    /// pending, scheduled, leased, dead, completed or cancelled; pending by default.
    pub(crate) state: Option<String>,
    /// 1 to 1000; 50 by default.
    pub(crate) limit: Option<usize>,
    /// The previous page's `next`.
    pub(crate) after: Option<String>,
    /// Newest first.
    pub(crate) newest: Option<bool>,
}

/// A page of a queue's jobs in one state, in the order the state keeps, paged by keyset.
#[utoipa::path(get, path = "/api/queues/{queue}/jobs",
    params(("queue" = String, Path, description = "the queue's name"), PageParams),
    responses(
        (status = 200, body = PageView),
        (status = 400, description = "a bad state, limit, cursor or queue name", body = ErrorBody),
        (status = 404, description = "no such queue, or a broker that cannot list jobs", body = ErrorBody),
    ))]
pub async fn jobs(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
    Query(p): Query<PageParams>,
) -> ApiResult<Json<PageView>> {
    let state = match &p.state {
        Some(s) => s.parse::<ListState>()?,
        None => ListState::Pending,
    };
    let after = p.after.as_deref().map(str::parse::<Cursor>).transpose()?;
    let mut query = JobQuery::new(queue.clone(), state, p.limit.unwrap_or(50));
    query.after = after;
    query.newest_first = p.newest.unwrap_or(false);
    query.validate()?;
    known_queue(&app, &queue).await?;
    let page = app.broker.list_jobs(&query).await?;
    Ok(Json(PageView {
        jobs: page.jobs.iter().map(JobView::from).collect(),
        next: page.next.map(|c| c.to_string()),
    }))
}

/// A job id from the path: a positive integer.
pub fn job_id(raw: &str) -> ApiResult<JobId> {
    match raw.parse::<i64>() {
        Ok(n) if n > 0 => Ok(JobId(n)),
        _ => Err(ApiError::bad_request(format!(
            "invalid job id {raw:?}: expected a positive integer"
        ))),
    }
}

/// One job, with its payload, headers, times and the error of each failed attempt.
#[utoipa::path(get, path = "/api/jobs/{id}",
    params(("id" = i64, Path, description = "the job's id")),
    responses(
        (status = 200, body = JobView),
        (status = 400, description = "not a job id", body = ErrorBody),
        (status = 404, description = "no such job", body = ErrorBody),
    ))]
pub async fn job(State(app): State<Arc<App>>, Path(id): Path<String>) -> ApiResult<Json<JobView>> {
    let id = job_id(&id)?;
    match app.broker.job(id).await? {
        Some(record) => Ok(Json(JobView::from(&record))),
        None => Err(ApiError::not_found(format!("no job {id}"))),
    }
}

/// A group of jobs: its members by outcome, the dead by id, its completion job.
#[utoipa::path(get, path = "/api/groups/{group}",
    params(("group" = String, Path, description = "the group's name")),
    responses(
        (status = 200, body = GroupView),
        (status = 400, description = "an invalid group name", body = ErrorBody),
        (status = 404, description = "no such group, or a broker without groups", body = ErrorBody),
    ))]
pub async fn group(
    State(app): State<Arc<App>>,
    Path(group): Path<String>,
) -> ApiResult<Json<GroupView>> {
    hopper::group::validate_group(&group)?;
    match app.broker.group(&group).await? {
        Some(status) => Ok(Json(GroupView::from(&status))),
        None => Err(ApiError::not_found(format!("no group named {group}"))),
    }
}

/// The live workers, oldest first.
#[utoipa::path(get, path = "/api/workers", responses(
    (status = 200, body = [WorkerView]),
    (status = 404, description = "the broker keeps no worker reports", body = ErrorBody),
))]
pub async fn workers(State(app): State<Arc<App>>) -> ApiResult<Json<Vec<WorkerView>>> {
    let workers = app.broker.workers().await?;
    Ok(Json(workers.iter().map(WorkerView::from).collect()))
}

/// How the workers taking a queue fetched over the last ten minutes: per worker, each
/// report's window, what it held and ran, and the sizes of its fetches since the report
/// before. Empty where the broker keeps no worker reports.
#[utoipa::path(get, path = "/api/queues/{queue}/fetching",
    params(("queue" = String, Path, description = "the queue's name")),
    responses(
        (status = 200, body = [Track]),
        (status = 400, description = "an invalid queue name", body = ErrorBody),
    ))]
pub async fn fetching(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
) -> ApiResult<Json<Vec<Track>>> {
    hopper::broker::validate_queue_name(&queue)?;
    Ok(Json(app.timeline.of_queue(&queue)))
}
