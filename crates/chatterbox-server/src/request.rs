//! The body of `POST /v1/audio/speech`: OpenAI's fields plus Chatterbox's, read field by field
//! so each error names its field. Unknown fields are accepted (OpenAI clients send extras);
//! `null` is the same as absent.
use crate::error::ApiError;
use crate::format::{AudioFormat, StreamFormat};
use chatterbox_pipeline::GenerateOptions;
use serde_json::{Map, Value};

/// Chatterbox's generation fields of a request (each `None` keeps the model's default).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// `exaggeration` (>= 0).
    pub exaggeration: Option<f32>,
    /// `cfg_weight` (>= 0).
    pub cfg_weight: Option<f32>,
    /// `temperature` (> 0).
    pub temperature: Option<f32>,
    /// `top_p` in (0, 1].
    pub top_p: Option<f32>,
    /// `min_p` in [0, 1].
    pub min_p: Option<f32>,
    /// `repetition_penalty` (> 0).
    pub repetition_penalty: Option<f32>,
    /// `seed`.
    pub seed: Option<u64>,
    /// `language` (the multilingual model's language id).
    pub language: Option<String>,
}

impl Overrides {
    /// Applies the fields given onto `opts`.
    pub fn apply(&self, opts: &mut GenerateOptions) {
        let set = |dst: &mut f32, v: Option<f32>| {
            if let Some(v) = v {
                *dst = v;
            }
        };
        set(&mut opts.exaggeration, self.exaggeration);
        set(&mut opts.cfg_weight, self.cfg_weight);
        set(&mut opts.temperature, self.temperature);
        set(&mut opts.top_p, self.top_p);
        set(&mut opts.min_p, self.min_p);
        set(&mut opts.repetition_penalty, self.repetition_penalty);
        if self.seed.is_some() {
            opts.seed = self.seed;
        }
        if self.language.is_some() {
            opts.language.clone_from(&self.language);
        }
    }
}

/// A valid speech request.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeechRequest {
    /// `model`, as given (resolved against the loaded models later).
    pub model: String,
    /// `input`: the text (1 to `max_chars` characters).
    pub input: String,
    /// `voice` (a string, or an object with an `id`); `None` for the built-in voice.
    pub voice: Option<String>,
    /// `response_format` (default `mp3`, as OpenAI).
    pub format: AudioFormat,
    /// `stream_format`.
    pub stream: StreamFormat,
    /// Chatterbox's fields.
    pub overrides: Overrides,
}

impl SpeechRequest {
    /// Reads a JSON body. `instructions` is accepted and ignored (Chatterbox has no
    /// instruction following); `speed` must be 1 (no time stretching is done, and none is
    /// faked).
    pub fn from_json(body: &[u8], max_chars: usize) -> Result<Self, ApiError> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?;
        let Value::Object(obj) = value else {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        };
        let model = string(&obj, "model")?
            .ok_or_else(|| ApiError::invalid("model", "missing required field `model`"))?;
        let input = string(&obj, "input")?
            .ok_or_else(|| ApiError::invalid("input", "missing required field `input`"))?;
        let chars = input.chars().count();
        if input.trim().is_empty() {
            return Err(ApiError::invalid("input", "`input` is empty"));
        }
        if chars > max_chars {
            return Err(ApiError::invalid(
                "input",
                format!("`input` has {chars} characters; at most {max_chars} are accepted"),
            ));
        }
        let voice = match obj.get("voice") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Object(o)) => match o.get("id") {
                Some(Value::String(s)) => Some(s.clone()),
                _ => return Err(ApiError::invalid("voice", "`voice.id` must be a string")),
            },
            Some(_) => {
                return Err(ApiError::invalid(
                    "voice",
                    "`voice` must be a string (or an object with an `id`)",
                ))
            }
        };
        let format = match string(&obj, "response_format")? {
            Some(f) => AudioFormat::parse(&f)?,
            None => AudioFormat::parse("mp3")?,
        };
        let stream = match string(&obj, "stream_format")? {
            Some(f) => StreamFormat::parse(&f)?,
            None => StreamFormat::File,
        };
        if let Some(speed) = number(&obj, "speed")? {
            if !(0.25..=4.0).contains(&speed) {
                return Err(ApiError::invalid(
                    "speed",
                    format!("speed = {speed}; expected 0.25 to 4.0"),
                ));
            }
            if speed != 1.0 {
                return Err(ApiError::invalid(
                    "speed",
                    format!("speed = {speed} is not supported: this server speaks at speed 1.0"),
                ));
            }
        }
        string(&obj, "instructions")?;
        let ranged = |name: &str, ok: fn(f32) -> bool, want: &str| -> Result<_, ApiError> {
            match number(&obj, name)? {
                Some(v) if !ok(v) => Err(ApiError::invalid(
                    name,
                    format!("{name} = {v}; expected {want}"),
                )),
                v => Ok(v),
            }
        };
        let overrides = Overrides {
            exaggeration: ranged("exaggeration", |v| v >= 0.0, ">= 0")?,
            cfg_weight: ranged("cfg_weight", |v| v >= 0.0, ">= 0")?,
            temperature: ranged("temperature", |v| v > 0.0, "> 0")?,
            top_p: ranged("top_p", |v| v > 0.0 && v <= 1.0, "a number in (0, 1]")?,
            min_p: ranged("min_p", |v| (0.0..=1.0).contains(&v), "a number in [0, 1]")?,
            repetition_penalty: ranged("repetition_penalty", |v| v > 0.0, "> 0")?,
            seed: match obj.get("seed") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_u64().ok_or_else(|| {
                    ApiError::invalid("seed", "`seed` must be a non-negative integer")
                })?),
            },
            language: string(&obj, "language")?,
        };
        Ok(Self {
            model,
            input,
            voice,
            format,
            stream,
            overrides,
        })
    }
}

