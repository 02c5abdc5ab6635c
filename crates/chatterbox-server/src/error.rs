//! Errors: [`ApiError`], what a request gets back in OpenAI's JSON shape
//! (`{"error": {"message", "type", "param", "code"}}`) with its HTTP status, and
//! [`ServerError`], what stops the server from starting or running.
//!
//! A 500's message is the server's own business: it is logged (with the request id) and the
//! client gets a generic message, never a file path, a model's error text or the request's
//! text.
use crate::model::ModelId;
use crate::refusal::Refusal;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::path::PathBuf;

/// What a client is told instead of a 500's detail.
pub(crate) const INTERNAL_MESSAGE: &str =
    "the server had an error while processing your request (the details are in the server's \
     log, under the request id in the `x-request-id` header)";

/// What an error response carries for the access log and the metrics (in the response's
/// extensions): its code and field, never its message, and why it was refused, if it was.
#[derive(Debug, Clone)]
pub(crate) struct ErrorInfo {
    /// [`ApiError::code`].
    pub code: Option<&'static str>,
    /// [`ApiError::param`].
    pub param: Option<String>,
    /// The refusal's reason, when the request was turned away before any work.
    pub refusal: Option<Refusal>,
    /// [`ApiError::retry_after`].
    pub retry_after: Option<u64>,
}

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
    /// Why the request was turned away before any work, when it was (counted in
    /// `chatterbox_requests_refused_total` and logged at warn, at most once a second per
    /// reason).
    pub(crate) refusal: Option<Refusal>,
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
            refusal: None,
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

    /// 401: missing or wrong API key (OpenAI's `invalid_request_error` / `invalid_api_key`).
    pub fn unauthorized() -> Self {
        let mut e = Self::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
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

    /// 404 for `method path`, which the server does not have (OpenAI's "Invalid URL").
    pub fn no_route_for(method: &str, path: &str) -> Self {
        Self::not_found(
            None,
            "not_found",
            format!("invalid URL ({method} {}): no such endpoint", clip(path)),
        )
    }

    /// 405: `path` exists but not for `method`; `allowed` lists the methods it takes.
    pub fn method_not_allowed(method: &str, path: &str, allowed: &str) -> Self {
        let mut e = Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            format!(
                "method {method} is not allowed on {} (allowed: {allowed})",
                clip(path)
            ),
        );
        e.code = Some("method_not_allowed");
        e
    }

    /// Any other status in OpenAI's shape (for responses made below the handlers).
    pub(crate) fn for_status(status: StatusCode) -> Self {
        let kind = if status.is_server_error() {
            "server_error"
        } else {
            "invalid_request_error"
        };
        let reason = status.canonical_reason().unwrap_or("error");
        let mut e = Self::new(status, kind, reason.to_ascii_lowercase());
        e.code = match status {
            StatusCode::UNSUPPORTED_MEDIA_TYPE => Some("unsupported_media_type"),
            StatusCode::REQUEST_TIMEOUT => Some("request_timeout"),
            StatusCode::PAYLOAD_TOO_LARGE => Some("payload_too_large"),
            _ => None,
        };
        e
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

    /// 429: the queue is full; try again after `retry_after` seconds (the queue's expected
    /// wait).
    pub fn queue_full(retry_after: u64) -> Self {
        let mut e = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "the server is busy: its request queue is full; retry later",
        );
        e.code = Some("queue_full");
        e.retry_after = Some(retry_after);
        e.refusal = Some(Refusal::QueueFull);
        e
    }

    /// 503: more connections are open than the server's `max_connections`.
    pub fn too_many_connections() -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "the server has too many open connections; retry later",
        );
        e.code = Some("too_many_connections");
        e.retry_after = Some(1);
        e.refusal = Some(Refusal::TooManyConnections);
        e
    }

    /// 503: shutting down, or models still loading.
    pub fn unavailable(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message);
        e.code = Some("unavailable");
        e.retry_after = Some(1);
        e
    }

    /// 503 `unavailable`, a refusal: the server is shutting down.
    pub(crate) fn draining() -> Self {
        let mut e = Self::unavailable("the server is shutting down");
        e.refusal = Some(Refusal::Draining);
        e
    }

    /// 503 `unavailable`, a refusal: the models are still loading.
    pub(crate) fn loading() -> Self {
        let mut e = Self::unavailable("the models are still loading");
        e.refusal = Some(Refusal::Loading);
        e
    }

    /// 503 `unavailable`, a refusal: every device holding `model` has failed.
    pub(crate) fn device_failed(model: ModelId) -> Self {
        let mut e = Self::unavailable(crate::engine::device_failed(model));
        e.refusal = Some(Refusal::DeviceFailed);
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

    /// 408: the request body did not arrive in full within the body deadline.
    pub fn body_deadline() -> Self {
        let mut e = Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            "the request body did not arrive in full within the server's body deadline",
        );
        e.code = Some("request_timeout");
        e
    }

    /// 500: the model (or the server) failed. `message` is logged, never sent: the client
    /// gets a generic message.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// 500 `no_speech`: T3 drew its stop token before any speech token for text chunk
    /// `chunk` (0-based). The reference fails on such a chunk too (its vocoder is handed an
    /// empty mel). The answer is the model's for this text and seed, the same alone or in a
    /// batch; another `seed` or wording usually gives speech. The message names the chunk,
    /// never its text.
    pub fn no_speech(chunk: usize) -> Self {
        let mut e = Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            format!(
                "the model generated no speech for text chunk {chunk} (it drew its stop token \
                 first); another seed or wording may give speech"
            ),
        );
        e.code = Some("no_speech");
        e
    }

    /// Whether the message stays in the server's log (a 500 without a code: it may name
    /// files or carry a model's error text; a 500 with a code, such as `no_speech`, has a
    /// message of the server's own making).
    pub fn is_internal(&self) -> bool {
        self.status == StatusCode::INTERNAL_SERVER_ERROR && self.code.is_none()
    }

    /// The message a client sees: [`ApiError::message`], or a generic one for a 500.
    pub fn public_message(&self) -> &str {
        if self.is_internal() {
            INTERNAL_MESSAGE
        } else {
            &self.message
        }
    }

    /// The JSON body (a 500's detail replaced by a generic message).
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.public_message(),
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

