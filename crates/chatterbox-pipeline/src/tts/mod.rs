//! The text-to-speech models: `ChatterboxTTS` (chatterbox/tts.py), `ChatterboxMultilingualTTS`
//! (chatterbox/mtl_tts.py) and `ChatterboxTurboTTS` (chatterbox/tts_turbo.py), upstream 5de7a54.
mod batch;
mod core;
mod schedule;
mod stream;

pub use self::core::{
    drop_invalid_tokens, ChunkOutput, SpeechReport, MIN_REF_SECS, SPEECH_EOS, SPEECH_SOS,
    SPEECH_VOCAB_SIZE, TURBO_MIN_REF_SECS, TURBO_TARGET_LUFS,
};

pub use self::batch::{BatchOutput, BatchTimings, SpeechBatch, StreamId, CHUNKS_PER_CALL};
pub use self::schedule::{Pace, FIRST_AUDIO_BUDGET};
pub use self::stream::{AudioChunk, SpeechStream, Truncation};

pub(crate) use self::core::TtsCore;
use crate::checkpoint::{MultilingualT3, Variant};
use crate::conditionals::Conditionals;
use crate::config::ChatterboxConfig;
use crate::draws::Draws;
use crate::options::GenerateOptions;
use crate::progress::Progress;
use crate::s3gen::{S3Gen, S3GEN_SR};
use crate::voice::VoiceClip;
use crate::watermark::Watermarker;
use crate::Result;
use candle_core::{DType, Device};
use chatterbox_dsp::Audio;
use chatterbox_speaker::VoiceEncoder;
use chatterbox_t3::{QuantizeReport, Sampling, WeightFormat, T3};
use std::path::Path;
use std::sync::Arc;

