//! `ChatterboxVC` (chatterbox/vc.py, upstream 5de7a54): voice conversion, the speech tokens of a
//! source clip re-synthesised by S3Gen in a target voice.
use crate::checkpoint::{optional, require, var_builder, CONDS_FILE};
use crate::conditionals::Conditionals;
use crate::config::S3GenConfig;
use crate::draws::{Draws, SeededDraws};
use crate::error::loading;
use crate::s3gen::{S3Gen, S3GenOptions, S3GenRef, DEC_COND_LEN, S3GEN_SR, S3_SR};
use crate::vc_chunks::{self, Joiner, VcProgress};
use crate::voice::audio_24k;
use crate::watermark::{WatermarkHook, Watermarker};
use crate::{PipelineError, Result};
use candle_core::{DType, Device};
use chatterbox_dsp::Audio;
use std::path::Path;
use std::sync::Arc;

/// Options of [`ChatterboxVc::generate`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VcOptions {
    /// Seed of S3Gen's random draws (CFM noise, vocoder phases and noise). Default: `0`.
    pub seed: u64,
    /// CFM Euler steps. Default: `None` (10).
    pub n_cfm_timesteps: Option<usize>,
    /// Longest source converted in one pass, in milliseconds. A longer source is cut into
    /// overlapping windows of at most this length, each converted (tokenizer, flow, vocoder)
    /// with the same target voice, and joined with a [`CROSSFADE_MS`](crate::CROSSFADE_MS)
    /// linear crossfade, so time grows linearly with its length and memory stays at one window.
    /// A source up to this length takes the reference's single pass; `0` always does (its time
    /// grows with the square of the length). Default: `20_000` (20 s).
    pub window_ms: u32,
    /// Overlap of consecutive windows, in milliseconds: each join sits at the quietest 40 ms
    /// token boundary of the overlap's middle half, so both windows have context there. At
    /// least 160 and at most `window_ms / 2`. Default: `2_000` (2 s).
    pub overlap_ms: u32,
}

impl Default for VcOptions {
    fn default() -> Self {
        Self {
            seed: 0,
            n_cfm_timesteps: None,
            window_ms: 20_000,
            overlap_ms: 2_000,
        }
    }
}

/// Voice conversion: S3Gen alone (`s3gen.safetensors`), with the checkpoint's built-in voice
/// (`conds.pt`, when present) as the default target.
#[derive(Debug, Clone)]
pub struct ChatterboxVc {
    s3gen: S3Gen,
    target: Option<S3GenRef>,
    watermark: WatermarkHook,
}

impl VcOptions {
    /// Sets the seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Sets the window and overlap, in milliseconds (`window_ms = 0`: one pass).
    pub fn with_window(mut self, window_ms: u32, overlap_ms: u32) -> Self {
        self.window_ms = window_ms;
        self.overlap_ms = overlap_ms;
        self
    }
}

impl ChatterboxVc {
    /// Sample rate of the output.
    pub const SAMPLE_RATE: u32 = S3GEN_SR;

    /// Loads `s3gen.safetensors` (and `conds.pt` when present) from a checkpoint directory in
    /// the hub layout. `dtype` is the flow estimator's; everything else runs in f32.
    pub fn from_dir(dir: impl AsRef<Path>, device: &Device, dtype: DType) -> Result<Self> {
        let dir = dir.as_ref();
        let cfg = crate::config::ChatterboxConfig::from_dir_or(
            dir,
            crate::config::ChatterboxConfig::english(),
        )?;
        Self::from_dir_with_config(dir, &cfg.s3gen, device, dtype)
    }

    /// [`ChatterboxVc::from_dir`] with explicit hyper-parameters (tests, resized models).
    pub fn from_dir_with_config(
        dir: impl AsRef<Path>,
        cfg: &S3GenConfig,
        device: &Device,
        dtype: DType,
    ) -> Result<Self> {
        let dir = dir.as_ref();
        let path = require(
            dir,
            "s3gen.safetensors",
            "S3Gen weights",
            "voice conversion",
        )?;
        crate::kernels::prepare(device);
        let vb = var_builder(&path, DType::F32, device)?;
        let s3gen = S3Gen::new(cfg, vb, dtype).map_err(loading(&path))?;
        let target = match optional(dir, CONDS_FILE) {
            Some(p) => Some(Conditionals::load(&p, device)?.gen),
            None => None,
        };
        Ok(Self::new(s3gen, target))
    }

