//! The voice library endpoints: `POST /v1/voices` (multipart: `name` and the audio file,
//! decoded with the checked decoders, kept as the voice's clip, analysed once per loaded model
//! and saved atomically, replacing a voice of that name), `GET /v1/voices` and
//! `DELETE /v1/voices/{name}`. Names that speech requests map to something else (`default`,
//! OpenAI's voice names, configured voice aliases) are refused: a voice stored under one could
//! never be spoken.
use crate::app::App;
use crate::config::OPENAI_VOICES;
use crate::error::ApiError;
use crate::job::{VoiceJob, Work};
use crate::speech::body_error;
use crate::voices::{normalise_clip, valid_voice_name, VoiceLibrary};
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

/// Why speech requests could never use a library voice called `name`, if they could not: the
/// server maps `default` and OpenAI's voice names to the built-in voice, and the configured
/// aliases to their voices, before it looks in the library.
fn reserved(app: &App, name: &str) -> Option<ApiError> {
    let why = if name == "default" || OPENAI_VOICES.contains(&name) {
        "speech requests with that voice use the model's built-in voice (`default` and \
         OpenAI's voice names are reserved)"
    } else if app.config.voice_aliases.contains_key(name) {
        "it is a configured voice alias: speech requests with that voice use the voice it \
         maps to"
    } else {
        return None;
    };
    Some(ApiError::invalid(
        "name",
        format!("the voice name {name:?} is reserved: {why}; choose another name"),
    ))
}

/// `GET /v1/voices`: `{"object": "list", "data": [{"id", "object": "voice", "models",
/// "clip"}]}`: `models` are those with conditionals stored; a voice with its `clip` is
/// analysed for other models on first use (voices of the earlier flat layout have none).
pub(crate) async fn list(State(app): State<Arc<App>>) -> Response {
    let lib = match library(&app) {
        Ok(l) => l,
        Err(e) => return e.into_response(),
    };
    let lib = lib.clone();
    let voices = tokio::task::spawn_blocking(move || lib.voices()).await;
    match voices {
        Ok(Ok(voices)) => {
            let data: Vec<_> = voices
                .into_iter()
                .map(|(name, v)| {
                    let models: Vec<_> = v.models.iter().map(|m| m.name()).collect();
                    serde_json::json!({"id": name, "object": "voice", "models": models,
                                       "clip": v.clip})
                })
                .collect();
            Json(serde_json::json!({"object": "list", "data": data})).into_response()
        }
        Ok(Err(e)) => {
            ApiError::internal(format!("cannot read the voice library: {e}")).into_response()
        }
        Err(e) => ApiError::internal(e.to_string()).into_response(),
    }
}

/// `DELETE /v1/voices/{name}` (names reserved for uploads can be deleted: earlier versions
/// stored them).
pub(crate) async fn delete(State(app): State<Arc<App>>, Path(name): Path<String>) -> Response {
    let lib = match library(&app) {
        Ok(l) => l,
        Err(e) => return e.into_response(),
    };
    if !valid_voice_name(&name) {
        return bad_name(&name).into_response();
    }
    let deleted = {
        let (lib, name) = (lib.clone(), name.clone());
        tokio::task::spawn_blocking(move || lib.delete(&name)).await
    };
    let deleted = match deleted {
        Ok(d) => d,
        Err(e) => return ApiError::internal(e.to_string()).into_response(),
    };
    match deleted {
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
    if let Some(e) = reserved(&app, &name) {
        return Err(e);
    }
    let audio = audio.ok_or_else(|| ApiError::invalid("file", "missing the `file` field"))?;
    // The clip as the library keeps it: decoded, mono, at the analysis's rate. The models
    // analyse this same clip now, and models loaded later analyse it from the file, so both
    // get the same conditionals.
    let clip = tokio::task::spawn_blocking(move || {
        // decoding stops at chatterbox_dsp::audio::MAX_DECODED_SECONDS (refused up front when
        // the header claims more): a longer clip is a 400 naming the limit
        let audio = chatterbox_dsp::audio::decode(audio.to_vec(), None)?;
        normalise_clip(&audio)
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::invalid("file", format!("cannot read the audio: {e}")))?;
    let clip = Arc::new(clip);
    let models = app.engine.models();
    if models.is_empty() {
        return Err(ApiError::loading());
    }
    // uploads of one name one after the other: the later one replaces the earlier
    let _name = lib.lock_name(&name).await;
    let staging = {
        let (lib, clip) = (lib.clone(), clip.clone());
        tokio::task::spawn_blocking(move || lib.stage(&clip))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(|e| ApiError::internal(format!("cannot write the voice library: {e}")))?
    };
    for &m in &models {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let job = VoiceJob {
            audio: clip.clone(),
            path: staging.model_path(m),
            reply,
        };
        app.engine
            .submit(m, Work::Voice(job), app.config.retry_after_secs)?;
        rx.await
            .map_err(|_| ApiError::internal("the voice analysis ended unexpectedly"))??;
    }
    let committed = {
        let (lib, name, models) = (lib.clone(), name.clone(), models.clone());
        tokio::task::spawn_blocking(move || lib.commit(&name, staging, &models))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(|e| ApiError::internal(format!("cannot write the voice library: {e}")))?
    };
    tracing::info!(
        voice = %name,
        secs = clip.duration_secs(),
        replaced = committed.replaced,
        "voice added"
    );
    let models: Vec<_> = models.iter().map(|m| m.name()).collect();
    Ok((
        StatusCode::CREATED,
        Json(
            serde_json::json!({"id": name, "object": "voice", "models": models,
                                "clip": true, "replaced": committed.replaced}),
        ),
    )
        .into_response())
}
