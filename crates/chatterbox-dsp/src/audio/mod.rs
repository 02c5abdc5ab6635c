//! Audio files in and out: decoding to mono `f32` (as `librosa.load(sr=None, mono=True)` does)
//! and writing WAV.
mod decode;
mod wav;

pub use decode::{
    decode, decode_with_limit, load, load_with_limit, MAX_DECODED_SECONDS, MAX_SAMPLE_RATE,
    SUPPORTED_FORMATS,
};
pub use wav::{
    encode_samples, wav_bytes, wav_stream_header, write_wav, RawFileWriter, WavFileWriter,
    WavFormat, UNKNOWN_WAV_SIZE,
};

/// A mono signal and its sample rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Audio {
    /// Samples, nominally in `[-1, 1]`.
    pub samples: Vec<f32>,
    /// Sample rate in Hz.
    pub sample_rate: u32,
}

impl Audio {
    /// Wraps `samples` at `sample_rate`.
    pub fn new(samples: Vec<f32>, sample_rate: u32) -> Self {
        Self {
            samples,
            sample_rate,
        }
    }

    /// Duration in seconds.
    pub fn duration_secs(&self) -> f64 {
        if self.sample_rate == 0 {
            return 0.0;
        }
        self.samples.len() as f64 / self.sample_rate as f64
    }

    /// This audio at `sample_rate`, converted with the high-quality resampler when the rates
    /// differ (what `librosa.load(path, sr=...)` does with soxr_hq in the reference).
    pub fn resampled(&self, sample_rate: u32) -> crate::Result<Audio> {
        if sample_rate == self.sample_rate {
            return Ok(self.clone());
        }
        let samples = crate::resample::resample(&self.samples, self.sample_rate, sample_rate)?;
        Ok(Audio {
            samples,
            sample_rate,
        })
    }
}