    /// `from_pretrained(device)`: downloads `s3gen.safetensors` and `conds.pt` of
    /// `ResembleAI/chatterbox` (cached) and loads them, with Perth's watermark on its output as
    /// the reference's (weights from [`crate::find_perth_checkpoint`]; `with_watermarker(None)`
    /// turns it off).
    #[cfg(feature = "hub")]
    pub fn from_hub(device: &Device, dtype: DType) -> Result<Self> {
        let dir = crate::hub::download_vc_checkpoint()?;
        let perth = crate::watermark::default_perth(device)?;
        Ok(Self::from_dir(dir, device, dtype)?.with_watermarker(Some(perth)))
    }

    /// Wraps a loaded S3Gen and an optional default target voice.
    pub fn new(s3gen: S3Gen, target: Option<S3GenRef>) -> Self {
        Self {
            s3gen,
            target,
            watermark: WatermarkHook::default(),
        }
    }

    /// Plugs in a watermarker applied to every output, as the reference applies Perth (e.g.
    /// [`crate::perth_watermarker`]); `None` turns it off.
    pub fn with_watermarker(mut self, w: Option<Arc<dyn Watermarker>>) -> Self {
        self.watermark.set(w);
        self
    }

    /// S3Gen.
    pub fn s3gen(&self) -> &S3Gen {
        &self.s3gen
    }

    /// The current target voice.
    pub fn target(&self) -> Option<&S3GenRef> {
        self.target.as_ref()
    }

    /// `set_target_voice`: the first 10 s of `audio` (at 24 kHz) become the target voice.
    pub fn set_target_voice(&mut self, audio: &Audio) -> Result<()> {
        let wav = audio_24k(audio)?;
        self.set_target_voice_24k(&wav)
    }

    /// `set_target_voice(wav_fpath)`: decodes an audio file (WAV, FLAC, MP3, Ogg) and makes its
    /// first 10 s the target voice.
    pub fn set_target_voice_file(&mut self, path: impl AsRef<Path>) -> Result<()> {
        self.set_target_voice(&chatterbox_dsp::audio::load(path)?)
    }

    /// [`ChatterboxVc::generate`] of an audio file.
    pub fn generate_file(&self, source: impl AsRef<Path>, opts: &VcOptions) -> Result<Audio> {
        self.generate(&chatterbox_dsp::audio::load(source)?, opts)
    }

    /// [`ChatterboxVc::set_target_voice`] from 24 kHz samples.
    pub fn set_target_voice_24k(&mut self, wav_24k: &[f32]) -> Result<()> {
        crate::voice::check_clip(wav_24k)?;
        let seconds = wav_24k.len() as f64 / f64::from(S3GEN_SR);
        if seconds < crate::tts::MIN_REF_SECS {
            return Err(PipelineError::ReferenceTooShort {
                seconds,
                min_seconds: crate::tts::MIN_REF_SECS,
                model: "voice conversion",
            });
        }
        let n = wav_24k.len().min(DEC_COND_LEN);
        self.target = Some(self.s3gen.embed_ref(&wav_24k[..n])?);
        Ok(())
    }

    /// Converts `source` (any rate; loaded at 16 kHz as `librosa.load(sr=16000)`) to the
    /// target voice: 24 kHz audio, 960 samples per 40 ms speech token of the source. Sources
    /// longer than [`VcOptions::window_ms`] are converted in overlapping windows.
    pub fn generate(&self, source: &Audio, opts: &VcOptions) -> Result<Audio> {
        self.generate_with_progress(source, opts, &mut |_| {})
    }

    /// [`ChatterboxVc::generate`] reporting [`VcProgress`] (windows converted).
    pub fn generate_with_progress(
        &self,
        source: &Audio,
        opts: &VcOptions,
        progress: &mut dyn FnMut(&VcProgress),
    ) -> Result<Audio> {
        let src = source.resampled(S3_SR)?.samples;
        let mut draws = SeededDraws::new(opts.seed);
        let mut wav = Vec::new();
        self.convert_16k(&src, opts, &mut draws, progress, &mut |s| {
            wav.extend_from_slice(s);
            Ok(())
        })?;
        self.watermark.apply(&mut wav, S3GEN_SR)?;
        Ok(Audio::new(wav, S3GEN_SR))
    }

