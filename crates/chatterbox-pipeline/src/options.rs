//! `generate`'s keyword arguments in chatterbox/tts.py, mtl_tts.py and tts_turbo.py (upstream
//! 5de7a54) as one options struct, with each variant's defaults as constructors.
use crate::cancel::Cancel;
use crate::checkpoint::Variant;
use crate::error::invalid;
use crate::stream_synth::StreamSchedule;
use crate::Result;
use chatterbox_text::Lexicon;
use std::sync::Arc;

/// Length of the linear crossfade between the audio of consecutive text chunks.
pub const CROSSFADE_MS: u32 = 50;

/// Options of `generate` (every knob of the reference, plus seed, chunking and crossfade).
///
/// Start from the variant's defaults ([`GenerateOptions::english`],
/// [`GenerateOptions::multilingual`], [`GenerateOptions::turbo`], or the model's
/// `default_options()`) and change fields.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct GenerateOptions {
    /// Emotion exaggeration (`emotion_adv`) of T3's conditioning. English/multilingual default
    /// `0.5`; Turbo ignores it (default `0.0`).
    pub exaggeration: f32,
    /// Classifier-free guidance weight (English/multilingual; `0` runs one row). Default `0.5`;
    /// Turbo ignores it (`0.0`).
    pub cfg_weight: f32,
    /// Softmax temperature. Default `0.8`.
    pub temperature: f32,
    /// Nucleus threshold. English/multilingual `1.0`, Turbo `0.95`.
    pub top_p: f32,
    /// Min-p threshold (English/multilingual). Default `0.05`; Turbo ignores it (`0.0`).
    pub min_p: f32,
    /// Top-k (Turbo only). Default `1000`.
    pub top_k: usize,
    /// Repetition penalty. Default `1.2` (every variant at upstream 5de7a54).
    pub repetition_penalty: f32,
    /// Language id (`"en"`, `"fr"`, `"zh"`, ...): the multilingual model's language token.
    /// Ignored by the English and Turbo models. Default `None`.
    pub language: Option<String>,
    /// Most speech tokens T3 generates per chunk (`max_new_tokens`; Turbo's `max_gen_len`).
    /// Default `1000`.
    pub max_new_tokens: usize,
    /// Seed of T3's sampling and S3Gen's noise. `None` draws a fresh seed per call (the
    /// reference's behaviour: unseeded torch RNG). Default `None`.
    pub seed: Option<u64>,
    /// Pick the most likely token instead of sampling (deterministic; tests and parity).
    /// Default `false`.
    pub greedy: bool,
    /// CFM solver steps. Default `None`: 10 (English, multilingual), 2 (Turbo's meanflow).
    pub n_cfm_timesteps: Option<usize>,
    /// Texts longer than this many characters are split at sentence boundaries and spoken
    /// chunk by chunk with the same voice; `0` never splits. Default `250`
    /// (`chatterbox_text::DEFAULT_MAX_CHARS`).
    pub max_chunk_chars: usize,
    /// Linear crossfade between chunks, in milliseconds. Default [`CROSSFADE_MS`] (50 ms).
    pub crossfade_ms: u32,
    /// When the models' `stream` runs the flow and HiFT on the tokens drawn so far (ignored
    /// by `generate`). Default: hops of 12, 36, 144 then 576 tokens (English, multilingual);
    /// 10, 30, 120 then 480 (Turbo, Nano): a short first chunk for the first audio, then
    /// each chunk 3-4 times the last, which keeps the number of flow calls (each costs about
    /// one whole-sentence flow on a GPU) small while a real-time listener stays ahead (chosen
    /// on an H100: docs/benchmarks.md); see [`StreamSchedule`].
    pub stream: StreamSchedule,
    /// A flag that stops `generate` (and `generate_stream`) from another thread: it returns
    /// [`crate::PipelineError::Cancelled`] before T3's next token or the next flow or vocoder
    /// call. Default none.
    pub cancel: Option<Cancel>,
    /// Respellings applied to the text's words before anything else reads it (see
    /// [`chatterbox_text::Lexicon`] for the file format and case rules; markup is never
    /// respelled). The timings of [`crate::SpeechReport::captions`] show the text as spoken,
    /// respellings included. Default none.
    pub lexicon: Option<Arc<Lexicon>>,
    /// How many times faster the output is played, at the same pitch: `0.25` (four times as
    /// long) to `4.0` (a quarter), OpenAI's range. The speech is generated as at `1.0`, then
    /// time-stretched (WSOLA, [`chatterbox_dsp::stretch`]) before the watermark; captions'
    /// times are divided by it. `1.0` (the default) runs no stretcher at all: the output is
    /// bit for bit what it was before speed existed.
    pub speed: f32,
    /// Time the words of [`crate::SpeechReport::captions`] (and of the stream's
    /// [`crate::AudioChunk::captions`]) from T3's alignment heads instead of estimating them
    /// by characters (see [`crate::WordTiming::estimated`]): the English and multilingual
    /// models only (Turbo and Nano have none; the batched path of [`crate::SpeechBatch`]
    /// keeps estimated words). Costs per token the attention rows of three heads read to the
    /// host, and on CUDA the decode steps run eagerly instead of as CUDA graphs (English on an
    /// H200: `generate` 3.8x slower, docs/benchmarks.md). The speech
    /// tokens are those drawn without it (exactly on the CPU; on CUDA up to the summation
    /// order of eager against graph-replayed attention). Sentence timings are exact either
    /// way. Default `false`.
    pub word_alignment: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self::english()
    }
}

