//! The API's actions, each a POST: a job retried, discarded or cancelled; a queue paused,
//! resumed or purged; dead letters retried or discarded by id or all together. The guard
//! (see `auth`) has already refused them in read-only mode and without the session's token.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use hopper::{CancelOutcome, JobId, JobState, Selection};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::App;
use crate::api::job_id;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::views::{Changed, DeadSelection};

/// Dead letters re-driven or discarded per broker call when a whole queue is taken.
const CHUNK: usize = 1000;

/// The job, which must be dead, and of `queue` when one is named.
async fn dead_job(app: &App, id: JobId, queue: Option<&str>) -> ApiResult<()> {
    match app.broker.job(id).await? {
        None => Err(ApiError::not_found(format!("no job {id}"))),
        Some(r) if r.state != JobState::Dead => Err(ApiError::conflict(format!(
            "job {id} is {}, not dead",
            r.state.name()
        ))),
        Some(r) if queue.is_some_and(|q| q != r.job.queue) => Err(ApiError::conflict(format!(
            "job {id} is in queue {}, not {}",
            r.job.queue,
            queue.unwrap_or_default()
        ))),
        Some(_) => Ok(()),
    }
}

/// Retries (`retry`) or discards one dead job.
async fn one_dead(app: &App, id: &str, retry: bool) -> ApiResult<Json<Changed>> {
    let id = job_id(id)?;
    dead_job(app, id, None).await?;
    let which = Selection::Jobs(vec![id]);
    let changed = match retry {
        true => app.broker.retry_dead(&which).await?,
        false => app.broker.discard_dead(&which).await?,
    };
    Ok(Json(Changed { changed }))
}

/// Puts a dead job back in its queue, due now, attempts reset, errors kept.
#[utoipa::path(post, path = "/api/jobs/{id}/retry",
    params(("id" = i64, Path, description = "the job's id")),
    responses(
        (status = 200, body = Changed),
        (status = 400, description = "not a job id", body = ErrorBody),
        (status = 403, description = "read-only, or no CSRF token", body = ErrorBody),
        (status = 404, description = "no such job", body = ErrorBody),
        (status = 409, description = "the job is not dead", body = ErrorBody),
    ))]
pub async fn retry_job(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> ApiResult<Json<Changed>> {
    one_dead(&app, &id, true).await
}

/// Deletes a dead job.
#[utoipa::path(post, path = "/api/jobs/{id}/discard",
    params(("id" = i64, Path, description = "the job's id")),
    responses(
        (status = 200, body = Changed),
        (status = 400, description = "not a job id", body = ErrorBody),
        (status = 403, description = "read-only, or no CSRF token", body = ErrorBody),
        (status = 404, description = "no such job", body = ErrorBody),
        (status = 409, description = "the job is not dead", body = ErrorBody),
    ))]
pub async fn discard_job(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> ApiResult<Json<Changed>> {
    one_dead(&app, &id, false).await
}

/// Cancels a job that has not started.
#[utoipa::path(post, path = "/api/jobs/{id}/cancel",
    params(("id" = i64, Path, description = "the job's id")),
    responses(
        (status = 200, body = Changed),
        (status = 400, description = "not a job id", body = ErrorBody),
        (status = 403, description = "read-only, or no CSRF token", body = ErrorBody),
        (status = 404, description = "no such job", body = ErrorBody),
        (status = 409, description = "the job started, or already finished", body = ErrorBody),
    ))]
pub async fn cancel_job(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> ApiResult<Json<Changed>> {
    let id = job_id(&id)?;
    match app.broker.cancel(id).await? {
        CancelOutcome::Cancelled => Ok(Json(Changed { changed: 1 })),
        CancelOutcome::Held(_) => Err(ApiError::conflict(format!(
            "job {id} is held by a worker; only a job not yet fetched can be cancelled here"
        ))),
        CancelOutcome::NotFound => match app.broker.job(id).await? {
            None => Err(ApiError::not_found(format!("no job {id}"))),
            Some(r) => Err(ApiError::conflict(format!(
                "job {id} is {}, not pending",
                r.state.name()
            ))),
        },
    }
}

fn queue_name(queue: &str) -> ApiResult<()> {
    Ok(hopper::broker::validate_queue_name(queue)?)
}

async fn set_paused(app: &App, queue: &str, paused: bool) -> ApiResult<Json<Changed>> {
    queue_name(queue)?;
    let changed = app.broker.set_paused(queue, paused).await?;
    Ok(Json(Changed {
        changed: u64::from(changed),
    }))
}

/// Pauses a queue for every worker of the broker.
#[utoipa::path(post, path = "/api/queues/{queue}/pause",
    params(("queue" = String, Path, description = "the queue's name")),
    responses(
        (status = 200, description = "1 when it was running, 0 when already paused", body = Changed),
        (status = 400, description = "an invalid queue name", body = ErrorBody),
        (status = 403, description = "read-only, or no CSRF token", body = ErrorBody),
    ))]
