//! What `ChatterboxTTS`, `ChatterboxMultilingualTTS` and `ChatterboxTurboTTS` share
//! (chatterbox/tts.py, mtl_tts.py, tts_turbo.py, upstream 5de7a54): loading, conditioning,
//! one generation, and the per-variant post-processing of T3's tokens.
use crate::captions::{aligned_heads, text_token_words, ChunkAlignment, SentenceTiming, Timeline};
use crate::checkpoint::{
    optional, require, var_builder, CheckpointFiles, MultilingualT3, Variant, CONDS_FILE,
};
use crate::conditionals::Conditionals;
use crate::config::ChatterboxConfig;
use crate::crossfade::Crossfader;
use crate::draws::{Draws, SeededDraws};
use crate::error::{invalid, loading};
use crate::options::GenerateOptions;
use crate::progress::Progress;
use crate::s3gen::{
    S3Gen, S3GenOptions, DEC_COND_LEN, S3GEN_SIL, S3GEN_SR, S3_SR, SAMPLES_PER_TOKEN,
};
use crate::tts::Truncation;
use crate::voice::{audio_24k, norm_loudness, VoiceClip};
use crate::watermark::WatermarkHook;
use crate::{PipelineError, Result};
use candle_core::{DType, Device, Tensor};
use chatterbox_dsp::Audio;
use chatterbox_speaker::{EmbedOptions, VoiceEncoder};
use chatterbox_t3::{Sampling, T3};
use chatterbox_text::{Language, SentenceChunker, TextFrontend};
use std::path::Path;

/// `SOS` of chatterbox/models/s3tokenizer (`SPEECH_VOCAB_SIZE`).
pub const SPEECH_SOS: u32 = 6561;
/// `EOS` of chatterbox/models/s3tokenizer.
pub const SPEECH_EOS: u32 = 6562;
/// Speech token ids S3Gen can synthesise are below this (`SPEECH_VOCAB_SIZE`).
pub const SPEECH_VOCAB_SIZE: u32 = 6561;
/// Turbo's loudness target for reference clips (`norm_loudness(target_lufs=-27)`).
pub const TURBO_TARGET_LUFS: f64 = -27.0;
/// Shortest reference clip accepted, seconds (the reference has no check and fails deep inside
/// S3Gen or the VoiceEncoder on very short clips).
pub const MIN_REF_SECS: f64 = 0.5;
/// Turbo's minimum reference length, seconds (exclusive: "longer than 5 seconds").
pub const TURBO_MIN_REF_SECS: f64 = 5.0;

/// One synthesised text chunk: the speech tokens S3Gen received, its mel and the waveform.
#[derive(Debug, Clone)]
pub struct ChunkOutput {
    /// T3's tokens as drawn (the stop token included when drawn).
    pub raw_tokens: Vec<u32>,
    /// The tokens after the variant's post-processing (what S3Gen synthesised).
    pub speech_tokens: Vec<u32>,
    /// The flow's mel, `(1, 80, 2 n)`.
    pub mel: Tensor,
    /// The waveform at 24 kHz after the variant's trimming (no watermark).
    pub wav: Vec<f32>,
    /// Whether T3 stopped at `max_new_tokens` without drawing its stop token: the speech is
    /// cut where the cap fell (see [`Truncation`]).
    pub truncated: bool,
    /// With [`GenerateOptions::word_alignment`] on the English or multilingual model: for each
    /// token of `speech_tokens` whose audio is in `wav` (the multilingual model cuts the last
    /// one's), the text position T3's alignment heads attended when it was drawn (an index
    /// into T3's text span: 0 is `[START]`, then the text tokens, then `[STOP]`). `None`
    /// otherwise.
    pub text_positions: Option<Vec<usize>>,
}

/// What a whole generation did besides its audio (the models' `generate_with_report` and
/// `generate_stream_with_report`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpeechReport {
    /// Text chunks spoken (the sentence splitting of [`GenerateOptions::max_chunk_chars`]).
    pub sentences: usize,
    /// Those cut at [`GenerateOptions::max_new_tokens`], in order (empty when T3 finished
    /// every one with its stop token).
    pub truncated: Vec<Truncation>,
    /// Where each text chunk's speech lies in the output (exact), with its words (estimated
    /// inside it): see [`SentenceTiming`].
    pub captions: Vec<SentenceTiming>,
}