impl GenerateOptions {
    /// `ChatterboxTTS.generate`'s defaults.
    pub fn english() -> Self {
        Self {
            exaggeration: 0.5,
            cfg_weight: 0.5,
            temperature: 0.8,
            top_p: 1.0,
            min_p: 0.05,
            top_k: 1000,
            repetition_penalty: 1.2,
            language: None,
            max_new_tokens: 1000,
            seed: None,
            greedy: false,
            n_cfm_timesteps: None,
            max_chunk_chars: chatterbox_text::DEFAULT_MAX_CHARS,
            crossfade_ms: CROSSFADE_MS,
            stream: StreamSchedule::new(vec![12, 36, 144, 576]),
            cancel: None,
            lexicon: None,
            speed: 1.0,
            word_alignment: false,
        }
    }

    /// `ChatterboxMultilingualTTS.generate`'s defaults (the same numbers as English; the
    /// language defaults to none, i.e. no language token).
    pub fn multilingual() -> Self {
        Self::english()
    }

    /// `ChatterboxTurboTTS.generate`'s defaults (Turbo and Nano).
    pub fn turbo() -> Self {
        Self {
            exaggeration: 0.0,
            cfg_weight: 0.0,
            min_p: 0.0,
            top_p: 0.95,
            stream: StreamSchedule::new(vec![10, 30, 120, 480]),
            ..Self::english()
        }
    }

    /// The defaults of `variant`.
    pub fn for_variant(variant: Variant) -> Self {
        match variant {
            Variant::English => Self::english(),
            Variant::Multilingual => Self::multilingual(),
            Variant::Turbo | Variant::Nano => Self::turbo(),
        }
    }

    /// Sets the seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Sets the language id.
    pub fn with_language(mut self, language: impl Into<String>) -> Self {
        self.language = Some(language.into());
        self
    }

    /// Sets the streaming schedule.
    pub fn with_stream_schedule(mut self, schedule: StreamSchedule) -> Self {
        self.stream = schedule;
        self
    }

    /// Stops the generation when `cancel` is set (see [`GenerateOptions::cancel`]).
    pub fn with_cancel(mut self, cancel: Cancel) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// Respells words with `lexicon` (see [`GenerateOptions::lexicon`]).
    pub fn with_lexicon(mut self, lexicon: Arc<Lexicon>) -> Self {
        self.lexicon = Some(lexicon);
        self
    }

