//! The post-processing hook where the reference applies Resemble AI's Perth watermark
//! (`perth.PerthImplicitWatermarker().apply_watermark(wav, sample_rate)` at the end of every
//! `generate`). This crate does not ship a watermarker: output is returned unmarked unless one
//! is plugged in with `with_watermarker`.
use crate::Result;
use std::sync::Arc;

/// Marks generated audio before it is returned (a port of Perth, or any other scheme).
pub trait Watermarker: Send + Sync + std::fmt::Debug {
    /// Watermarks `wav` (mono, `sample_rate` Hz) in place.
    fn apply(&self, wav: &mut Vec<f32>, sample_rate: u32) -> Result<()>;
}

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
}