impl SpeechReport {
    /// Whether some text chunk's speech was cut at the token cap.
    pub fn is_truncated(&self) -> bool {
        !self.truncated.is_empty()
    }

    /// The report of the output played `speed` times faster: its captions' times divided.
    fn at_speed(mut self, speed: f32) -> Self {
        self.captions = self
            .captions
            .into_iter()
            .map(|c| c.at_speed(speed))
            .collect();
        self
    }
}

/// A pause of `samples` through the crossfader: a segment of zeros long enough to leave
/// exactly `samples` of them between the fade out of what came before and, when
/// `text_follows`, the fade in of the next text chunk.
fn push_silence(
    samples: usize,
    text_follows: bool,
    fader: &mut Crossfader,
    timeline: &mut Timeline,
    on_audio: &mut dyn FnMut(&[f32]) -> Result<()>,
) -> Result<()> {
    if samples == 0 {
        return Ok(());
    }
    let len = timeline.silence_len(samples, text_follows);
    timeline.push(len);
    let ready = fader.push(vec![0.0; len]);
    if !ready.is_empty() {
        on_audio(&ready)?;
    }
    Ok(())
}

/// `drop_invalid_tokens` (chatterbox/models/s3tokenizer): the tokens after the first `SOS` and
/// before the first `EOS`.
pub fn drop_invalid_tokens(tokens: &[u32]) -> Vec<u32> {
    tokens[valid_span(tokens)].to_vec()
}

/// Where the tokens [`drop_invalid_tokens`] keeps lie: after the first `SOS` and before the
/// first `EOS` (empty when that `EOS` comes first).
fn valid_span(tokens: &[u32]) -> std::ops::Range<usize> {
    let s = tokens
        .iter()
        .position(|&t| t == SPEECH_SOS)
        .map_or(0, |i| i + 1);
    let e = tokens
        .iter()
        .position(|&t| t == SPEECH_EOS)
        .unwrap_or(tokens.len());
    s..e.max(s)
}

/// The text positions of the tokens [`drop_invalid_tokens`] keeps and S3Gen can synthesise:
/// `positions[k]` belongs to `raw[k]`.
fn kept_positions(raw: &[u32], positions: &[usize]) -> Vec<usize> {
    valid_span(raw)
        .filter(|&k| raw[k] < SPEECH_VOCAB_SIZE)
        .filter_map(|k| positions.get(k).copied())
        .collect()
}

#[derive(Debug, Clone)]
pub(crate) struct TtsCore {
    pub(crate) variant: Variant,
    pub(crate) t3: T3,
    pub(crate) s3gen: S3Gen,
    pub(crate) ve: VoiceEncoder,
    pub(crate) text: TextFrontend,
    pub(crate) conds: Option<Conditionals>,
    pub(crate) watermark: WatermarkHook,
    pub(crate) norm_loudness: bool,
}

