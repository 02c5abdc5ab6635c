//! Middleware in front of the API: the optional bearer key (compared in constant time), 503
//! while draining, and the per-status request counter.
use crate::app::App;
use crate::error::ApiError;
use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Whether `header` is `Bearer <key>`.
pub(crate) fn key_matches(header: Option<&str>, key: &str) -> bool {
    let Some(token) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
        return false;
    };
    bool::from(token.trim().as_bytes().ct_eq(key.as_bytes()))
}

/// `/v1/...`: 503 while draining, 401 without the key.
pub(crate) async fn guard(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    if app.is_draining() {
        return ApiError::unavailable("the server is shutting down").into_response();
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

/// Every route: counts responses by status.
pub(crate) async fn count(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let r = next.run(req).await;
    app.metrics.request(r.status().as_u16());
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer() {
        assert!(key_matches(Some("Bearer sk-1"), "sk-1"));
        assert!(!key_matches(Some("Bearer sk-2"), "sk-1"));
        assert!(!key_matches(Some("Bearer sk-"), "sk-1"));
        assert!(!key_matches(Some("sk-1"), "sk-1"));
        assert!(!key_matches(None, "sk-1"));
    }
}
