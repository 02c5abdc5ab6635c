//! The small read-only endpoints: `GET /health` (the process answers), `GET /ready` (every
//! device has loaded its models, none has failed, not draining), `GET /v1/models` and
//! `GET /metrics`.
use crate::app::App;
use crate::config::OPENAI_MODELS;
use crate::error::ApiError;
use crate::metrics::Gauges;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::Arc;

/// `GET /health`.
pub(crate) async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

/// `GET /ready`: 200 once loaded, 503 while loading or draining, or once a device has failed
/// (a sticky CUDA error: only a restart recovers).
pub(crate) async fn ready(State(app): State<Arc<App>>) -> Response {
    if app.is_draining() {
        return ApiError::unavailable("the server is shutting down").into_response();
    }
    let faults = app.engine.device_faults();
    if !faults.is_empty() {
        let list: Vec<String> = faults
            .iter()
            .map(|(device, code)| format!("{device} ({code})"))
            .collect();
        return ApiError::unavailable(format!(
            "device failed: {}; the server must be restarted",
            list.join(", ")
        ))
        .into_response();
    }
    if !app.engine.is_ready() {
        return ApiError::unavailable("the models are still loading (or failed to load)")
            .into_response();
    }
    let models: Vec<_> = app.engine.models().iter().map(|m| m.name()).collect();
    Json(serde_json::json!({"status": "ready", "models": models})).into_response()
}

/// `GET /v1/models`: the served models, then OpenAI's names as aliases.
pub(crate) async fn models(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    let loaded = app.engine.models();
    let mut data: Vec<_> = loaded
        .iter()
        .map(|m| serde_json::json!({"id": m.name(), "object": "model", "owned_by": "resemble-ai"}))
        .collect();
    if !loaded.is_empty() {
        let mut aliases: Vec<&str> = OPENAI_MODELS.to_vec();
        aliases.extend(app.config.model_aliases.keys().map(String::as_str));
        aliases.dedup();
        for alias in aliases {
            if let Ok(target) = app.resolve_model(alias) {
                data.push(serde_json::json!({
                    "id": alias,
                    "object": "model",
                    "owned_by": "resemble-ai",
                    "alias_of": target.name(),
                }));
            }
        }
    }
    Json(serde_json::json!({"object": "list", "data": data}))
}

/// `GET /metrics`.
pub(crate) async fn metrics(State(app): State<Arc<App>>) -> Response {
    let gauges = Gauges {
        queue_depth: app.engine.queue_depth(),
        running: app.engine.running(),
        expected_waits: app
            .engine
            .expected_waits()
            .into_iter()
            .map(|(m, d)| (m.name(), d.as_secs_f64()))
            .collect(),
        resident_bytes: chatterbox_pipeline::resident_memory_bytes(),
        devices: app.engine.device_memory(),
        workers: app
            .engine
            .worker_health()
            .into_iter()
            .map(|(label, fault)| (label, fault.map(|f| f.name())))
            .collect(),
        panics: app.engine.panics(),
        batch_capacity: app
            .engine
            .batch_capacity()
            .into_iter()
            .map(|(i, label, m, n)| (i, label, m.name(), n))
            .collect(),
    };
    let text = app.metrics.render(&gauges);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
