//! OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}` with a status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tf_engine::scheduler::SubmitError;

/// An error answer of the API.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong and what to do.
    pub message: String,
    /// OpenAI's error type (`invalid_request_error`, ...).
    pub kind: &'static str,
    /// The request field at fault, when there is one.
    pub param: Option<String>,
    /// A machine-readable code (`context_length_exceeded`, ...).
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A 400 `invalid_request_error` about `param`.
    pub fn invalid(param: Option<&str>, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.map(String::from),
            code: None,
        }
    }

    /// Sets the code.
    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    /// 401 for a missing or wrong API key.
    pub fn unauthorized() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "invalid or missing API key: send `Authorization: Bearer <key>` with a key \
                      the server was started with (--api-key)"
                .into(),
            kind: "authentication_error",
            param: None,
            code: Some("invalid_api_key"),
        }
    }

    /// 404 for an unknown path.
    pub fn not_found(path: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "no endpoint {path}: this server has POST /v1/chat/completions, POST \
                 /v1/completions, GET /v1/models, GET /health, GET /metrics"
            ),
            kind: "invalid_request_error",
            param: None,
            code: Some("unknown_url"),
        }
    }

    /// 500 for a failure of the engine.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> ApiError {
        let message = e.to_string();
        match e {
            SubmitError::EmptyPrompt => ApiError::invalid(Some("messages"), message),
            SubmitError::PromptTooLong { .. } => {
                ApiError::invalid(Some("messages"), message).with_code("context_length_exceeded")
            }
            SubmitError::NeverFits { .. } => {
                ApiError::invalid(Some("max_tokens"), message).with_code("insufficient_memory")
            }
            SubmitError::QueueFull { .. } => ApiError {
                status: StatusCode::TOO_MANY_REQUESTS,
                message,
                kind: "rate_limit_error",
                param: None,
                code: Some("server_busy"),
            },
            SubmitError::NoRoomForModel { .. } | SubmitError::Stopped { .. } => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message,
                kind: "server_error",
                param: None,
                code: Some("unavailable"),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}