/// The methods every text-to-speech model has.
macro_rules! tts_methods {
    ($ty:ident) => {
        impl $ty {
            /// Sample rate of the output (24 kHz).
            pub const SAMPLE_RATE: u32 = S3GEN_SR;

            /// Which model this is.
            pub fn variant(&self) -> Variant {
                self.core.variant
            }

            /// The generation defaults of this model (the reference's `generate` defaults).
            pub fn default_options(&self) -> GenerateOptions {
                GenerateOptions::for_variant(self.core.variant)
            }

            /// Stores T3's backbone projections in `format` (see [`WeightFormat`]: q8 and q4
            /// are 8- and 4-bit blocks for a faster CPU decode, bf16 halves them, f32 leaves
            /// the weights exactly as loaded). CPU only for the non-exact formats, on a model
            /// loaded in f32; the flow, HiFT and the speaker encoders are unchanged. Call it
            /// once, after loading.
            pub fn quantize_t3(&mut self, format: WeightFormat) -> Result<QuantizeReport> {
                Ok(self.core.t3.quantize(format)?)
            }

            /// [`Self::quantize_t3`] as a builder.
            pub fn with_t3_format(mut self, format: WeightFormat) -> Result<Self> {
                self.quantize_t3(format)?;
                Ok(self)
            }

            /// The format of T3's backbone projections.
            pub fn t3_format(&self) -> WeightFormat {
                self.core.t3.weight_format()
            }

            /// `prepare_conditionals(wav_fpath, exaggeration)`: decodes a reference clip (WAV,
            /// FLAC, MP3, Ogg) and makes it the voice of the following generations.
            pub fn prepare_conditionals(
                &mut self,
                path: impl AsRef<Path>,
                exaggeration: f32,
            ) -> Result<()> {
                let audio = chatterbox_dsp::audio::load(path)?;
                self.prepare_conditionals_from_audio(&audio, exaggeration)
            }

            /// [`Self::prepare_conditionals`] from decoded audio at any sample rate.
            pub fn prepare_conditionals_from_audio(
                &mut self,
                audio: &Audio,
                exaggeration: f32,
            ) -> Result<()> {
                self.core.conds = Some(self.conditionals_from_audio(audio, exaggeration)?);
                Ok(())
            }

            /// The voice of a reference clip (decoded audio at any sample rate), analysed as
            /// [`Self::prepare_conditionals_from_audio`] analyses it, without making it the
            /// model's voice: the current voice stays as it is, so this takes `&self` and may
            /// run while streams or a [`SpeechBatch`] borrow the model. Pass the result to
            /// [`Self::set_conditionals`], [`SpeechBatch::add`] or [`Conditionals::save`].
            pub fn conditionals_from_audio(
                &self,
                audio: &Audio,
                exaggeration: f32,
            ) -> Result<Conditionals> {
                self.core.conditionals_from_audio(audio, exaggeration)
            }

            /// [`Self::conditionals_from_audio`] from the clip at 24 kHz and its 16 kHz copy
            /// as given (no resampling, no loudness normalisation), as
            /// [`Self::prepare_conditionals_from_clip`] analyses it.
            pub fn conditionals_from_clip(
                &self,
                clip: &VoiceClip,
                exaggeration: f32,
            ) -> Result<Conditionals> {
                self.core.conditionals_from_clip(clip, exaggeration)
            }

            /// [`Self::prepare_conditionals`] from the clip at 24 kHz and its 16 kHz copy as
            /// given (no resampling, no loudness normalisation): for exact comparisons.
            pub fn prepare_conditionals_from_clip(
                &mut self,
                clip: &VoiceClip,
                exaggeration: f32,
            ) -> Result<()> {
                self.core.conds = Some(self.conditionals_from_clip(clip, exaggeration)?);
                Ok(())
            }

            /// The current voice (the built-in `conds.pt` after loading, when shipped).
            pub fn conditionals(&self) -> Option<&Conditionals> {
                self.core.conds.as_ref()
            }

            /// Sets the voice (e.g. one loaded with [`Conditionals::load`]).
            pub fn set_conditionals(&mut self, conds: Conditionals) {
                self.core.conds = Some(conds);
            }

            /// Plugs in a watermarker applied to every output, as the reference applies Perth
            /// (e.g. [`crate::perth_watermarker`]); `None` turns it off. `from_hub` plugs Perth
            /// in, as the reference's `from_pretrained`; `from_dir` (offline, for tests and
            /// parity) plugs none in.
            pub fn with_watermarker(mut self, w: Option<Arc<dyn Watermarker>>) -> Self {
                self.core.watermark.set(w);
                self
            }

            /// `generate(text, ...)`: speech for `text` in the current voice, 24 kHz mono.
            /// Long text is split at sentence boundaries, spoken chunk by chunk and joined
            /// with a [`GenerateOptions::crossfade_ms`] crossfade. A chunk whose speech
            /// reaches [`GenerateOptions::max_new_tokens`] is cut there: see
            /// [`Self::generate_with_report`] to learn which.
            pub fn generate(&self, text: &str, opts: &GenerateOptions) -> Result<Audio> {
                Ok(self.core.generate(text, opts, &mut |_| {})?.0)
            }

            /// [`Self::generate`] reporting [`Progress`] events (tokens, chunks).
            pub fn generate_with_progress(
                &self,
                text: &str,
                opts: &GenerateOptions,
                progress: &mut dyn FnMut(&Progress),
            ) -> Result<Audio> {
                Ok(self.core.generate(text, opts, progress)?.0)
            }

            /// [`Self::generate_with_progress`], with a [`SpeechReport`] of the generation:
            /// the text chunks whose speech was cut at [`GenerateOptions::max_new_tokens`]
            /// (T3 never drew its stop token for them).
            pub fn generate_with_report(
                &self,
                text: &str,
                opts: &GenerateOptions,
                progress: &mut dyn FnMut(&Progress),
            ) -> Result<(Audio, SpeechReport)> {
                self.core.generate(text, opts, progress)
            }

            /// [`Self::generate`] streaming: `on_audio` receives the 24 kHz samples as they
            /// are final (one chunk at a time, less the crossfade held back), so memory stays
            /// flat over long texts. Each piece is watermarked with the audio before it as
            /// context (see [`crate::STREAM_CONTEXT_S`]).
            pub fn generate_stream(
                &self,
                text: &str,
                opts: &GenerateOptions,
                progress: &mut dyn FnMut(&Progress),
                on_audio: &mut dyn FnMut(&[f32]) -> Result<()>,
            ) -> Result<()> {
                self.core
                    .generate_stream(text, opts, progress, on_audio)
                    .map(|_| ())
            }

            /// [`Self::generate_stream`], returning a [`SpeechReport`] of the generation: the
            /// text chunks whose speech was cut at [`GenerateOptions::max_new_tokens`].
            pub fn generate_stream_with_report(
                &self,
                text: &str,
                opts: &GenerateOptions,
                progress: &mut dyn FnMut(&Progress),
                on_audio: &mut dyn FnMut(&[f32]) -> Result<()>,
            ) -> Result<SpeechReport> {
                self.core.generate_stream(text, opts, progress, on_audio)
            }

            /// `text` streamed token by token: an iterator of [`AudioChunk`]s, the first one
            /// ready after the schedule's first chunk of speech tokens
            /// ([`GenerateOptions::stream`]) instead of after the whole sentence. The same
            /// seed draws the same tokens and CFM noise as [`Self::generate`]; the audio
            /// differs slightly at the chunk joins (see [`SpeechStream`]). Chunks are
            /// watermarked as `generate_stream`'s pieces are. Dropping the iterator stops the
            /// generation.
            pub fn stream(&self, text: &str, opts: &GenerateOptions) -> Result<SpeechStream<'_>> {
                SpeechStream::new(&self.core, text, opts)
            }

            /// Many texts spoken at once, each in its own voice: their streams share one
            /// batched T3 decoder of `opts.slots` requests (see [`SpeechBatch`]; it
            /// preallocates [`chatterbox_t3::BatchDecoder::memory_bytes`] of KV cache). Each
            /// stream's chunks are those [`Self::stream`] gives with the same voice, text
            /// and options.
            pub fn batch(&self, opts: chatterbox_t3::BatchOptions) -> Result<SpeechBatch<'_>> {
                SpeechBatch::new(&self.core, opts)
            }

            /// Speaks every `(voice, text, options)` of `requests` through one
            /// [`batch`](Self::batch) of `opts.slots` slots (the rest wait for a free one) and
            /// returns each request's 24 kHz audio, or its error, in order: the audio
            /// [`Self::stream`] gives for it, joined (up to the float rounding of shared flow
            /// calls). A bad request fails alone.
            pub fn generate_many(
                &self,
                requests: &[(&Conditionals, &str, &GenerateOptions)],
                opts: chatterbox_t3::BatchOptions,
            ) -> Result<Vec<Result<Vec<f32>>>> {
                let mut batch = self.batch(opts)?;
                let ids: Vec<Result<crate::tts::StreamId>> = requests
                    .iter()
                    .map(|(conds, text, o)| batch.add(conds, text, o))
                    .collect();
                let mut done: std::collections::HashMap<_, _> =
                    batch.finish_all().into_iter().collect();
                Ok(ids
                    .into_iter()
                    .map(|id| {
                        let id = id?;
                        done.remove(&id).unwrap_or_else(|| {
                            Err(crate::PipelineError::InvalidInput {
                                what: "batch",
                                reason: format!("stream {id} has no result"),
                            })
                        })
                    })
                    .collect())
            }

            /// One generation without chunking, with T3's sampling and S3Gen's draws given
            /// (parity checks, benchmarks): tokens, mel and waveform of `text`.
            pub fn synthesize(
                &self,
                text: &str,
                opts: &GenerateOptions,
                sampling: Sampling,
                draws: &mut dyn Draws,
            ) -> Result<ChunkOutput> {
                let conds = self
                    .core
                    .conds
                    .as_ref()
                    .ok_or(crate::PipelineError::NoConditionals)?;
                self.core
                    .synthesize(text, opts, conds, sampling, draws, 0, &mut |_| {})
            }

            /// The variant's post-processing of T3's tokens before S3Gen.
            pub fn post_process_tokens(&self, raw: &[u32]) -> Vec<u32> {
                self.core.post_process(raw)
            }

            /// T3.
            pub fn t3(&self) -> &T3 {
                &self.core.t3
            }

            /// S3Gen.
            pub fn s3gen(&self) -> &S3Gen {
                &self.core.s3gen
            }

            /// The VoiceEncoder.
            pub fn voice_encoder(&self) -> &VoiceEncoder {
                &self.core.ve
            }

            /// The text front end (`punc_norm` and the tokenizer).
            pub fn text_frontend(&self) -> &chatterbox_text::TextFrontend {
                &self.core.text
            }
        }
    };
}

