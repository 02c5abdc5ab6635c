//! Port of chatterbox/models/voice_encoder/config.py (upstream 5de7a54).
use crate::{Result, SpeakerError};
use chatterbox_dsp::features::VoiceEncoderMelConfig;

/// Hyper-parameters of the VoiceEncoder, with the reference's field names and defaults
/// (`VoiceEncConfig`).
///
/// The mel fields must keep the reference values that the released checkpoints use:
/// `preemphasis = 0`, `mel_type = "amp"` and `normalized_mels = false` (other values are
/// rejected by [`VoiceEncConfig::validate`] rather than silently ignored).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default)]
pub struct VoiceEncConfig {
    /// Mel bins (LSTM input size). Default: `40`.
    pub num_mels: usize,
    /// Sample rate the encoder works at. Default: `16000`.
    pub sample_rate: u32,
    /// Embedding size (projection output). Default: `256`.
    pub speaker_embed_size: usize,
    /// LSTM hidden size. Default: `256`.
    pub ve_hidden_size: usize,
    /// A CUDA memory-layout hint in the reference; no effect on the numbers. Default: `false`.
    pub flatten_lstm_params: bool,
    /// FFT size. Default: `400`.
    pub n_fft: usize,
    /// Hop in samples. Default: `160`.
    pub hop_size: usize,
    /// Window length. Default: `400`.
    pub win_size: usize,
    /// Highest mel frequency. Default: `8000`.
    pub fmax: f64,
    /// Lowest mel frequency. Default: `0`.
    pub fmin: f64,
    /// Pre-emphasis coefficient; only `0` is supported. Default: `0`.
    pub preemphasis: f64,
    /// Exponent applied to the STFT magnitude. Default: `2.0`.
    pub mel_power: f32,
    /// `"amp"` (linear mel); only `"amp"` is supported. Default: `"amp"`.
    pub mel_type: String,
    /// Whether mels are normalised to [0, 1]; only `false` is supported. Default: `false`.
    pub normalized_mels: bool,
    /// Frames per partial utterance. Default: `160`.
    pub ve_partial_frames: usize,
    /// ReLU after the projection. Default: `true`.
    pub ve_final_relu: bool,
    /// Magnitude floor of the (unused) dB conversion. Default: `1e-4`.
    pub stft_magnitude_min: f64,
}

impl Default for VoiceEncConfig {
    fn default() -> Self {
        Self {
            num_mels: 40,
            sample_rate: 16000,
            speaker_embed_size: 256,
            ve_hidden_size: 256,
            flatten_lstm_params: false,
            n_fft: 400,
            hop_size: 160,
            win_size: 400,
            fmax: 8000.0,
            fmin: 0.0,
            preemphasis: 0.0,
            mel_power: 2.0,
            mel_type: "amp".to_string(),
            normalized_mels: false,
            ve_partial_frames: 160,
            ve_final_relu: true,
            stft_magnitude_min: 1e-4,
        }
    }
}

impl VoiceEncConfig {
    /// The VoiceEncoder of every released Chatterbox checkpoint (`ve.safetensors` of the
    /// English and Turbo models, `ve.pt` of the multilingual one): the reference's defaults.
    pub fn chatterbox() -> Self {
        Self::default()
    }

    /// Rejects values the port does not implement (they are not used by any released
    /// checkpoint) and sizes of zero.
    pub fn validate(&self) -> Result<()> {
        let unsupported = |field, reason: &str| {
            Err(SpeakerError::UnsupportedConfig {
                field,
                reason: reason.to_string(),
            })
        };
        if self.preemphasis != 0.0 {
            return unsupported("preemphasis", "only 0 (no pre-emphasis) is implemented");
        }
        if self.mel_type != "amp" {
            return unsupported("mel_type", "only \"amp\" (linear mel) is implemented");
        }
        if self.normalized_mels {
            return unsupported("normalized_mels", "only false is implemented");
        }
        for (field, v) in [
            ("num_mels", self.num_mels),
            ("speaker_embed_size", self.speaker_embed_size),
            ("ve_hidden_size", self.ve_hidden_size),
            ("ve_partial_frames", self.ve_partial_frames),
        ] {
            if v == 0 {
                return unsupported(field, "must be positive");
            }
        }
        Ok(())
    }

    /// The mel extractor's configuration.
    pub fn mel_config(&self) -> VoiceEncoderMelConfig {
        VoiceEncoderMelConfig {
            num_mels: self.num_mels,
            sample_rate: self.sample_rate,
            n_fft: self.n_fft,
            hop_size: self.hop_size,
            win_size: self.win_size,
            fmin: self.fmin,
            fmax: self.fmax,
            mel_power: self.mel_power,
        }
    }
}
