//! Errors: [`ApiError`], what a request gets back in OpenAI's JSON shape
//! (`{"error": {"message", "type", "param", "code"}}`) with its HTTP status, and
//! [`ServerError`], what stops the server from starting or running.
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::path::PathBuf;

/// An error answered to a client: status, OpenAI error type and code, the field at fault.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Human-readable message (never the request's text).
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, `rate_limit_error`,
    /// `server_error`, ...
    pub kind: &'static str,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// A machine-readable code (`model_not_found`, `voice_not_found`, `queue_full`, ...).
    pub code: Option<&'static str>,
    /// Seconds for `Retry-After` (429, 503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400: a field with a bad value.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message);
        e.param = Some(param.to_string());
        e.code = Some("invalid_value");
        e
    }

    /// 400: a request that cannot be read at all (not JSON, not multipart).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 401: missing or wrong API key.
    pub fn unauthorized() -> Self {
        let mut e = Self::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid or missing API key (send `Authorization: Bearer <key>`)",
        );
        e.code = Some("invalid_api_key");
        e
    }

    /// 404 with a code (`model_not_found`, `voice_not_found`) and the field.
    pub fn not_found(param: Option<&str>, code: &'static str, message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::NOT_FOUND, "invalid_request_error", message);
        e.param = param.map(str::to_string);
        e.code = Some(code);
        e
    }

    /// 404 for a path the server does not have.
    pub fn no_route() -> Self {
        Self::not_found(None, "not_found", "no such endpoint")
    }

    /// 413: a body over the limit.
    pub fn too_large(limit: usize) -> Self {
        let mut e = Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("request body larger than {limit} bytes"),
        );
        e.code = Some("payload_too_large");
        e
    }

    /// 429: the queue is full; try again after `retry_after` seconds.
    pub fn queue_full(retry_after: u64) -> Self {
        let mut e = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "the server is busy: its request queue is full; retry later",
        );
        e.code = Some("queue_full");
        e.retry_after = Some(retry_after);
        e
    }

    /// 503: shutting down, or models still loading.
    pub fn unavailable(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message);
        e.code = Some("unavailable");
        e.retry_after = Some(1);
        e
    }

    /// 504: the generation ran past the request timeout.
    pub fn timeout() -> Self {
        let mut e = Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "server_error",
            "the generation ran past the server's request timeout",
        );
        e.code = Some("timeout");
        e
    }

    /// 408: the request body stopped arriving for longer than the body timeout.
    pub fn body_timeout() -> Self {
        let mut e = Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            "the request body arrived too slowly (the server's body timeout passed)",
        );
        e.code = Some("request_timeout");
        e
    }

    /// 500: the model failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

/// What stops the server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The voice directory cannot be created or read.
    #[error("voice directory {path}: {source}")]
    Voices {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A configuration that cannot work (no device, an alias to an unknown model, ...).
    #[error("invalid server configuration: {0}")]
    Config(String),
    /// A worker thread could not be started.
    #[error("cannot start worker thread: {0}")]
    Thread(std::io::Error),
    /// Serving failed.
    #[error("server I/O: {0}")]
    Io(std::io::Error),
}