impl TtsCore {
    pub(crate) fn load(
        dir: &Path,
        variant: Variant,
        mtl: &MultilingualT3,
        cfg: &ChatterboxConfig,
        device: &Device,
        dtype: DType,
    ) -> Result<Self> {
        let files = CheckpointFiles::of(variant, mtl);
        let name = variant.name();
        let ve_path = require(dir, files.ve, "VoiceEncoder weights", name)?;
        let t3_path = require(dir, &files.t3_in(dir), "T3 weights", name)?;
        let s3_path = require(dir, files.s3gen, "S3Gen weights", name)?;
        let text_variant = match variant {
            Variant::English => chatterbox_text::Variant::English,
            Variant::Multilingual => chatterbox_text::Variant::Multilingual,
            Variant::Turbo | Variant::Nano => chatterbox_text::Variant::Turbo,
        };
        let tok_path = if text_variant == chatterbox_text::Variant::Turbo {
            // The GPT-2 tokenizer loads from tokenizer.json, or vocab.json + merges.txt.
            optional(dir, "tokenizer.json")
                .map_or_else(|| require(dir, files.tokenizer, "text tokenizer", name), Ok)?
        } else {
            require(dir, files.tokenizer, "text tokenizer", name)?
        };
        // the kernels compile on other threads while the weights load
        crate::kernels::prepare(device);
        // The small files first: a broken tokenizer or voice file fails before gigabytes of
        // weights are read.
        let text = TextFrontend::from_checkpoint_dir(dir, text_variant)
            .map_err(PipelineError::from)
            .map_err(loading(&tok_path))?;
        let conds = match optional(dir, CONDS_FILE) {
            Some(p) => Some(Conditionals::load(&p, device)?),
            None => None,
        };
        let started = std::time::Instant::now();
        tracing::info!(path = %ve_path.display(), "loading the VoiceEncoder");
        let ve = if ve_path.extension().is_some_and(|e| e == "safetensors") {
            VoiceEncoder::from_safetensors(&ve_path, &cfg.ve, device)
        } else {
            // candle's pickle reader panics or over-allocates on hostile files: check first.
            crate::torch_file::check_torch_weights(&ve_path)?;
            VoiceEncoder::from_pth(&ve_path, &cfg.ve, device)
        }
        .map_err(PipelineError::from)
        .map_err(loading(&ve_path))?;
        tracing::info!(path = %t3_path.display(), ?dtype, "loading T3");
        let t3 = if chatterbox_t3::is_quantized_file(&t3_path) {
            // a quantized checkpoint: loaded in its own format, no full-precision file read
            T3::load_quantized(&cfg.t3, &t3_path, dtype, device)
        } else {
            T3::load_with_config(&cfg.t3, &[&t3_path], dtype, device)
        }
        .map_err(PipelineError::from)
        .map_err(loading(&t3_path))?;
        tracing::info!(path = %s3_path.display(), "loading S3Gen");
        let vb = var_builder(&s3_path, DType::F32, device)?;
        let s3gen = S3Gen::new(&cfg.s3gen, vb, dtype).map_err(loading(&s3_path))?;
        tracing::info!(
            variant = name,
            secs = started.elapsed().as_secs_f64(),
            "model loaded"
        );
        Ok(Self {
            variant,
            t3,
            s3gen,
            ve,
            text,
            conds,
            watermark: WatermarkHook::default(),
            norm_loudness: true,
        })
    }

    pub(crate) fn is_turbo(&self) -> bool {
        matches!(self.variant, Variant::Turbo | Variant::Nano)
    }

    /// Speech tokens T3 draws at most for one text chunk: `max_new_tokens` (Turbo one more:
    /// `inference_turbo` draws its first token, then `max_gen_len` more).
    pub(crate) fn token_limit(&self, opts: &GenerateOptions) -> usize {
        if self.is_turbo() {
            opts.max_new_tokens.saturating_add(1)
        } else {
            opts.max_new_tokens
        }
    }

    /// `ENC_COND_LEN`: 6 s at 16 kHz (15 s for Turbo).
    pub(crate) fn enc_cond_len(&self) -> usize {
        if self.is_turbo() {
            15 * S3_SR as usize
        } else {
            6 * S3_SR as usize
        }
    }

    /// `prepare_conditionals` from decoded audio: 24 kHz, Turbo's length rule and loudness
    /// normalisation, the 16 kHz copy.
    pub(crate) fn conditionals_from_audio(
        &self,
        audio: &Audio,
        exaggeration: f32,
    ) -> Result<Conditionals> {
        let mut wav = audio_24k(audio)?;
        if self.is_turbo() {
            let seconds = wav.len() as f64 / f64::from(S3GEN_SR);
            if seconds <= TURBO_MIN_REF_SECS {
                return Err(PipelineError::ReferenceTooShort {
                    seconds,
                    min_seconds: TURBO_MIN_REF_SECS,
                    model: if self.variant == Variant::Nano {
                        "Nano"
                    } else {
                        "Turbo"
                    },
                });
            }
            if self.norm_loudness {
                norm_loudness(&mut wav, S3GEN_SR, TURBO_TARGET_LUFS)?;
            }
        }
        self.conditionals_from_clip(&VoiceClip::from_24k(wav)?, exaggeration)
    }

