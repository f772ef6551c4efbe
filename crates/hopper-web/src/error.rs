//! The API's errors: a status and one JSON object, `{"error": "…"}`, whose text names the
//! setting, the record or the call at fault.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// What an API call answers when it fails.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong, naming the parameter, job or call.
    pub error: String,
}

/// A failed call: its status and message.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }
}

/// A broker's error as the API answers it: a value refused is the caller's (400), a call
/// the broker cannot serve is not there (404), anything else is the broker's (502).
impl From<hopper::Error> for ApiError {
    fn from(e: hopper::Error) -> Self {
        let status = match &e {
            hopper::Error::Config(_) => StatusCode::BAD_REQUEST,
            hopper::Error::NotSupported { .. } => StatusCode::NOT_FOUND,
            _ => StatusCode::BAD_GATEWAY,
        };
        ApiError::new(status, e.chain().to_string())
    }
}

impl From<hopper::ConfigError> for ApiError {
    fn from(e: hopper::ConfigError) -> Self {
        ApiError::bad_request(e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.message,
        };
        (self.status, Json(body)).into_response()
    }
}

/// What handlers return.
pub type ApiResult<T> = Result<T, ApiError>;