/// A string field (`None` when absent or null).
fn string(obj: &Map<String, Value>, name: &str) -> Result<Option<String>, ApiError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::invalid(
            name,
            format!("`{name}` must be a string"),
        )),
    }
}

/// A finite number field (`None` when absent or null).
fn number(obj: &Map<String, Value>, name: &str) -> Result<Option<f32>, ApiError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() && x.abs() <= f64::from(f32::MAX) => Ok(Some(x as f32)),
            _ => Err(ApiError::invalid(
                name,
                format!("`{name}` must be a finite number"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<SpeechRequest, ApiError> {
        SpeechRequest::from_json(json.as_bytes(), 4096)
    }

    #[test]
    fn reads_openai_and_chatterbox_fields() {
        let r = parse(
            r#"{"model":"tts-1","input":"Hi.","voice":"alloy","response_format":"wav",
                "speed":1.0,"instructions":"cheerful","stream_format":"sse","temperature":0.5,
                "seed":7,"language":"fr","extra":{"x":1}}"#,
        )
        .unwrap();
        assert_eq!(r.format, AudioFormat::Wav);
        assert_eq!(r.stream, StreamFormat::Sse);
        assert_eq!(r.overrides.temperature, Some(0.5));
        assert_eq!(r.overrides.seed, Some(7));
        let mut o = GenerateOptions::english();
        r.overrides.apply(&mut o);
        assert_eq!((o.temperature, o.seed), (0.5, Some(7)));
        assert_eq!(o.language.as_deref(), Some("fr"));
    }

    #[test]
    fn errors_name_the_field() {
        for (json, param) in [
            (r#"{"input":"a"}"#, "model"),
            (r#"{"model":"m"}"#, "input"),
            (
                r#"{"model":"m","input":"a","response_format":"ogg"}"#,
                "response_format",
            ),
            (
                r#"{"model":"m","input":"a","response_format":"aac"}"#,
                "response_format",
            ),
            (
                r#"{"model":"m","input":"a","response_format":"wav","stream_format":"x"}"#,
                "stream_format",
            ),
            (
                r#"{"model":"m","input":"a","response_format":"wav","speed":2}"#,
                "speed",
            ),
            (
                r#"{"model":"m","input":"a","response_format":"wav","top_p":0}"#,
                "top_p",
            ),
            (
                r#"{"model":"m","input":"a","response_format":"wav","seed":-1}"#,
                "seed",
            ),
            (r#"{"model":"m","input":"a","voice":3}"#, "voice"),
            (
                r#"{"model":"m","input":"a","response_format":"wav","temperature":"hot"}"#,
                "temperature",
            ),
        ] {
            let e = parse(json).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{json}");
            assert_eq!(e.param.as_deref(), Some(param), "{json}");
        }
        // no response_format: mp3, OpenAI's default, which only an `mp3` build encodes (the
        // workspace's tests build it: the command's default features turn it on)
        let omitted = parse(r#"{"model":"m","input":"a"}"#);
        if cfg!(feature = "mp3") {
            assert_eq!(omitted.unwrap().format, AudioFormat::Mp3);
        } else {
            assert_eq!(
                omitted.unwrap_err().param.as_deref(),
                Some("response_format")
            );
        }
        let long = format!(r#"{{"model":"m","input":"{}"}}"#, "a".repeat(4097));
        assert_eq!(parse(&long).unwrap_err().param.as_deref(), Some("input"));
        assert!(parse("[1]").unwrap_err().param.is_none());
    }
}