    /// The rest of `prepare_conditionals`, from both versions of the clip.
    pub(crate) fn conditionals_from_clip(
        &self,
        clip: &VoiceClip,
        exaggeration: f32,
    ) -> Result<Conditionals> {
        let _span = tracing::debug_span!("prepare_conditionals").entered();
        tracing::info!(
            secs = clip.duration_secs(),
            "analysing the voice clip (speech tokens, speaker embeddings)"
        );
        if !exaggeration.is_finite() {
            return Err(invalid(
                "exaggeration",
                format!("{exaggeration} is not finite"),
            ));
        }
        crate::voice::check_clip(&clip.wav_24k)?;
        crate::voice::check_clip(&clip.wav_16k)?;
        let seconds = clip.duration_secs();
        if seconds < MIN_REF_SECS {
            return Err(PipelineError::ReferenceTooShort {
                seconds,
                min_seconds: MIN_REF_SECS,
                model: "Chatterbox",
            });
        }
        let dec = &clip.wav_24k[..clip.wav_24k.len().min(DEC_COND_LEN)];
        let gen = self.s3gen.embed_ref(dec)?;
        let device = self.s3gen.device();
        let plen = self.t3.config().speech_cond_prompt_len;
        let prompt = if plen > 0 {
            let enc = &clip.wav_16k[..clip.wav_16k.len().min(self.enc_cond_len())];
            let tokens = self.s3gen.tokenizer().forward(&[enc], S3_SR, Some(plen))?;
            let tokens = tokens.to_vecs()?.into_iter().next().unwrap_or_default();
            if tokens.is_empty() {
                return Err(invalid(
                    "reference clip",
                    "too short: it gives no speech token; use a few seconds of speech",
                ));
            }
            let n = tokens.len();
            Some(Tensor::from_vec(tokens, (1, n), device)?)
        } else {
            None
        };
        let ve = self
            .ve
            .embeds_from_wavs(&[&clip.wav_16k], S3_SR, &EmbedOptions::default())?
            .mean_keepdim(0)?
            .to_device(device)?;
        let mut t3 = chatterbox_t3::T3Cond::new(ve).with_emotion_adv(exaggeration);
        if let Some(p) = prompt {
            t3 = t3.with_prompt(p);
        }
        Ok(Conditionals { t3, gen })
    }

    pub(crate) fn language(&self, opts: &GenerateOptions) -> Result<Option<Language>> {
        match (&opts.language, self.variant) {
            (Some(l), Variant::Multilingual) if !l.is_empty() => {
                Ok(Some(Language::parse(&l.to_lowercase())?))
            }
            (Some(l), _) if !l.is_empty() && !l.eq_ignore_ascii_case("en") => Err(invalid(
                "language",
                format!(
                    "{l:?}: the {} model speaks English only",
                    self.variant.name()
                ),
            )),
            _ => Ok(None),
        }
    }