pub async fn pause(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
) -> ApiResult<Json<Changed>> {
    set_paused(&app, &queue, true).await
}

/// Resumes a paused queue.
#[utoipa::path(post, path = "/api/queues/{queue}/resume",
    params(("queue" = String, Path, description = "the queue's name")),
    responses(
        (status = 200, description = "1 when it was paused, 0 otherwise", body = Changed),
        (status = 400, description = "an invalid queue name", body = ErrorBody),
        (status = 403, description = "read-only, or no CSRF token", body = ErrorBody),
    ))]
pub async fn resume(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
) -> ApiResult<Json<Changed>> {
    set_paused(&app, &queue, false).await
}

/// The purge's confirmation.
#[derive(Debug, Deserialize, IntoParams)]
pub struct Confirm {
    /// The queue's name again.
    confirm: Option<String>,
}

/// Deletes every job of a queue, in every state. `confirm` must repeat the queue's name.
#[utoipa::path(post, path = "/api/queues/{queue}/purge",
    params(("queue" = String, Path, description = "the queue's name"), Confirm),
    responses(
        (status = 200, description = "the jobs deleted", body = Changed),
        (status = 400, description = "an invalid name, or no confirmation", body = ErrorBody),
        (status = 403, description = "read-only, or no CSRF token", body = ErrorBody),
    ))]
pub async fn purge(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
    Query(c): Query<Confirm>,
) -> ApiResult<Json<Changed>> {
    queue_name(&queue)?;
    if c.confirm.as_deref() != Some(queue.as_str()) {
        return Err(ApiError::bad_request(format!(
            "confirm: purging deletes every job of {queue}; pass confirm={queue}"
        )));
    }
    let changed = app.broker.purge(&queue).await?;
    Ok(Json(Changed { changed }))
}

/// Runs `take` on the selected dead letters of `queue`: the ids (each checked first, so
/// that nothing changes when one is wrong), or every one, a chunk at a time.
async fn take_dead(
    app: &App,
    queue: &str,
    which: DeadSelection,
    retry: bool,
) -> ApiResult<Json<Changed>> {
    queue_name(queue)?;
    let broker = &app.broker;
    let take = async |selection: Selection| match retry {
        true => broker.retry_dead(&selection).await,
        false => broker.discard_dead(&selection).await,
    };
    match (which.ids, which.all) {
        (Some(ids), None | Some(false)) if !ids.is_empty() => {
            let mut checked = Vec::with_capacity(ids.len());
            for raw in ids {
                let id = job_id(&raw.to_string())?;
                dead_job(app, id, Some(queue)).await?;
                checked.push(id);
            }
            Ok(Json(Changed {
                changed: take(Selection::Jobs(checked)).await?,
            }))
        }
        (None, Some(true)) => {
            let mut changed = 0;
            loop {
                let selection = Selection::Queue {
                    queue: queue.to_owned(),
                    at_most: CHUNK,
                };
                let n = take(selection).await?;
                changed += n;
                if n < CHUNK as u64 {
                    return Ok(Json(Changed { changed }));
                }
            }
        }
        _ => Err(ApiError::bad_request(
            "selection: either {\"ids\": [one or more job ids]} or {\"all\": true}",
        )),
    }
}

/// Retries dead letters of a queue: some by id, or all.
#[utoipa::path(post, path = "/api/queues/{queue}/dead/retry",
    params(("queue" = String, Path, description = "the queue's name")),
    request_body = DeadSelection,
    responses(
        (status = 200, body = Changed),
        (status = 400, description = "a bad selection or queue name", body = ErrorBody),
        (status = 403, description = "read-only, or no CSRF token", body = ErrorBody),
        (status = 404, description = "a job that does not exist", body = ErrorBody),
        (status = 409, description = "a job that is not dead, or of another queue", body = ErrorBody),
    ))]
pub async fn retry_dead(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
    Json(which): Json<DeadSelection>,
) -> ApiResult<Json<Changed>> {
    take_dead(&app, &queue, which, true).await
}

/// Discards dead letters of a queue: some by id, or all.
#[utoipa::path(post, path = "/api/queues/{queue}/dead/discard",
    params(("queue" = String, Path, description = "the queue's name")),
    request_body = DeadSelection,
    responses(
        (status = 200, body = Changed),
        (status = 400, description = "a bad selection or queue name", body = ErrorBody),
        (status = 403, description = "read-only, or no CSRF token", body = ErrorBody),
        (status = 404, description = "a job that does not exist", body = ErrorBody),
        (status = 409, description = "a job that is not dead, or of another queue", body = ErrorBody),
    ))]
pub async fn discard_dead(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
    Json(which): Json<DeadSelection>,
) -> ApiResult<Json<Changed>> {
    take_dead(&app, &queue, which, false).await
}