/// At most 100 characters of a client-given path, for messages.
fn clip(path: &str) -> String {
    const MAX: usize = 100;
    if path.chars().count() <= MAX {
        path.to_string()
    } else {
        let mut s: String = path.chars().take(MAX).collect();
        s.push_str("...");
        s
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
        if self.is_internal() {
            // the access log line that follows carries the request id
            tracing::error!(detail = %self.message, "internal error (detail not sent to the client)");
        }
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r.extensions_mut().insert(ErrorInfo {
            code: self.code,
            param: self.param,
            refusal: self.refusal,
            retry_after: self.retry_after,
        });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_500_body_keeps_its_detail_to_the_log() {
        let e = ApiError::internal("cannot read /srv/models/t3.safetensors for \"secret text\"");
        let body = e.body().to_string();
        assert!(!body.contains("/srv") && !body.contains("secret"), "{body}");
        assert_eq!(e.body()["error"]["type"], "server_error");
        assert_eq!(e.public_message(), INTERNAL_MESSAGE);
        // other errors say what is wrong
        let e = ApiError::invalid("top_p", "top_p = 2 is out of range");
        assert_eq!(e.body()["error"]["message"], "top_p = 2 is out of range");
        let r = ApiError::unauthorized();
        assert_eq!(
            (r.kind, r.code),
            ("invalid_request_error", Some("invalid_api_key"))
        );
        let r = ApiError::method_not_allowed("GET", "/v1/audio/speech", "POST");
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
        assert!(r.message.contains("POST"));
        let long = format!("/{}", "x".repeat(500));
        assert!(ApiError::no_route_for("GET", &long).message.len() < 200);
    }

    #[test]
    fn no_speech_is_a_500_that_says_what_happened() {
        let e = ApiError::no_speech(3);
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!e.is_internal());
        let body = e.body();
        assert_eq!(body["error"]["code"], "no_speech");
        assert_eq!(body["error"]["type"], "server_error");
        let msg = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("text chunk 3") && msg.contains("seed"),
            "{msg}"
        );
    }
}
