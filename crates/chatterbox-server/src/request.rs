//! The body of `POST /v1/audio/speech`: OpenAI's fields plus Chatterbox's, read field by field
//! so each error names its field. Unknown fields are accepted (OpenAI clients send extras);
//! `null` is the same as absent.
use crate::error::ApiError;
use crate::format::{AudioFormat, StreamFormat};
use crate::model::ModelId;
use chatterbox_pipeline::GenerateOptions;
use serde_json::{Map, Value};

/// The accepted range of each of Chatterbox's numeric fields: `(name, lowest, highest, whether
/// the lowest is excluded)`. The bounds are those of the reference's own Gradio apps
/// (`gradio_tts_app.py`, `multilingual_app.py`, `gradio_tts_turbo_app.py`, upstream 5de7a54),
/// widened where the reference's code itself uses a value outside them: `exaggeration` and
/// `cfg_weight` go down to 0 (Turbo's defaults; `cfg_weight = 0` is what `multilingual_app.py`
/// advises for language transfer), `temperature` up to the English app's 5. `top_p = 0` (the
/// apps' slider bottom) would keep no token: refused.
pub const OPTION_RANGES: [(&str, f32, f32, bool); 6] = [
    ("exaggeration", 0.0, 2.0, false),
    ("cfg_weight", 0.0, 1.0, false),
    ("temperature", 0.05, 5.0, false),
    ("top_p", 0.0, 1.0, true),
    ("min_p", 0.0, 1.0, false),
    ("repetition_penalty", 1.0, 2.0, false),
];

/// Chatterbox's generation fields of a request (each `None` keeps the model's default). The
/// numbers are within [`OPTION_RANGES`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// `exaggeration`, 0 to 2 (English and multilingual; Turbo and Nano ignore it).
    pub exaggeration: Option<f32>,
    /// `cfg_weight`, 0 to 1 (English and multilingual; Turbo and Nano ignore it).
    pub cfg_weight: Option<f32>,
    /// `temperature`, 0.05 to 5.
    pub temperature: Option<f32>,
    /// `top_p`, in (0, 1].
    pub top_p: Option<f32>,
    /// `min_p`, 0 to 1 (English and multilingual; Turbo and Nano ignore it).
    pub min_p: Option<f32>,
    /// `repetition_penalty`, 1 to 2.
    pub repetition_penalty: Option<f32>,
    /// `seed`, 0 to 2^64 - 1 (every value is a seed: 0 is not "random" as in the reference's
    /// apps; leave it out for a fresh seed).
    pub seed: Option<u64>,
    /// `language` (the multilingual model's language id).
    pub language: Option<String>,
    /// `speed` (OpenAI's), 0.25 to 4: the speech played that many times faster at the same
    /// pitch (chatterbox-pipeline's `GenerateOptions::speed`, a time stretch after generation).
    pub speed: Option<f32>,
}

impl Overrides {
    /// The fields this request set that `model` does not use, by name in alphabetical order
    /// (Turbo and Nano take no `cfg_weight`, `exaggeration` or `min_p`, as the reference's
    /// `tts_turbo.py` warns; chatterbox-pipeline's Turbo path reads none of them).
    pub fn ignored_by(&self, model: ModelId) -> Vec<&'static str> {
        match model {
            ModelId::Turbo | ModelId::Nano => [
                ("cfg_weight", self.cfg_weight.is_some()),
                ("exaggeration", self.exaggeration.is_some()),
                ("min_p", self.min_p.is_some()),
            ]
            .into_iter()
            .filter_map(|(name, set)| set.then_some(name))
            .collect(),
            ModelId::English | ModelId::Multilingual => Vec::new(),
        }
    }

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
        set(&mut opts.speed, self.speed);
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
    /// `instructions`, as given: accepted and ignored (no Chatterbox model follows
    /// instructions).
    pub instructions: Option<String>,
    /// `timestamps` (Chatterbox's, default `false`): with `stream_format: "sse"`, a
    /// `speech.audio.timestamps` event follows each chunk whose audio ends sentences.
    pub timestamps: bool,
    /// `lexicon` (Chatterbox's): the name of one of the server's pronunciation lexicons
    /// (`ServerConfig::lexicons`), checked against them when the request is served.
    pub lexicon: Option<String>,
}

