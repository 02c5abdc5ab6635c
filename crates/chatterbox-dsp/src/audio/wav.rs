//! Writing mono WAV files with hound.
use super::Audio;
use crate::error::{check_signal, DspError, Result};
use std::path::Path;

/// Sample format of a written WAV file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WavFormat {
    /// 16-bit integer PCM; samples are clipped to `[-1, 1]` and scaled by 32767.
    #[default]
    Pcm16,
    /// 32-bit IEEE float, written as is.
    Float32,
}

/// Writes `audio` as a mono WAV file.
pub fn write_wav(path: impl AsRef<Path>, audio: &Audio, format: WavFormat) -> Result<()> {
    let path = path.as_ref();
    check_signal(&path.display().to_string(), &audio.samples)?;
    if audio.sample_rate == 0 {
        return Err(DspError::UnsupportedSampleRate {
            what: path.display().to_string(),
            got: 0,
            expected: None,
        });
    }
    let enc = |e: hound::Error| DspError::Encode {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: audio.sample_rate,
        bits_per_sample: match format {
            WavFormat::Pcm16 => 16,
            WavFormat::Float32 => 32,
        },
        sample_format: match format {
            WavFormat::Pcm16 => hound::SampleFormat::Int,
            WavFormat::Float32 => hound::SampleFormat::Float,
        },
    };
    let mut w = hound::WavWriter::create(path, spec).map_err(enc)?;
    match format {
        WavFormat::Pcm16 => {
            for &s in &audio.samples {
                w.write_sample((s.clamp(-1.0, 1.0) * 32767.0).round() as i16)
                    .map_err(enc)?;
            }
        }
        WavFormat::Float32 => {
            for &s in &audio.samples {
                w.write_sample(s).map_err(enc)?;
            }
        }
    }
    w.finalize().map_err(enc)
}