    /// [`ChatterboxVc::generate`] streaming: `on_audio` receives the 24 kHz samples as they are
    /// final (a window at a time, less the crossfade held back), so memory stays flat over long
    /// sources. Each piece is watermarked with the audio before it as context (see
    /// [`crate::STREAM_CONTEXT_S`]).
    pub fn generate_stream(
        &self,
        source: &Audio,
        opts: &VcOptions,
        progress: &mut dyn FnMut(&VcProgress),
        on_audio: &mut dyn FnMut(&[f32]) -> Result<()>,
    ) -> Result<()> {
        let src = source.resampled(S3_SR)?.samples;
        let mut draws = SeededDraws::new(opts.seed);
        let mut marker = self.watermark.stream(S3GEN_SR);
        self.convert_16k(&src, opts, &mut draws, progress, &mut |piece| {
            let marked = marker.push(piece.to_vec())?;
            on_audio(&marked)
        })
    }

    /// The conversion of a 16 kHz clip with S3Gen's draws from `draws` (no watermark). Windows
    /// take their draws from `draws` one after the other.
    pub fn generate_16k(
        &self,
        source_16k: &[f32],
        opts: &VcOptions,
        draws: &mut dyn Draws,
    ) -> Result<Vec<f32>> {
        let mut wav = Vec::new();
        self.convert_16k(source_16k, opts, draws, &mut |_| {}, &mut |s| {
            wav.extend_from_slice(s);
            Ok(())
        })?;
        Ok(wav)
    }

    /// One pass over the whole clip (`vc.py`'s `generate`) when it fits a window, else window
    /// by window (see `vc_chunks`).
    fn convert_16k(
        &self,
        source_16k: &[f32],
        opts: &VcOptions,
        draws: &mut dyn Draws,
        progress: &mut dyn FnMut(&VcProgress),
        on_audio: &mut dyn FnMut(&[f32]) -> Result<()>,
    ) -> Result<()> {
        let target = self.target.as_ref().ok_or(PipelineError::NoConditionals)?;
        chatterbox_dsp::check_signal("source clip", source_16k)?;
        let n = vc_chunks::tokens_for(source_16k.len());
        let windows = match vc_chunks::window_tokens(opts.window_ms, opts.overlap_ms)? {
            Some((window, overlap)) if n > window => {
                let energy = vc_chunks::token_energy(source_16k);
                vc_chunks::plan(n, window, overlap, &energy)
            }
            _ => {
                progress(&VcProgress::new(0, 1));
                let wav = self.convert_once(source_16k, target, opts, draws)?;
                on_audio(&wav)?;
                progress(&VcProgress::new(1, 1));
                return Ok(());
            }
        };
        let total = windows.len();
        progress(&VcProgress::new(0, total));
        let mut joiner = Joiner::new(total);
        for (index, w) in windows.iter().enumerate() {
            let _span = tracing::debug_span!("vc_window", index, total).entered();
            let wav = self.convert_once(
                &source_16k[w.source(n, source_16k.len())],
                target,
                opts,
                draws,
            )?;
            let ready = joiner.push(index, w, &wav);
            if !ready.is_empty() {
                on_audio(&ready)?;
            }
            progress(&VcProgress::new(index + 1, total));
        }
        let rest = joiner.finish();
        if !rest.is_empty() {
            on_audio(&rest)?;
        }
        Ok(())
    }

    /// Tokenizer, flow and vocoder over one stretch of source.
    fn convert_once(
        &self,
        source_16k: &[f32],
        target: &S3GenRef,
        opts: &VcOptions,
        draws: &mut dyn Draws,
    ) -> Result<Vec<f32>> {
        let tokens = self.s3gen.tokenizer().forward(&[source_16k], S3_SR, None)?;
        let tokens = tokens.to_vecs()?.into_iter().next().unwrap_or_default();
        if tokens.is_empty() {
            return Err(PipelineError::InvalidInput {
                what: "source clip",
                reason: format!("{} samples give no speech token", source_16k.len()),
            });
        }
        let s3opts = S3GenOptions {
            n_cfm_timesteps: opts.n_cfm_timesteps,
        };
        let wav = self.s3gen.inference(&tokens, target, &s3opts, draws)?;
        Ok(wav.squeeze(0)?.to_vec1::<f32>()?)
    }
}