    /// One chunk of text through T3 and S3Gen with the reference's post-processing.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn synthesize(
        &self,
        text: &str,
        opts: &GenerateOptions,
        conds: &Conditionals,
        sampling: Sampling,
        draws: &mut dyn Draws,
        chunk: usize,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<ChunkOutput> {
        opts.validate()?;
        let language = self.language(opts)?;
        let ids = self.text.text_tokens(text, language)?;
        let max = opts.max_new_tokens;
        let t3_started = std::time::Instant::now();
        let mut on_token = |generated: usize| {
            progress(&Progress::Tokens {
                chunk,
                // The stop token can come after `max` drawn tokens: never report more than max.
                generated: generated.min(max),
                max,
            })
        };
        let cond_emb = if self.is_turbo() {
            self.t3.prepare_conditioning(&conds.t3)?
        } else {
            let cond = conds.with_exaggeration(opts.exaggeration);
            self.t3.prepare_conditioning(&cond.t3)?
        };
        let mut raw_tokens = Vec::new();
        let mut tokens = self.token_stream(&cond_emb, &ids, opts, sampling)?;
        for t in tokens.by_ref() {
            raw_tokens.push(t?);
            on_token(raw_tokens.len());
            opts.check_cancelled()?;
        }
        // cut at the cap: every token drawn, none of them the stop token (Turbo may also stop
        // early when every logit is -inf: not a cut)
        let truncated = !tokens.stopped_on_eos() && raw_tokens.len() >= self.token_limit(opts);
        let positions = tokens.text_positions().map(<[usize]>::to_vec);
        drop(tokens);
        // `inference_turbo` returns the tokens without a final stop token.
        if self.is_turbo() && raw_tokens.last() == Some(&self.t3.config().stop_speech_token) {
            raw_tokens.pop();
        }
        tracing::info!(
            chunk,
            text_tokens = ids.len(),
            speech_tokens = raw_tokens.len(),
            truncated,
            secs = t3_started.elapsed().as_secs_f64(),
            "T3: speech tokens"
        );
        let speech_tokens = self.post_process(&raw_tokens);
        if speech_tokens.is_empty() {
            return Err(PipelineError::NoSpeechTokens {
                chunk,
                text: text.to_string(),
            });
        }
        let s3opts = S3GenOptions {
            n_cfm_timesteps: opts.n_cfm_timesteps.or(self.is_turbo().then_some(2)),
        };
        opts.check_cancelled()?;
        let flow_started = std::time::Instant::now();
        let mel = self
            .s3gen
            .flow_inference(&speech_tokens, &conds.gen, &s3opts, draws)?;
        tracing::info!(
            chunk,
            frames = mel.dim(candle_core::D::Minus1)?,
            secs = flow_started.elapsed().as_secs_f64(),
            "S3Gen flow: mel"
        );
        opts.check_cancelled()?;
        let hift_started = std::time::Instant::now();
        let wav = self.s3gen.hift_inference(&mel, draws)?;
        let mut wav = wav.squeeze(0)?.to_vec1::<f32>()?;
        tracing::info!(
            chunk,
            audio_secs = wav.len() as f64 / f64::from(S3GEN_SR),
            secs = hift_started.elapsed().as_secs_f64(),
            "HiFT: waveform"
        );
        if self.variant == Variant::Multilingual {
            // Drop the final speech token's audio (emitted just before EOS; ~40 ms of noise).
            let st_len = speech_tokens.len().saturating_sub(1).max(1);
            wav.truncate(st_len * SAMPLES_PER_TOKEN);
        }
        let text_positions = positions.map(|p| {
            let mut kept = kept_positions(&raw_tokens, &p);
            if self.variant == Variant::Multilingual {
                // the last token's audio was cut
                kept.truncate(kept.len().saturating_sub(1).max(1));
            }
            kept
        });
        Ok(ChunkOutput {
            raw_tokens,
            speech_tokens,
            mel,
            wav,
            truncated,
            text_positions,
        })
    }

