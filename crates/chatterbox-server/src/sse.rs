//! Server-sent events of `stream_format=sse`, as OpenAI sends them: `speech.audio.delta`
//! events with base64 audio (pieces of one file in the `response_format`), then one
//! `speech.audio.done` with usage (characters of input: Chatterbox has no billing tokens), or
//! an `error` event when the generation fails after the stream began.
//!
//! `speech.audio.done` also carries Chatterbox's `"truncated"`: `true` when the speech of some
//! sentence was cut at the token cap (`max_new_tokens`: the model never drew its stop token),
//! else `false`. OpenAI's clients ignore the extra field.
//!
//! With Chatterbox's `"timestamps": true`, a `speech.audio.timestamps` event follows the delta
//! of each chunk whose audio ends one or more sentences: their text, start and end, and their
//! words' (estimated) times, in seconds from the start of the speech.
use crate::error::ApiError;
use base64::Engine as _;

fn event(value: &serde_json::Value) -> Vec<u8> {
    format!("data: {value}\n\n").into_bytes()
}

/// A `speech.audio.delta` event carrying `audio`.
pub(crate) fn delta(audio: &[u8]) -> Vec<u8> {
    let b64 = base64::engine::general_purpose::STANDARD.encode(audio);
    event(&serde_json::json!({"type": "speech.audio.delta", "audio": b64}))
}

/// The `speech.audio.done` event; `truncated`: the speech was cut at the token cap.
pub(crate) fn done(input_chars: usize, truncated: bool) -> Vec<u8> {
    event(&serde_json::json!({
        "type": "speech.audio.done",
        "usage": {
            "input_tokens": input_chars,
            "output_tokens": 0,
            "total_tokens": input_chars,
        },
        "truncated": truncated,
    }))
}

/// A `speech.audio.timestamps` event: the sentences (with their words) whose speech ended in
/// the audio sent so far, times in seconds from the start of the speech (see
/// [`crate::captioned::sentences_json`]).
pub(crate) fn timestamps(sentences: &[chatterbox_pipeline::SentenceTiming]) -> Vec<u8> {
    event(&serde_json::json!({
        "type": "speech.audio.timestamps",
        "sentences": crate::captioned::sentences_json(sentences),
    }))
}

/// An `error` event (the OpenAI error object under `error`).
pub(crate) fn error(e: &ApiError) -> Vec<u8> {
    let mut body = e.body();
    body["type"] = serde_json::Value::from("error");
    event(&body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_json_lines() {
        let parse = |b: Vec<u8>| {
            let s = String::from_utf8(b).unwrap();
            assert!(s.starts_with("data: ") && s.ends_with("\n\n"));
            serde_json::from_str::<serde_json::Value>(&s[6..]).unwrap()
        };
        let d = parse(delta(b"\x00\x01abc"));
        assert_eq!(d["type"], "speech.audio.delta");
        assert_eq!(d["audio"], "AAFhYmM=");
        let v = parse(done(5, false));
        assert_eq!(v["type"], "speech.audio.done");
        assert_eq!(v["usage"]["input_tokens"], 5);
        assert_eq!(v["truncated"], false);
        assert_eq!(parse(done(5, true))["truncated"], true);
    }
}