/// `ChatterboxTTS`: the English model (`t3_cfg.safetensors`, Llama T3 with CFG).
#[derive(Debug, Clone)]
pub struct ChatterboxTts {
    core: TtsCore,
}

impl ChatterboxTts {
    /// `from_local(ckpt_dir, device)`: `ve.safetensors`, `t3_cfg.safetensors`,
    /// `s3gen.safetensors`, `tokenizer.json` and `conds.pt` when present (hyper-parameters
    /// from [`CONFIG_FILE`](crate::CONFIG_FILE) when present, else the released ones). `dtype` is T3's
    /// and the flow estimator's (f32, or bf16/f16 on GPUs); the rest runs in f32.
    pub fn from_dir(dir: impl AsRef<Path>, device: &Device, dtype: DType) -> Result<Self> {
        let cfg = ChatterboxConfig::from_dir_or(dir.as_ref(), ChatterboxConfig::english())?;
        Self::from_dir_with_config(dir, &cfg, device, dtype)
    }

    /// [`ChatterboxTts::from_dir`] with explicit hyper-parameters (tests, resized models).
    pub fn from_dir_with_config(
        dir: impl AsRef<Path>,
        cfg: &ChatterboxConfig,
        device: &Device,
        dtype: DType,
    ) -> Result<Self> {
        let core = TtsCore::load(
            dir.as_ref(),
            Variant::English,
            &MultilingualT3::V2,
            cfg,
            device,
            dtype,
        )?;
        Ok(Self { core })
    }

