//! The post-processing hook where the reference applies Resemble AI's Perth watermark
//! (`perth.PerthImplicitWatermarker().apply_watermark(wav, sample_rate)` at the end of every
//! `generate` in tts.py, mtl_tts.py, tts_turbo.py and vc.py, upstream 5de7a54), with Perth
//! itself from chatterbox-watermark ([`perth_watermarker`]) plugged in by `with_watermarker`.
//!
//! `generate` watermarks the whole output, as the reference does. Streamed audio (`stream`,
//! `generate_stream`) cannot wait for the whole output: each piece is watermarked together with
//! the [`STREAM_CONTEXT_S`] of audio before it, and only the piece is kept
//! ([`StreamWatermarker`]). Perth's encoder sees about ±0.21 s around each sample, so a piece
//! differs from the whole-output watermark only near its end. `examples/watermark_stream.rs`
//! measures it with the real weights; on the 3.5 s speech clip of chatterbox-dsp, in the
//! English stream's pieces (0.48 s, 1.44 s, then the rest) Resemble's detector scores the
//! joined stream 1.000, the difference to the whole-clip watermark is 30.4 dB below the
//! watermark itself, and no join steps further than the clip does elsewhere (0.010 vs 0.016);
//! in 0.2 s pieces the score is still 1.000 (18.8 dB; joins step up to 0.051).
use crate::{PipelineError, Result};
use candle_core::Device;
use chatterbox_watermark::PerthWatermarker;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Marks generated audio before it is returned (Perth, or any other scheme).
pub trait Watermarker: Send + Sync + std::fmt::Debug {
    /// Watermarks `wav` (mono, `sample_rate` Hz) in place; it may come back a little shorter
    /// (Perth rounds to whole STFT hops, as the reference does).
    fn apply(&self, wav: &mut Vec<f32>, sample_rate: u32) -> Result<()>;
}

impl Watermarker for PerthWatermarker {
    fn apply(&self, wav: &mut Vec<f32>, sample_rate: u32) -> Result<()> {
        if wav.iter().all(|&s| s == 0.0) {
            return Ok(()); // silence stays silence (Perth's mask is empty)
        }
        // Shorter than Perth's STFT can take: padded with silence, then cut back.
        let len = wav.len();
        let min = self.min_signal_len(sample_rate);
        let mut input = std::mem::take(wav);
        if len < min {
            input.resize(min, 0.0);
        }
        let mut out = self.apply_watermark(&input, sample_rate)?;
        if len < min {
            out.truncate(len);
        }
        *wav = out;
        Ok(())
    }
}

/// Seconds of earlier audio each streamed piece is watermarked with.
pub const STREAM_CONTEXT_S: f32 = 0.5;

/// An optional watermarker, applied to each complete output.
#[derive(Debug, Clone, Default)]
pub(crate) struct WatermarkHook(Option<Arc<dyn Watermarker>>);

impl WatermarkHook {
    pub(crate) fn set(&mut self, w: Option<Arc<dyn Watermarker>>) {
        self.0 = w;
    }

    pub(crate) fn apply(&self, wav: &mut Vec<f32>, sample_rate: u32) -> Result<()> {
        match &self.0 {
            Some(w) => w.apply(wav, sample_rate),
            None => Ok(()),
        }
    }

    /// A stream marked by this hook's watermarker.
    pub(crate) fn stream(&self, sample_rate: u32) -> StreamWatermarker {
        StreamWatermarker::new(self.0.clone(), sample_rate)
    }
}

/// Watermarks a stream piece by piece: each piece together with the [`STREAM_CONTEXT_S`] of
/// unmarked audio before it, keeping exactly the piece's samples (what `stream` and
/// `generate_stream` do; for callers that stream audio of their own).
#[derive(Debug)]
pub struct StreamWatermarker {
    watermarker: Option<Arc<dyn Watermarker>>,
    sample_rate: u32,
    /// The last [`STREAM_CONTEXT_S`] of unmarked audio.
    context: Vec<f32>,
}

impl StreamWatermarker {
    /// A stream at `sample_rate` marked by `watermarker` (`None`: pieces pass unchanged).
    pub fn new(watermarker: Option<Arc<dyn Watermarker>>, sample_rate: u32) -> Self {
        Self {
            watermarker,
            sample_rate,
            context: Vec::new(),
        }
    }

    /// The next piece of the stream, watermarked; as long as `piece`.
    pub fn push(&mut self, piece: Vec<f32>) -> Result<Vec<f32>> {
        let Some(w) = &self.watermarker else {
            return Ok(piece);
        };
        if piece.is_empty() {
            return Ok(piece);
        }
        let ctx = self.context.len();
        let mut window = Vec::with_capacity(ctx + piece.len() + 2 * HOP_PAD);
        window.extend_from_slice(&self.context);
        window.extend_from_slice(&piece);
        // Silence after the piece so that rounding to whole hops never cuts into it.
        window.resize(window.len() + 2 * HOP_PAD, 0.0);
        w.apply(&mut window, self.sample_rate)?;
        let keep = (self.sample_rate as f32 * STREAM_CONTEXT_S) as usize;
        self.context.extend_from_slice(&piece);
        let drop = self.context.len().saturating_sub(keep);
        self.context.drain(..drop);
        let Some(marked) = window.get(ctx..ctx + piece.len()) else {
            return Err(PipelineError::Watermark(format!(
                "the watermarker returned {} samples for {}",
                window.len(),
                ctx + piece.len()
            )));
        };
        Ok(marked.to_vec())
    }
}

