//! The voice library endpoints: `POST /v1/voices` (multipart: `name` and the audio file,
//! decoded with the checked decoders, analysed once per served model and saved atomically),
//! `GET /v1/voices` and `DELETE /v1/voices/{name}`.
use crate::app::App;
use crate::error::ApiError;
use crate::job::{VoiceJob, Work};
use crate::speech::body_error;
use crate::voices::{valid_voice_name, VoiceLibrary};
use axum::extract::{Multipart, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::Arc;

fn library(app: &App) -> Result<&VoiceLibrary, ApiError> {
    app.voices.as_ref().ok_or_else(|| {
        ApiError::not_found(
            None,
            "voice_library_disabled",
            "this server has no voice library (start it with a voice directory)",
        )
    })
}

fn bad_name(name: &str) -> ApiError {
    ApiError::invalid(
        "name",
        format!("invalid voice name {name:?}: use 1 to 64 of A-Z a-z 0-9 _ -"),
    )
}

/// `GET /v1/voices`: `{"object": "list", "data": [{"id", "object": "voice", "models"}]}`.
pub(crate) async fn list(State(app): State<Arc<App>>) -> Response {
    let lib = match library(&app) {
        Ok(l) => l,
        Err(e) => return e.into_response(),
    };
    match lib.list() {
        Ok(voices) => {
            let data: Vec<_> = voices
                .into_iter()
                .map(|(name, models)| {
                    let models: Vec<_> = models.iter().map(|m| m.name()).collect();
                    serde_json::json!({"id": name, "object": "voice", "models": models})
                })
                .collect();
            Json(serde_json::json!({"object": "list", "data": data})).into_response()
        }
        Err(e) => ApiError::internal(format!("cannot read the voice library: {e}")).into_response(),
    }
}

/// `DELETE /v1/voices/{name}`.
pub(crate) async fn delete(State(app): State<Arc<App>>, Path(name): Path<String>) -> Response {
    let lib = match library(&app) {
        Ok(l) => l,
        Err(e) => return e.into_response(),
    };
    if !valid_voice_name(&name) {
        return bad_name(&name).into_response();
    }
    match lib.delete(&name) {
        Ok(true) => Json(serde_json::json!({"id": name, "object": "voice", "deleted": true}))
            .into_response(),
        Ok(false) => ApiError::not_found(
            Some("name"),
            "voice_not_found",
            format!("voice {name:?} not found"),
        )
        .into_response(),
        Err(e) => ApiError::internal(format!("cannot delete the voice: {e}")).into_response(),
    }
}

/// `POST /v1/voices`.
pub(crate) async fn create(
    State(app): State<Arc<App>>,
    form: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> Response {
    match upload(app, form).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn upload(
    app: Arc<App>,
    form: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> Result<Response, ApiError> {
    let lib = library(&app)?.clone();
    let limit = app.config.max_upload_bytes;
    let mut form = form.map_err(|e| body_error(e.status(), e.body_text(), &e, limit))?;
    let (mut name, mut audio) = (None, None);
    loop {
        let field = form
            .next_field()
            .await
            .map_err(|e| body_error(e.status(), e.body_text(), &e, limit))?;
        let Some(field) = field else { break };
        match field.name() {
            Some("name") => {
                let text = field
                    .text()
                    .await
                    .map_err(|e| body_error(e.status(), e.body_text(), &e, limit))?;
                name = Some(text);
            }
            Some("file") | Some("audio") => {
                let bytes = field
                    .bytes()
                    .await
                    .map_err(|e| body_error(e.status(), e.body_text(), &e, limit))?;
                audio = Some(bytes);
            }
            _ => {}
        }
    }
    let name = name.ok_or_else(|| ApiError::invalid("name", "missing the `name` field"))?;
    if !valid_voice_name(&name) {
        return Err(bad_name(&name));
    }
    let audio = audio.ok_or_else(|| ApiError::invalid("file", "missing the `file` field"))?;
    let audio =
        tokio::task::spawn_blocking(move || chatterbox_dsp::audio::decode(audio.to_vec(), None))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(|e| ApiError::invalid("file", format!("cannot read the audio: {e}")))?;
    let audio = Arc::new(audio);
    let models = app.engine.models();
    if models.is_empty() {
        return Err(ApiError::unavailable("the models are still loading"));
    }
    let staging = lib
        .staging()
        .map_err(|e| ApiError::internal(format!("cannot write the voice library: {e}")))?;
    for &m in &models {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let job = VoiceJob {
            audio: audio.clone(),
            path: VoiceLibrary::staged_path(staging.path(), m),
            reply,
        };
        app.engine
            .submit(m, Work::Voice(job), app.config.retry_after_secs)?;
        rx.await
            .map_err(|_| ApiError::internal("the voice analysis ended unexpectedly"))??;
    }
    lib.commit(&name, staging.path(), &models)
        .map_err(|e| ApiError::internal(format!("cannot write the voice library: {e}")))?;
    tracing::info!(voice = %name, secs = audio.duration_secs(), "voice added");
    let models: Vec<_> = models.iter().map(|m| m.name()).collect();
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({"id": name, "object": "voice", "models": models})),
    )
        .into_response())
}