impl SpeechRequest {
    /// Reads a JSON body. `instructions` is accepted and ignored (Chatterbox has no
    /// instruction following); `speed` is OpenAI's, 0.25 to 4 (see [`Overrides::speed`]).
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
        let speed = number(&obj, "speed")?;
        if let Some(v) = speed {
            if chatterbox_dsp::stretch::check_speed(v).is_err() {
                return Err(ApiError::invalid(
                    "speed",
                    format!(
                        "speed = {v} is out of range: expected from {} to {}",
                        chatterbox_dsp::stretch::MIN_SPEED,
                        chatterbox_dsp::stretch::MAX_SPEED
                    ),
                ));
            }
        }
        let instructions = string(&obj, "instructions")?;
        let timestamps = match obj.get("timestamps") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(ApiError::invalid(
                    "timestamps",
                    "`timestamps` must be true or false",
                ))
            }
        };
        let mut ranged = [None; OPTION_RANGES.len()];
        for (slot, &(name, low, high, open)) in ranged.iter_mut().zip(OPTION_RANGES.iter()) {
            *slot = number(&obj, name)?;
            if let Some(v) = *slot {
                let above_low = if open { v > low } else { v >= low };
                if !above_low || v > high {
                    let from = if open { "above" } else { "from" };
                    return Err(ApiError::invalid(
                        name,
                        format!("{name} = {v} is out of range: expected {from} {low} to {high}"),
                    ));
                }
            }
        }
        let [exaggeration, cfg_weight, temperature, top_p, min_p, repetition_penalty] = ranged;
        let overrides = Overrides {
            exaggeration,
            cfg_weight,
            temperature,
            top_p,
            min_p,
            repetition_penalty,
            seed: match obj.get("seed") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_u64().ok_or_else(|| {
                    ApiError::invalid(
                        "seed",
                        "`seed` must be an integer from 0 to 18446744073709551615",
                    )
                })?),
            },
            language: string(&obj, "language")?,
            // 1 is the exact path (no stretcher), whether given or not
            speed: speed.filter(|&v| v != 1.0),
        };
        Ok(Self {
            model,
            input,
            voice,
            format,
            stream,
            overrides,
            instructions,
            timestamps,
            lexicon: string(&obj, "lexicon")?,
        })
    }

    /// The fields this request set that `model` does not use (see [`Overrides::ignored_by`];
    /// `instructions` too, which no model uses), for the `x-chatterbox-ignored-options`
    /// header.
    pub fn ignored_by(&self, model: ModelId) -> Vec<&'static str> {
        let mut v = self.overrides.ignored_by(model);
        if self.instructions.is_some() {
            v.push("instructions");
        }
        v.sort_unstable();
        v
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
                r#"{"model":"m","input":"a","response_format":"wav","speed":4.5}"#,
                "speed",
            ),
            (
                r#"{"model":"m","input":"a","response_format":"wav","speed":"fast"}"#,
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

    #[test]
    fn out_of_range_options_name_their_field_and_the_ends_pass() {
        let with = |field: &str, v: serde_json::Value| {
            let mut body =
                serde_json::json!({"model": "m", "input": "a", "response_format": "wav"});
            body[field] = v;
            parse(&body.to_string())
        };
        for (field, bad) in [
            ("exaggeration", serde_json::json!(99)),
            ("exaggeration", serde_json::json!(-0.1)),
            ("cfg_weight", serde_json::json!(1.5)),
            ("temperature", serde_json::json!(0.01)),
            ("temperature", serde_json::json!(6)),
            ("top_p", serde_json::json!(0)),
            ("top_p", serde_json::json!(1.01)),
            ("min_p", serde_json::json!(-0.5)),
            ("repetition_penalty", serde_json::json!(0.5)),
            ("repetition_penalty", serde_json::json!(2.5)),
            ("seed", serde_json::json!(1.5)),
            ("seed", serde_json::json!(1e30)),
        ] {
            let e = with(field, bad.clone()).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{field} {bad}");
            assert_eq!(e.param.as_deref(), Some(field), "{field} {bad}");
            assert!(e.message.contains(field), "{}", e.message);
        }
        for (field, good) in [
            ("exaggeration", 0.0),
            ("exaggeration", 2.0),
            ("cfg_weight", 0.0),
            ("cfg_weight", 1.0),
            ("temperature", 0.05),
            ("temperature", 5.0),
            ("top_p", 1.0),
            ("min_p", 0.0),
            ("min_p", 1.0),
            ("repetition_penalty", 1.0),
            ("repetition_penalty", 2.0),
        ] {
            assert!(
                with(field, serde_json::json!(good)).is_ok(),
                "{field} {good}"
            );
        }
        let r = with("seed", serde_json::json!(u64::MAX)).unwrap();
        assert_eq!(r.overrides.seed, Some(u64::MAX));
        // a value every variant's defaults pass (chatterbox-pipeline's `GenerateOptions`)
        for d in [GenerateOptions::english(), GenerateOptions::turbo()] {
            for (name, v) in [
                ("exaggeration", d.exaggeration),
                ("cfg_weight", d.cfg_weight),
                ("temperature", d.temperature),
                ("top_p", d.top_p),
                ("min_p", d.min_p),
                ("repetition_penalty", d.repetition_penalty),
            ] {
                assert!(
                    with(name, serde_json::json!(v)).is_ok(),
                    "default {name} = {v}"
                );
            }
        }
    }

    #[test]
    fn speed_is_read_in_openais_range() {
        let with = |v: serde_json::Value| {
            let body = serde_json::json!({"model": "m", "input": "a", "response_format": "wav",
                                          "speed": v});
            parse(&body.to_string())
        };
        for (v, want) in [
            (0.25, Some(0.25)),
            (4.0, Some(4.0)),
            (1.5, Some(1.5)),
            (1.0, None),
        ] {
            let r = with(serde_json::json!(v)).unwrap();
            assert_eq!(r.overrides.speed, want, "{v}");
            let mut o = GenerateOptions::english();
            r.overrides.apply(&mut o);
            assert_eq!(o.speed, v, "{v}");
        }
        for bad in [0.24, 4.01, 0.0, -1.0, 100.0] {
            let e = with(serde_json::json!(bad)).unwrap_err();
            assert_eq!(e.status.as_u16(), 400);
            assert_eq!(e.param.as_deref(), Some("speed"));
            assert!(e.message.contains("0.25 to 4"), "{}", e.message);
        }
    }

    #[test]
    fn turbo_and_nano_name_what_they_ignore() {
        let r = parse(
            r#"{"model":"m","input":"a","response_format":"wav","min_p":0.1,"exaggeration":0.7,
                "temperature":0.5,"instructions":"calm"}"#,
        )
        .unwrap();
        assert_eq!(
            r.ignored_by(ModelId::Turbo),
            ["exaggeration", "instructions", "min_p"]
        );
        assert_eq!(r.ignored_by(ModelId::Nano), r.ignored_by(ModelId::Turbo));
        assert_eq!(r.ignored_by(ModelId::English), ["instructions"]);
        let plain = parse(r#"{"model":"m","input":"a","response_format":"wav"}"#).unwrap();
        assert!(plain.ignored_by(ModelId::Turbo).is_empty());
    }
}
