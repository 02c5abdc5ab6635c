//! Port of perth/perth_net/perth_net_implicit/config.py (resemble-perth 1.0.1): `PerthConfig`,
//! the hyper-parameters of PerthNet and its audio processing, with the Python names. Only the
//! fields inference reads are kept; the training ones (`batch_size`, learning rates, loss) are
//! ignored when deserialising.
use crate::{Result, WatermarkError};
use chatterbox_dsp::with_setters;

/// `PerthConfig` (config.py). `Default` is the shipped `implicit` model's `hparams.yaml`, which
/// equals config.py's `default_hp` in every inference field.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default)]
pub struct PerthConfig {
    /// Rate the network works at, in Hz; other rates are resampled to it. Default: `32000`.
    pub sample_rate: u32,
    /// STFT size. Default: `2048`.
    pub n_fft: usize,
    /// STFT hop in samples. Default: `320`.
    pub hop_size: usize,
    /// STFT window length (zero-padded to `n_fft` when shorter). Default: `2048`.
    pub window_size: usize,
    /// Magnitude floor before the log. Default: `1e-9`.
    pub stft_magnitude_min: f64,
    /// Window function: `"hann"` (the only one the shipped model uses and this port
    /// implements; `"hamm"` and `"kaiser"` are refused). Default: `"hann"`.
    pub window_fn: String,
    /// Highest frequency the watermark occupies, in Hz. Default: `2000.0`.
    pub max_wmark_freq: f64,
    /// Channels of the hidden convolutions. Default: `256`.
    pub hidden_size: usize,
}

impl Default for PerthConfig {
    fn default() -> Self {
        Self::implicit()
    }
}

with_setters!(PerthConfig {
    with_sample_rate => sample_rate: u32,
    with_n_fft => n_fft: usize,
    with_hop_size => hop_size: usize,
    with_window_size => window_size: usize,
    with_stft_magnitude_min => stft_magnitude_min: f64,
    with_window_fn => window_fn: String,
    with_max_wmark_freq => max_wmark_freq: f64,
    with_hidden_size => hidden_size: usize,
});

impl PerthConfig {
    /// The pretrained `implicit` model shipped in resemble-perth 1.0.1
    /// (`perth/perth_net/pretrained/implicit/hparams.yaml`).
    pub fn implicit() -> Self {
        Self {
            sample_rate: 32_000,
            n_fft: 2048,
            hop_size: 320,
            window_size: 2048,
            stft_magnitude_min: 1e-9,
            window_fn: "hann".into(),
            max_wmark_freq: 2000.0,
            hidden_size: 256,
        }
    }

    /// STFT bins per frame, `n_fft / 2 + 1`.
    pub fn n_freq(&self) -> usize {
        self.n_fft / 2 + 1
    }

    /// Bins the watermark lives in (model/__init__.py `compute_subband_freq`):
    /// `round(n_freq * max_wmark_freq / (sample_rate / 2))`, Python's round (ties to even).
    pub fn subband(&self) -> usize {
        let top = f64::from(self.sample_rate) / 2.0;
        (self.n_freq() as f64 * self.max_wmark_freq / top).round_ties_even() as usize
    }

    /// Checks that the configuration describes a network this port can build and run.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(WatermarkError::InvalidConfig(reason));
        if self.sample_rate == 0 {
            return bad("sample_rate must be positive".into());
        }
        if self.n_fft < 2 || self.hop_size == 0 || self.hop_size > self.n_fft {
            return bad(format!(
                "n_fft {} and hop_size {} must satisfy 2 <= n_fft and 1 <= hop_size <= n_fft",
                self.n_fft, self.hop_size
            ));
        }
        if self.window_size == 0 || self.window_size > self.n_fft {
            return bad(format!(
                "window_size {} must be in 1..={}",
                self.window_size, self.n_fft
            ));
        }
        if self.window_fn != "hann" {
            return bad(format!(
                "window_fn {:?} is not implemented (only \"hann\", the shipped model's)",
                self.window_fn
            ));
        }
        if !(self.stft_magnitude_min > 0.0 && self.stft_magnitude_min < 1.0) {
            return bad(format!(
                "stft_magnitude_min {} must be in (0, 1)",
                self.stft_magnitude_min
            ));
        }
        let subband = self.subband();
        if subband == 0 || subband > self.n_freq() {
            return bad(format!(
                "max_wmark_freq {} Hz gives {subband} watermark bins (need 1..={})",
                self.max_wmark_freq,
                self.n_freq()
            ));
        }
        if self.hidden_size == 0 {
            return bad("hidden_size must be positive".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implicit_subband_is_128_bins() {
        let cfg = PerthConfig::implicit();
        assert_eq!(cfg.n_freq(), 1025);
        // 1025 * 2000 / 16000 = 128.125
        assert_eq!(cfg.subband(), 128);
        cfg.validate().unwrap();
    }

    #[test]
    fn rejects_unimplemented_window_and_zero_rate() {
        let mut cfg = PerthConfig::implicit();
        cfg.window_fn = "kaiser".into();
        assert!(matches!(
            cfg.validate(),
            Err(WatermarkError::InvalidConfig(m)) if m.contains("kaiser")
        ));
        let mut cfg = PerthConfig::implicit();
        cfg.sample_rate = 0;
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn deserialises_python_names_and_ignores_training_fields() {
        let cfg: PerthConfig = serde_json::from_str(
            r#"{"hidden_size": 16, "batch_size": 16, "use_wandb": true, "loss_type": "psychoacoustic"}"#,
        )
        .unwrap();
        assert_eq!(cfg.hidden_size, 16);
        assert_eq!(cfg.n_fft, 2048);
    }
}
