//! Reference clips: `librosa.load(path, sr=24000)` and the 16 kHz copy `prepare_conditionals`
//! makes with `librosa.resample` (chatterbox/tts.py, upstream 5de7a54), and Turbo's loudness
//! normalisation (`ChatterboxTurboTTS.norm_loudness`, pyloudnorm in the reference).
use crate::s3gen::{S3GEN_SR, S3_SR};
use crate::{PipelineError, Result};
use chatterbox_dsp::resample::HqResampler;
use chatterbox_dsp::Audio;
use std::path::Path;

/// A reference clip at the two rates conditioning uses: 24 kHz (S3Gen's prompt) and 16 kHz
/// (the VoiceEncoder and T3's prompt tokens).
///
/// The reference converts with soxr (`librosa.load`, `librosa.resample`); this crate uses
/// chatterbox-dsp's high-quality resampler. With the `soxr` feature that is libsoxr called as
/// the reference calls it (the same samples); without it, rubato, a different filter (66-74 dB
/// SNR against soxr on speech, which can change a speech-token code of T3's prompt for a clip
/// not at 24 kHz). [`VoiceClip::from_parts`] takes both signals as they are, for exact
/// comparisons.
#[derive(Debug, Clone, PartialEq)]
pub struct VoiceClip {
    /// The clip at 24 kHz.
    pub wav_24k: Vec<f32>,
    /// The clip at 16 kHz.
    pub wav_16k: Vec<f32>,
}

impl VoiceClip {
    /// Both versions given.
    pub fn from_parts(wav_24k: Vec<f32>, wav_16k: Vec<f32>) -> Self {
        Self { wav_24k, wav_16k }
    }

    /// From a 24 kHz clip: the 16 kHz copy is resampled from it.
    pub fn from_24k(wav_24k: Vec<f32>) -> Result<Self> {
        check_clip(&wav_24k)?;
        let wav_16k = HqResampler::new(S3GEN_SR, S3_SR)?.process(&wav_24k)?;
        Ok(Self { wav_24k, wav_16k })
    }

    /// From decoded audio at any rate (resampled to 24 kHz first, as `librosa.load(sr=24000)`).
    pub fn from_audio(audio: &Audio) -> Result<Self> {
        Self::from_24k(audio_24k(audio)?)
    }

    /// Decodes an audio file (WAV, FLAC, MP3, Ogg/Vorbis) and resamples it.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        Self::from_audio(&chatterbox_dsp::audio::load(path)?)
    }

    /// Duration in seconds (of the 24 kHz version).
    pub fn duration_secs(&self) -> f64 {
        self.wav_24k.len() as f64 / f64::from(S3GEN_SR)
    }
}

/// `librosa.load(path, sr=24000)` of decoded audio.
pub(crate) fn audio_24k(audio: &Audio) -> Result<Vec<f32>> {
    if audio.sample_rate == 0 {
        return Err(PipelineError::InvalidInput {
            what: "reference clip",
            reason: "sample rate 0".into(),
        });
    }
    let wav = audio.resampled(S3GEN_SR)?.samples;
    check_clip(&wav)?;
    Ok(wav)
}

/// Empty, non-finite or silent clips are errors.
pub(crate) fn check_clip(wav: &[f32]) -> Result<()> {
    chatterbox_dsp::check_signal("reference clip", wav)?;
    if wav.iter().all(|&v| v == 0.0) {
        return Err(PipelineError::SilentAudio {
            what: "reference clip",
            len: wav.len(),
        });
    }
    Ok(())
}

/// Integrated loudness (EBU R128 / ITU-R BS.1770, LUFS) of a mono clip; `-inf` for silence.
pub fn integrated_loudness(wav: &[f32], sample_rate: u32) -> Result<f64> {
    let err = |e: ebur128::Error| PipelineError::InvalidInput {
        what: "loudness meter",
        reason: e.to_string(),
    };
    let mut meter = ebur128::EbuR128::new(1, sample_rate, ebur128::Mode::I).map_err(err)?;
    meter.add_frames_f32(wav).map_err(err)?;
    meter.loudness_global().map_err(err)
}

/// `norm_loudness(wav, sr, target_lufs)`: scales `wav` so that its integrated loudness is
/// `target_lufs` (Turbo: -27). Returns the linear gain applied; when the gain is not finite
/// and positive (silence, clips under 400 ms) the clip is left as it is and `None` returned,
/// as in the reference.
///
/// The reference measures with pyloudnorm; the meter here is the `ebur128` crate (a port of
/// libebur128). Both implement BS.1770-4, with slightly different K-weighting coefficients and
/// block framing: gains agree to a few hundredths of a dB.
pub fn norm_loudness(wav: &mut [f32], sample_rate: u32, target_lufs: f64) -> Result<Option<f64>> {
    let loudness = integrated_loudness(wav, sample_rate)?;
    let gain = 10f64.powf((target_lufs - loudness) / 20.0);
    if !(gain.is_finite() && gain > 0.0) {
        tracing::warn!(
            loudness,
            "norm_loudness: cannot normalise, clip left as it is"
        );
        return Ok(None);
    }
    // NumPy multiplies a float32 array by a Python float in float32.
    let g = gain as f32;
    wav.iter_mut().for_each(|v| *v *= g);
    Ok(Some(gain))
}
