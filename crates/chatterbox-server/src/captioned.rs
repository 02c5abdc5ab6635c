//! `POST /v1/audio/captioned_speech` (also at `/dev/captioned_speech`, where Kokoro-FastAPI's
//! clients look for it): the body of `/v1/audio/speech`, answered with one JSON object that
//! holds the whole file and its timings, for subtitles and word highlighting:
//!
//! ```json
//! {"audio": "<base64 of the file>", "audio_format": "mp3",
//!  "timestamps": [{"word": "Hello", "start_time": 0.0, "end_time": 0.41, "estimated": true}],
//!  "sentences": [{"text": "Hello there.", "start_time": 0.0, "end_time": 0.9, "words": [...]}],
//!  "truncated": false}
//! ```
//!
//! `timestamps` lists every word once, in order, in seconds from the start of the audio; a
//! word's times are spread over its sentence by character count (`"estimated": true`), while
//! a sentence's are exact (the samples its speech produced, split in the middle of the
//! crossfades). `stream_format` and `timestamps` of the request are ignored here: the answer
//! is always whole. Pauses and SSML in the input (see chatterbox-text's `parse_markup`) lie
//! between sentences.
use crate::app::{App, RequestId};
use crate::format::AudioFormat;
use crate::speech::{handle, Answer};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use chatterbox_pipeline::SentenceTiming;
use serde_json::{json, Value};
use std::sync::Arc;

/// Seconds rounded to the millisecond.
fn secs(s: f64) -> f64 {
    (s * 1000.0).round() / 1000.0
}

/// The words of `sentence` as JSON objects.
fn words_json(sentence: &SentenceTiming) -> Vec<Value> {
    sentence
        .words
        .iter()
        .map(|w| {
            json!({
                "word": w.text,
                "start_time": secs(w.start_secs()),
                "end_time": secs(w.end_secs()),
                "estimated": w.estimated,
            })
        })
        .collect()
}

/// Sentences (text, start, end, words) as JSON, times in seconds: the shape of the
/// `sentences` of this endpoint and of the SSE `timestamps` event.
pub(crate) fn sentences_json(sentences: &[SentenceTiming]) -> Value {
    Value::Array(
        sentences
            .iter()
            .map(|s| {
                json!({
                    "text": s.text.trim(),
                    "start_time": secs(s.start_secs()),
                    "end_time": secs(s.end_secs()),
                    "words": words_json(s),
                })
            })
            .collect(),
    )
}

/// The answer: the encoded file and the timings.
pub(crate) fn response(
    format: AudioFormat,
    audio: &[u8],
    sentences: &[SentenceTiming],
    truncated: bool,
) -> Response {
    let words: Vec<Value> = sentences.iter().flat_map(words_json).collect();
    let body = json!({
        "audio": base64::engine::general_purpose::STANDARD.encode(audio),
        "audio_format": format.name(),
        "timestamps": words,
        "sentences": sentences_json(sentences),
        "truncated": truncated,
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The handler.
pub(crate) async fn captioned_speech(
    State(app): State<Arc<App>>,
    id: Option<Extension<RequestId>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let id = id.map_or_else(|| app.request_id(), |Extension(RequestId(id))| id);
    match handle(app, id, body, Answer::Captioned).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}