/// Samples of silence that cover Perth's rounding to whole hops (320 at 32 kHz is 240 at
/// 24 kHz; 480 covers rates down to 16 kHz).
const HOP_PAD: usize = 480;

/// Perth's shipped model (`perth_net_250000.pth.tar`, or a safetensors conversion) loaded
/// from `path` onto `device`, ready for `with_watermarker`.
pub fn perth_watermarker(path: &Path, device: &Device) -> Result<Arc<dyn Watermarker>> {
    let wm = PerthWatermarker::load(path, device).map_err(|e| {
        PipelineError::Watermark(format!(
            "cannot load the Perth watermark weights {}: {e}",
            path.display()
        ))
    })?;
    Ok(Arc::new(wm))
}

/// Perth as `from_hub` plugs it in: [`find_perth_checkpoint`]`(None)` on `device`.
#[cfg(feature = "hub")]
pub(crate) fn default_perth(device: &Device) -> Result<Arc<dyn Watermarker>> {
    perth_watermarker(&find_perth_checkpoint(None)?, device)
}

/// Where the Perth weights are looked for and, with the `hub` feature, downloaded to:
/// `$HF_HOME/hub/resemble-perth-1.0.1/perth_net_250000.pth.tar` (`HF_HOME` defaults to
/// `~/.cache/huggingface`), beside the hub's model files.
pub fn perth_cache_path() -> Option<PathBuf> {
    let home = std::env::var_os("HF_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|c| PathBuf::from(c).join("huggingface"))
        })
        .or_else(|| {
            std::env::var_os("HOME")
                .or_else(|| std::env::var_os("USERPROFILE"))
                .map(|h| PathBuf::from(h).join(".cache").join("huggingface"))
        })?;
    Some(
        home.join("hub")
            .join("resemble-perth-1.0.1")
            .join(chatterbox_watermark::PERTH_CHECKPOINT_FILE),
    )
}

/// The Perth checkpoint to use: `explicit` when given (it must exist), else the cached copy
/// ([`perth_cache_path`]); with the `hub` feature a missing cached copy is downloaded once from
/// the Python package index's resemble-perth wheel. Without it the error names both ways out.
pub fn find_perth_checkpoint(explicit: Option<&Path>) -> Result<PathBuf> {
    let missing = |why: String| PipelineError::WatermarkWeights { why };
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(missing(format!("{} does not exist", p.display())))
        };
    }
    let cached = perth_cache_path();
    if let Some(p) = cached.as_ref().filter(|p| p.is_file()) {
        return Ok(p.clone());
    }
    #[cfg(feature = "hub")]
    if let Some(p) = &cached {
        return crate::perth_download::download(p).map(|()| p.clone());
    }
    Err(missing(match cached {
        Some(p) => format!(
            "{} is not there and this build does not download (no `hub` feature)",
            p.display()
        ),
        None => "no cache directory (set HF_HOME)".into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adds a fixed tone: a stand-in whose effect is visible, shortening by up to one hop.
    #[derive(Debug)]
    struct Tone;

    impl Watermarker for Tone {
        fn apply(&self, wav: &mut Vec<f32>, _sr: u32) -> Result<()> {
            for (i, s) in wav.iter_mut().enumerate() {
                *s += 0.01 * (i as f32 * 0.3).sin();
            }
            let whole = wav.len() / 240 * 240;
            wav.truncate(whole);
            Ok(())
        }
    }

    #[test]
    fn stream_pieces_keep_their_length_and_see_their_context() {
        let mut m = StreamWatermarker::new(Some(Arc::new(Tone)), 24_000);
        let x: Vec<f32> = (0..30_000).map(|i| (i as f32 * 0.01).sin() * 0.3).collect();
        let mut out = Vec::new();
        for piece in x.chunks(7_001) {
            out.extend(m.push(piece.to_vec()).unwrap());
        }
        assert_eq!(out.len(), x.len());
        // each piece's tone is at its position in a window that starts STREAM_CONTEXT_S (or
        // less, at the start) before it
        let ctx = 12_000;
        for (i, (&o, &s)) in out.iter().zip(&x).enumerate() {
            let start = (i / 7_001 * 7_001).saturating_sub(ctx);
            let want = s + 0.01 * ((i - start) as f32 * 0.3).sin();
            assert!((o - want).abs() < 1e-6, "{i}: {o} vs {want}");
        }
        // no watermarker: unchanged
        let plain = StreamWatermarker::new(None, 24_000)
            .push(x.clone())
            .unwrap();
        assert_eq!(plain, x);
    }

    #[test]
    fn a_missing_explicit_checkpoint_names_the_path() {
        let e = find_perth_checkpoint(Some(Path::new("/nonexistent/perth.pth.tar")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/perth.pth.tar"), "{e}");
        assert!(e.contains("--no-watermark"), "{e}");
    }
}