    /// `from_pretrained(device)`: downloads `ResembleAI/chatterbox` (cached) and loads it,
    /// with Perth's watermark on its output as the reference's (weights from
    /// [`crate::find_perth_checkpoint`]; `with_watermarker(None)` turns it off).
    #[cfg(feature = "hub")]
    pub fn from_hub(device: &Device, dtype: DType) -> Result<Self> {
        let dir = crate::hub::download_checkpoint(Variant::English, &MultilingualT3::V2)?;
        let perth = crate::watermark::default_perth(device)?;
        Ok(Self::from_dir(dir, device, dtype)?.with_watermarker(Some(perth)))
    }
}
tts_methods!(ChatterboxTts);

/// `ChatterboxMultilingualTTS`: 23 languages (`t3_mtl23ls_v2.safetensors` by default, v3 by
/// option; `ve.pt`, `s3gen.pt`).
#[derive(Debug, Clone)]
pub struct ChatterboxMultilingualTts {
    core: TtsCore,
}

impl ChatterboxMultilingualTts {
    /// Sets the Japanese kanji → hiragana reader (pykakasi's role in the reference; the
    /// GPL-3.0-or-later crate `chatterbox-kakasi` provides one). Without one, Japanese kanji
    /// reach the tokenizer as they are, as in the reference without pykakasi.
    pub fn set_kanji_reader(
        &mut self,
        reader: Option<std::sync::Arc<dyn chatterbox_text::KanjiReader>>,
    ) {
        self.core.text.set_kanji_reader(reader);
    }

    /// `from_local(ckpt_dir, device)` with the v2 T3.
    pub fn from_dir(dir: impl AsRef<Path>, device: &Device, dtype: DType) -> Result<Self> {
        Self::from_dir_with_model(dir, &MultilingualT3::V2, device, dtype)
    }

    /// `from_local(ckpt_dir, device, t3_model)`.
    pub fn from_dir_with_model(
        dir: impl AsRef<Path>,
        t3_model: &MultilingualT3,
        device: &Device,
        dtype: DType,
    ) -> Result<Self> {
        let cfg = ChatterboxConfig::from_dir_or(dir.as_ref(), ChatterboxConfig::multilingual())?;
        Self::from_dir_with_config(dir, t3_model, &cfg, device, dtype)
    }

