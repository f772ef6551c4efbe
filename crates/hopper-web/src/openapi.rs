//! The OpenAPI document, generated from the handlers' annotations and the views' types.

use axum::Json;
use utoipa::OpenApi;

use crate::{actions, api, error, timeline, views};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Hopper",
        description = "Queues, jobs, dead letters and workers of a Hopper broker."
    ),
    paths(
        api::session,
        api::queues,
        api::queue,
        api::jobs,
        api::job,
        api::group,
        api::workers,
        actions::retry_job,
        actions::discard_job,
        actions::cancel_job,
        actions::pause,
        actions::resume,
        actions::purge,
        actions::retry_dead,
        actions::discard_dead,
        api::fetching,
    ),
    components(schemas(
        error::ErrorBody,
        views::SessionView,
        views::QueueView,
        views::QueueDetail,
        views::BucketView,
        views::Rates,
        views::RateLimitView,
        views::PageView,
        views::JobView,
        views::GroupView,
        views::AttemptView,
        views::WorkerView,
        views::WorkerQueueView,
        views::Changed,
        views::DeadSelection,
        timeline::Track,
        timeline::Point,
    ))
)]
struct ApiDoc;

/// The document as JSON text.
pub fn openapi_json() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .expect("the document serializes")
}

/// `GET /api/openapi.json`.
pub async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
