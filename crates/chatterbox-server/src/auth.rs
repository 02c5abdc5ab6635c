//! Middleware in front of the API: the optional bearer key (compared in constant time; the
//! scheme is case-insensitive, as RFC 7235 says), 503 while draining, the total deadline of
//! a request body, and the outermost layer ([`finish`]) that gives every request an id,
//! answers every error in OpenAI's JSON shape (also those made below the handlers: 405, ...),
//! counts responses by status and logs the ones an operator should see.
use crate::app::{App, RequestId};
use crate::error::{ApiError, ErrorInfo};
use crate::refusal::Refused;
use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::header::{self, AUTHORIZATION};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use std::sync::Arc;
use subtle::ConstantTimeEq;
use tracing::Instrument;

/// Whether `header` is `Bearer <key>` (the scheme in any case, then whitespace, then the key).
pub(crate) fn key_matches(header: Option<&str>, key: &str) -> bool {
    let Some((scheme, token)) = header.and_then(|h| h.trim_start().split_once([' ', '\t'])) else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return false;
    }
    bool::from(token.trim().as_bytes().ct_eq(key.as_bytes()))
}

/// `/v1/...`: 503 while draining, 401 without the key.
pub(crate) async fn guard(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    if app.is_draining() {
        return ApiError::draining().into_response();
    }
    if let Some(key) = &app.config.api_key {
        let header = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if !key_matches(header, key) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

/// A request body that did not arrive in full by the body deadline.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in full within the body deadline")]
pub(crate) struct BodyDeadline;

/// Every request: its body must arrive in full within `body_deadline` of the head (however
/// steadily it trickles; the pause between pieces has its own `body_timeout`). A late body
/// reads as a [`BodyDeadline`] error, which the handlers answer with 408.
pub(crate) async fn body_deadline(
    State(app): State<Arc<App>>,
    req: Request,
    next: Next,
) -> Response {
    let deadline = tokio::time::Instant::now() + app.config.body_deadline;
    let (parts, body) = req.into_parts();
    let body = if HttpBody::is_end_stream(&body) {
        body
    } else {
        let stream =
            futures_util::stream::unfold(Some(body.into_data_stream()), move |st| async move {
                let mut st = st?;
                match tokio::time::timeout_at(deadline, st.next()).await {
                    Ok(Some(Ok(bytes))) => Some((Ok(bytes), Some(st))),
                    Ok(Some(Err(e))) => Some((Err(axum::BoxError::from(e)), None)),
                    Ok(None) => None,
                    Err(_) => Some((Err(axum::BoxError::from(BodyDeadline)), None)),
                }
            });
        Body::from_stream(stream)
    };
    next.run(Request::from_parts(parts, body)).await
}

/// Paths of the probes, logged at debug only (a load balancer polls them).
fn is_probe(path: &str) -> bool {
    matches!(path, "/health" | "/ready" | "/metrics")
}

/// At most 100 characters of the path, for logs.
fn log_path(path: &str) -> String {
    path.chars().take(100).collect()
}

/// Every route, outermost: gives the request an id (`x-request-id` on the response, `request`
/// in the logs), turns an error response that is not OpenAI's JSON (405 and others made by
/// the router or a layer) into it, counts the response by status and logs it: 429 and 5xx
/// at warn, other 4xx at info, successes and probes (`/health`, `/ready`, `/metrics`) at
/// debug. A refusal (a request turned away before any work: 429 `queue_full`, 503 while
/// draining, loading or after the device failed) is counted by reason and logged with its
/// reason and `Retry-After` by the [`RefusalLog`](crate::refusal::RefusalLog): at warn at most
/// once a second per reason, the others at debug, so that a flood does not flood the log.
/// Logs name the method, the path, the status and the error's code and field, never the
/// request's text.
pub(crate) async fn finish(State(app): State<Arc<App>>, mut req: Request, next: Next) -> Response {
    let id = app.request_id();
    req.extensions_mut().insert(RequestId(id));
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let span = tracing::info_span!("request", request = id);
    let mut r = next.run(req).instrument(span).await;
    let status = r.status();
    if (status.is_client_error() || status.is_server_error())
        && r.extensions().get::<ErrorInfo>().is_none()
    {
        r = openai_error(r, method.as_str(), &path);
    }
    if let Ok(v) = HeaderValue::from_str(&id.to_string()) {
        r.headers_mut().insert("x-request-id", v);
    }
    app.metrics.request(status.as_u16());
    let info = r.extensions().get::<ErrorInfo>();
    let (code, param) = (
        info.and_then(|e| e.code),
        info.and_then(|e| e.param.as_deref()),
    );
    let path = log_path(&path);
    let s = status.as_u16();
    if let Some(reason) = info.and_then(|e| e.refusal).filter(|_| !is_probe(&path)) {
        app.metrics.refused(reason);
        let refused = Refused {
            request: id,
            method: method.as_str(),
            path: &path,
            status: s,
            retry_after: info.and_then(|e| e.retry_after),
        };
        app.refusals.refused(reason, refused);
    } else if is_probe(&path) || !(status.is_client_error() || status.is_server_error()) {
        tracing::debug!(request = id, %method, path, status = s, "answered");
    } else if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        tracing::warn!(request = id, %method, path, status = s, code, param, "answered with an error");
    } else {
        tracing::info!(request = id, %method, path, status = s, code, param, "answered with an error");
    }
    r
}

/// `r` (an error made below the handlers, e.g. axum's empty 405) as OpenAI's JSON error,
/// keeping its headers (`Allow`, `Retry-After`).
fn openai_error(r: Response, method: &str, path: &str) -> Response {
    let (parts, _) = r.into_parts();
    let e = match parts.status {
        StatusCode::METHOD_NOT_ALLOWED => {
            let allowed = parts
                .headers
                .get(header::ALLOW)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            ApiError::method_not_allowed(method, path, &allowed)
        }
        StatusCode::NOT_FOUND => ApiError::no_route_for(method, path),
        s => ApiError::for_status(s),
    };
    let mut fresh = e.into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            fresh.headers_mut().insert(name.clone(), value.clone());
        }
    }
    fresh
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer() {
        assert!(key_matches(Some("Bearer sk-1"), "sk-1"));
        assert!(key_matches(Some("bearer sk-1"), "sk-1"));
        assert!(key_matches(Some("BEARER  sk-1 "), "sk-1"));
        assert!(key_matches(Some("Bearer\tsk-1"), "sk-1"));
        assert!(!key_matches(Some("Bearer sk-2"), "sk-1"));
        assert!(!key_matches(Some("Bearer sk-"), "sk-1"));
        assert!(!key_matches(Some("Bearer"), "sk-1"));
        assert!(!key_matches(Some("Basic sk-1"), "sk-1"));
        assert!(!key_matches(Some("Bearersk-1"), "sk-1"));
        assert!(!key_matches(Some("sk-1"), "sk-1"));
        assert!(!key_matches(None, "sk-1"));
    }
}