    /// T3's token stream for text tokens `ids` (without SOT/EOT) with the variant's options.
    pub(crate) fn token_stream<'a>(
        &'a self,
        cond_emb: &Tensor,
        ids: &[u32],
        opts: &GenerateOptions,
        sampling: Sampling,
    ) -> Result<chatterbox_t3::TokenStream<'a>> {
        if self.is_turbo() {
            if opts.cfg_weight > 0.0 || opts.exaggeration > 0.0 || opts.min_p > 0.0 {
                tracing::warn!(
                    "CFG, min_p and exaggeration are not supported by Turbo and will be ignored"
                );
            }
            Ok(self
                .t3
                .generate_turbo(cond_emb, ids, &Self::turbo_options(opts, sampling))?)
        } else {
            let padded = self.t3.pad_text_tokens(ids);
            let mut o = Self::t3_options(opts, sampling);
            if opts.word_alignment {
                // the analyzer without its edits: the text position of every token, the same
                // tokens (captions' word timings; see crate::captions)
                o.alignment = aligned_heads(&self.t3.config().backbone)
                    .map(|h| chatterbox_t3::AlignmentAnalyzerConfig::with_heads(h).tracking());
            }
            Ok(self.t3.generate(cond_emb, &padded, &o)?)
        }
    }

    /// [`TtsCore::token_stream`]'s request queued in a batch decoder instead (its prefill
    /// and first draw come with the decoder's next `admit_queued`): the request's id. The
    /// batch decoder runs no alignment analyzer, so [`GenerateOptions::word_alignment`] is
    /// ignored here: batched captions keep estimated words.
    pub(crate) fn queue<'a>(
        &'a self,
        batch: &mut chatterbox_t3::BatchDecoder<'a>,
        cond_emb: &Tensor,
        ids: &[u32],
        opts: &GenerateOptions,
        sampling: Sampling,
    ) -> Result<chatterbox_t3::RequestId> {
        if self.is_turbo() {
            Ok(batch.queue_turbo(cond_emb, ids, &Self::turbo_options(opts, sampling))?)
        } else {
            let padded = self.t3.pad_text_tokens(ids);
            Ok(batch.queue_generate(cond_emb, &padded, &Self::t3_options(opts, sampling))?)
        }
    }

    fn turbo_options(opts: &GenerateOptions, sampling: Sampling) -> chatterbox_t3::TurboOptions {
        let mut o = chatterbox_t3::TurboOptions::default();
        o.temperature = opts.temperature;
        o.top_k = opts.top_k;
        o.top_p = opts.top_p;
        o.repetition_penalty = opts.repetition_penalty;
        o.max_gen_len = opts.max_new_tokens;
        o.sampling = sampling;
        o
    }

    fn t3_options(opts: &GenerateOptions, sampling: Sampling) -> chatterbox_t3::GenerateOptions {
        let mut o = chatterbox_t3::GenerateOptions::default();
        o.max_new_tokens = opts.max_new_tokens;
        o.temperature = opts.temperature;
        o.top_p = opts.top_p;
        o.min_p = opts.min_p;
        o.repetition_penalty = opts.repetition_penalty;
        o.cfg_weight = opts.cfg_weight;
        o.sampling = sampling;
        o
    }

    /// The text chunks `generate` speaks one after the other (`max_chunk_chars`).
    pub(crate) fn text_chunks(&self, text: &str, opts: &GenerateOptions) -> Result<Vec<String>> {
        if opts.max_chunk_chars == 0 {
            return Ok(vec![text.to_string()]);
        }
        let c = SentenceChunker::new(opts.max_chunk_chars)?.split(text);
        Ok(if c.is_empty() {
            vec![text.to_string()]
        } else {
            c
        })
    }

    /// The variant's token post-processing before S3Gen.
    pub(crate) fn post_process(&self, raw: &[u32]) -> Vec<u32> {
        match self.variant {
            Variant::English => drop_invalid_tokens(raw)
                .into_iter()
                .filter(|&t| t < SPEECH_VOCAB_SIZE)
                .collect(),
            Variant::Multilingual => {
                let v = drop_invalid_tokens(raw);
                // The reference passes ids >= 6561 on to S3Gen, whose embedding then fails;
                // they are dropped here instead.
                if v.iter().any(|&t| t >= SPEECH_VOCAB_SIZE) {
                    tracing::warn!("dropping speech tokens outside S3Gen's vocabulary");
                }
                v.into_iter().filter(|&t| t < SPEECH_VOCAB_SIZE).collect()
            }
            Variant::Turbo | Variant::Nano => {
                // `inference_turbo` drops a final stop token; then OOV tokens go and three
                // silence tokens are appended.
                let mut v: Vec<u32> = raw
                    .iter()
                    .copied()
                    .filter(|&t| t < SPEECH_VOCAB_SIZE)
                    .collect();
                v.extend([S3GEN_SIL; 3]);
                v
            }
        }
    }

    /// Long text: chunks, each synthesised with the same voice, joined with a crossfade and
    /// handed to `on_audio` as they are final.
    pub(crate) fn generate_stream(
        &self,
        text: &str,
        opts: &GenerateOptions,
        progress: &mut dyn FnMut(&Progress),
        on_audio: &mut dyn FnMut(&[f32]) -> Result<()>,
    ) -> Result<SpeechReport> {
        let mut marker = self.watermark.stream(S3GEN_SR);
        let Some(mut stretch) = opts.stretcher()? else {
            return self.generate_unmarked(text, opts, progress, &mut |piece| {
                let marked = marker.push(piece.to_vec())?;
                on_audio(&marked)
            });
        };
        // speed: each piece through the stretcher, then the watermark on what it gives
        let mut marked = |piece: Vec<f32>| -> Result<()> {
            if piece.is_empty() {
                return Ok(());
            }
            on_audio(&marker.push(piece)?)
        };
        let report = self.generate_unmarked(text, opts, progress, &mut |piece| {
            marked(stretch.process(piece)?)
        })?;
        marked(stretch.finish()?)?;
        Ok(report.at_speed(stretch.speed()))
    }

    /// [`TtsCore::generate_stream`] without the watermark.
    fn generate_unmarked(
        &self,
        text: &str,
        opts: &GenerateOptions,
        progress: &mut dyn FnMut(&Progress),
        on_audio: &mut dyn FnMut(&[f32]) -> Result<()>,
    ) -> Result<SpeechReport> {
        opts.validate()?;
        let conds = self.conds.as_ref().ok_or(PipelineError::NoConditionals)?;
        let plan = crate::plan::plan(text, opts.lexicon.as_deref(), |t| self.text_chunks(t, opts))?;
        let chunks = &plan.texts;
        let seed = opts.seed.unwrap_or_else(rand::random);
        let fade = (opts.crossfade_ms as usize * S3GEN_SR as usize) / 1000;
        let mut fader = Crossfader::new(fade);
        let mut timeline = Timeline::new(fade);
        let total = chunks.len();
        let mut report = SpeechReport {
            sentences: total,
            truncated: Vec::new(),
            captions: Vec::new(),
        };
        for (index, chunk) in chunks.iter().enumerate() {
            opts.check_cancelled()?;
            let before = plan.silence.get(index).copied().unwrap_or(0);
            push_silence(before, true, &mut fader, &mut timeline, on_audio)?;
            progress(&Progress::ChunkStarted {
                index,
                total,
                chars: chunk.chars().count(),
            });
            let sampling = if opts.greedy {
                Sampling::Greedy
            } else {
                Sampling::Seeded(seed.wrapping_add(index as u64))
            };
            // Each chunk's draws from its own seed, as a stream draws them.
            let mut draws = SeededDraws::new(seed.wrapping_add(index as u64));
            let out = self.synthesize(chunk, opts, conds, sampling, &mut draws, index, progress)?;
            if out.truncated {
                tracing::info!(
                    chunk = index,
                    tokens = out.raw_tokens.len(),
                    "the text chunk's speech was cut at max_new_tokens (no stop token drawn)"
                );
                report
                    .truncated
                    .push(Truncation::new(index, chunk, self.token_limit(opts)));
            }
            let samples = out.wav.len();
            let after = plan.silence.get(index + 1).copied().unwrap_or(0);
            let more_follows = index + 1 < total || after > 0;
            let mut timing = timeline.sentence(index, chunk, samples, more_follows);
            if let Some(positions) = out.text_positions {
                self.chunk_alignment(chunk, self.language(opts)?, positions)?
                    .time_words(&mut timing);
            }
            report.captions.push(timing);
            let ready = fader.push(out.wav);
            if !ready.is_empty() {
                on_audio(&ready)?;
            }
            progress(&Progress::ChunkFinished {
                index,
                total,
                samples,
            });
        }
        let trailing = plan.silence.get(total).copied().unwrap_or(0);
        push_silence(trailing, false, &mut fader, &mut timeline, on_audio)?;
        let rest = fader.finish();
        if !rest.is_empty() {
            on_audio(&rest)?;
        }
        Ok(report)
    }

    /// The alignment of a text chunk for timing its words: `positions` from
    /// [`ChunkOutput::text_positions`] (or the stream's), the words of `text`'s text tokens.
    pub(crate) fn chunk_alignment(
        &self,
        text: &str,
        language: Option<Language>,
        positions: Vec<usize>,
    ) -> Result<ChunkAlignment> {
        let ids = self.text.text_tokens(text, language)?;
        Ok(ChunkAlignment {
            token_words: text_token_words(&self.text, &ids, text),
            positions,
        })
    }

    /// [`TtsCore::generate_stream`] collected, then watermarked.
    pub(crate) fn generate(
        &self,
        text: &str,
        opts: &GenerateOptions,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<(Audio, SpeechReport)> {
        let mut wav = Vec::new();
        let mut report = self.generate_unmarked(text, opts, progress, &mut |s| {
            wav.extend_from_slice(s);
            Ok(())
        })?;
        if let Some(speed) = opts.stretch_speed() {
            // the whole output at once: the same samples as generate_stream's stretcher gives
            wav = chatterbox_dsp::time_stretch(&wav, S3GEN_SR, speed)?;
            report = report.at_speed(speed);
        }
        self.watermark.apply(&mut wav, S3GEN_SR)?;
        Ok((Audio::new(wav, S3GEN_SR), report))
    }
}