    /// [`ChatterboxMultilingualTts::from_dir_with_model`] with explicit hyper-parameters.
    pub fn from_dir_with_config(
        dir: impl AsRef<Path>,
        t3_model: &MultilingualT3,
        cfg: &ChatterboxConfig,
        device: &Device,
        dtype: DType,
    ) -> Result<Self> {
        let core = TtsCore::load(
            dir.as_ref(),
            Variant::Multilingual,
            t3_model,
            cfg,
            device,
            dtype,
        )?;
        Ok(Self { core })
    }

    /// `from_pretrained(device, t3_model)`: downloads `ResembleAI/chatterbox`'s multilingual
    /// files (cached) and loads them, watermarked with Perth as the reference's.
    #[cfg(feature = "hub")]
    pub fn from_hub(t3_model: &MultilingualT3, device: &Device, dtype: DType) -> Result<Self> {
        let dir = crate::hub::download_checkpoint(Variant::Multilingual, t3_model)?;
        let perth = crate::watermark::default_perth(device)?;
        Ok(Self::from_dir_with_model(dir, t3_model, device, dtype)?.with_watermarker(Some(perth)))
    }

    /// `get_supported_languages()`: `(id, name)` pairs.
    pub fn supported_languages() -> Vec<(&'static str, &'static str)> {
        chatterbox_text::Language::ALL
            .iter()
            .map(|l| (l.id(), l.name()))
            .collect()
    }
}
tts_methods!(ChatterboxMultilingualTts);

/// `ChatterboxTurboTTS`: Turbo (GPT-2 medium T3) or Nano (`nano=True`, GPT-2 small), with
/// meanflow S3Gen (`s3gen_meanflow.safetensors`).
#[derive(Debug, Clone)]
pub struct ChatterboxTurboTts {
    core: TtsCore,
}

impl ChatterboxTurboTts {
    /// `from_local(ckpt_dir, device, nano)`: `ve.safetensors`, `t3_turbo_v1.safetensors`
    /// (`t3_nano_v1.safetensors`), `s3gen_meanflow.safetensors`, the GPT-2 tokenizer files
    /// and `conds.pt` when present.
    pub fn from_dir(
        dir: impl AsRef<Path>,
        nano: bool,
        device: &Device,
        dtype: DType,
    ) -> Result<Self> {
        let default = if nano {
            ChatterboxConfig::nano()
        } else {
            ChatterboxConfig::turbo()
        };
        let cfg = ChatterboxConfig::from_dir_or(dir.as_ref(), default)?;
        Self::from_dir_with_config(dir, nano, &cfg, device, dtype)
    }

    /// [`ChatterboxTurboTts::from_dir`] with explicit hyper-parameters.
    pub fn from_dir_with_config(
        dir: impl AsRef<Path>,
        nano: bool,
        cfg: &ChatterboxConfig,
        device: &Device,
        dtype: DType,
    ) -> Result<Self> {
        let variant = if nano { Variant::Nano } else { Variant::Turbo };
        let core = TtsCore::load(
            dir.as_ref(),
            variant,
            &MultilingualT3::V2,
            cfg,
            device,
            dtype,
        )?;
        Ok(Self { core })
    }

    /// `from_pretrained(device, nano)`: downloads `ResembleAI/chatterbox-turbo` (or
    /// `-nano`, cached) and loads it, watermarked with Perth as the reference's.
    #[cfg(feature = "hub")]
    pub fn from_hub(nano: bool, device: &Device, dtype: DType) -> Result<Self> {
        let variant = if nano { Variant::Nano } else { Variant::Turbo };
        let dir = crate::hub::download_checkpoint(variant, &MultilingualT3::V2)?;
        let perth = crate::watermark::default_perth(device)?;
        Ok(Self::from_dir(dir, nano, device, dtype)?.with_watermarker(Some(perth)))
    }

    /// `prepare_conditionals(..., norm_loudness)`: whether reference clips are normalised to
    /// -27 LUFS first (default `true`).
    pub fn set_norm_loudness(&mut self, on: bool) {
        self.core.norm_loudness = on;
    }
}
tts_methods!(ChatterboxTurboTts);