    /// Times caption words from T3's alignment heads (see [`GenerateOptions::word_alignment`]).
    pub fn with_word_alignment(mut self, word_alignment: bool) -> Self {
        self.word_alignment = word_alignment;
        self
    }

    /// Plays the output `speed` times faster at the same pitch (see [`GenerateOptions::speed`]).
    pub fn with_speed(mut self, speed: f32) -> Self {
        self.speed = speed;
        self
    }

    /// The speed to stretch the output to, `None` at `1.0` (no stretcher).
    pub(crate) fn stretch_speed(&self) -> Option<f32> {
        (self.speed != 1.0).then_some(self.speed)
    }

    /// A streaming stretcher for the 24 kHz output, `None` at speed `1.0`.
    pub(crate) fn stretcher(&self) -> Result<Option<chatterbox_dsp::TimeStretcher>> {
        self.stretch_speed()
            .map(|s| chatterbox_dsp::TimeStretcher::new(crate::s3gen::S3GEN_SR, s))
            .transpose()
            .map_err(Into::into)
    }

    /// `Err(Cancelled)` once [`GenerateOptions::cancel`] is set.
    pub(crate) fn check_cancelled(&self) -> Result<()> {
        self.cancel.as_ref().map_or(Ok(()), Cancel::check)
    }

    /// Greedy decoding on or off.
    pub fn with_greedy(mut self, greedy: bool) -> Self {
        self.greedy = greedy;
        self
    }

    /// Checks ranges: finite numbers, `temperature > 0`, `top_p` in `(0, 1]`, `min_p` in
    /// `[0, 1]`, `repetition_penalty > 0`, `cfg_weight >= 0`, `max_new_tokens > 0`, `speed` in
    /// `[0.25, 4]`.
    pub fn validate(&self) -> Result<()> {
        if chatterbox_dsp::stretch::check_speed(self.speed).is_err() {
            return Err(invalid(
                "generation option",
                format!(
                    "speed = {}; expected a finite number from {} to {}",
                    self.speed,
                    chatterbox_dsp::stretch::MIN_SPEED,
                    chatterbox_dsp::stretch::MAX_SPEED
                ),
            ));
        }
        let finite = [
            ("exaggeration", self.exaggeration),
            ("cfg_weight", self.cfg_weight),
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("repetition_penalty", self.repetition_penalty),
        ];
        for (what, v) in finite {
            if !v.is_finite() {
                return Err(invalid(
                    "generation option",
                    format!("{what} = {v} is not finite"),
                ));
            }
        }
        let check = |ok: bool, what: &str, v: f32, want: &str| {
            if ok {
                Ok(())
            } else {
                Err(invalid(
                    "generation option",
                    format!("{what} = {v}; expected {want}"),
                ))
            }
        };
        check(
            self.temperature > 0.0,
            "temperature",
            self.temperature,
            "> 0",
        )?;
        check(
            self.top_p > 0.0 && self.top_p <= 1.0,
            "top_p",
            self.top_p,
            "in (0, 1]",
        )?;
        check(
            (0.0..=1.0).contains(&self.min_p),
            "min_p",
            self.min_p,
            "in [0, 1]",
        )?;
        check(
            self.repetition_penalty > 0.0,
            "repetition_penalty",
            self.repetition_penalty,
            "> 0",
        )?;
        check(
            self.cfg_weight >= 0.0,
            "cfg_weight",
            self.cfg_weight,
            ">= 0",
        )?;
        if self.max_new_tokens == 0 {
            return Err(invalid(
                "generation option",
                "max_new_tokens = 0; expected > 0",
            ));
        }
        if self.n_cfm_timesteps == Some(0) {
            return Err(invalid(
                "generation option",
                "n_cfm_timesteps = 0; expected > 0",
            ));
        }
        Ok(())
    }
}
