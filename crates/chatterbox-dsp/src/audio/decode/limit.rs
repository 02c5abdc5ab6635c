//! The longest audio a decode returns. A small file can stand for hours of samples: a FLAC frame
//! of constant subframes holds 65535 samples in about a dozen bytes (20 MiB of them are 1e11
//! samples), an Opus packet of three bytes holds 120 ms, and any header can claim a length its
//! file does not hold. Every decode stops with [`DspError::TooLong`] when its header already
//! claims more than the limit, and otherwise as soon as the decoded samples pass it, so that
//! neither the time nor the memory spent goes past what the limit allows.
use crate::error::{invalid, DspError, Result};

/// The longest audio [`decode`](super::decode) and [`load`](super::load) return, in seconds
/// (ten minutes); [`decode_with_limit`](super::decode_with_limit) and
/// [`load_with_limit`](super::load_with_limit) take another.
///
/// Far above what Chatterbox reads from a clip (a voice prompt is 5-10 s and the models keep at
/// most its first 15 s; a voice-conversion source of ten minutes is already a job to split), and
/// small enough that a hostile file costs little: 600 s at 48 kHz are 28.8 M samples, 115 MB of
/// `f32` and a few seconds of decoding, where the 3 hours an 829 KB FLAC can hold took a server
/// 51 s and 2.9 GB. At [`MAX_SAMPLE_RATE`] the limit is 0.9 GB of samples.
pub const MAX_DECODED_SECONDS: f64 = 600.0;

/// The highest sample rate decoded, in Hz: the highest rate of audio interfaces in common use
/// (384 kHz), so that the limit in samples stays bounded. Files that claim more (a header field
/// of 4 GHz) are refused with [`DspError::UnsupportedSampleRate`].
pub const MAX_SAMPLE_RATE: u32 = 384_000;

/// A limit on the length of decoded audio.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limit {
    seconds: f64,
}

impl Limit {
    /// A limit of `seconds`, which must be positive and finite.
    pub(super) fn new(seconds: f64) -> Result<Self> {
        if seconds.is_finite() && seconds > 0.0 {
            Ok(Self { seconds })
        } else {
            Err(invalid(
                "max_seconds",
                format!("{seconds} is not a positive, finite number of seconds"),
            ))
        }
    }

    /// The most frames (samples per channel) at `rate` within the limit. A rate of 0 or above
    /// [`MAX_SAMPLE_RATE`] is an error naming `name`.
    pub(super) fn frames(self, rate: u32, name: &str) -> Result<usize> {
        if rate == 0 || rate > MAX_SAMPLE_RATE {
            let what = match rate {
                0 => name.to_string(),
                _ => format!("{name} (rates above {MAX_SAMPLE_RATE} Hz are not decoded)"),
            };
            return Err(DspError::UnsupportedSampleRate {
                what,
                got: rate,
                expected: None,
            });
        }
        // a float-to-integer `as` saturates: a limit of 1e300 s is usize::MAX frames
        Ok((self.seconds * f64::from(rate)).floor() as usize)
    }

    /// Refuses a stream whose header claims `frames` at `rate`, more than the limit.
    pub(super) fn check_claim(self, frames: u64, rate: u32, name: &str) -> Result<()> {
        let most = self.frames(rate, name)?;
        if frames > most as u64 {
            return Err(self.exceeded(name, Some(frames as f64 / f64::from(rate))));
        }
        Ok(())
    }

    /// The error for audio longer than the limit (`claimed`: the seconds a header claims).
    fn exceeded(self, name: &str, claimed: Option<f64>) -> DspError {
        DspError::TooLong {
            source_name: name.to_string(),
            seconds_limit: self.seconds,
            claimed_seconds: claimed,
        }
    }
}

/// Mono samples as they are decoded, refused as soon as they would pass the limit: nothing past
/// it is decoded further or allocated.
pub(super) struct MonoSamples<'a> {
    samples: Vec<f32>,
    /// The most samples allowed.
    max: usize,
    limit: Limit,
    name: &'a str,
}

impl<'a> MonoSamples<'a> {
    /// An empty signal at `rate`, which `limit` bounds (an error for a rate it refuses).
    pub(super) fn new(limit: Limit, rate: u32, name: &'a str) -> Result<Self> {
        Ok(Self {
            samples: Vec::new(),
            max: limit.frames(rate, name)?,
            limit,
            name,
        })
    }

    /// Samples so far.
    pub(super) fn len(&self) -> usize {
        self.samples.len()
    }

    /// Appends frames of `channels` interleaved samples as their channel mean (librosa's
    /// `to_mono`), or refuses them when the signal would pass the limit.
    pub(super) fn push_interleaved(&mut self, interleaved: &[f32], channels: usize) -> Result<()> {
        let channels = channels.max(1);
        let frames = interleaved.len() / channels;
        let need = self.samples.len().saturating_add(frames);
        if need > self.max {
            return Err(self.limit.exceeded(self.name, None));
        }
        if need > self.samples.capacity() {
            // grow as a Vec does (doubling), but never past the limit
            let grown = self
                .samples
                .capacity()
                .saturating_mul(2)
                .clamp(need, self.max);
            self.samples.reserve_exact(grown - self.samples.len());
        }
        if channels == 1 {
            self.samples.extend_from_slice(interleaved);
        } else {
            let inv = channels as f32;
            self.samples.extend(
                interleaved
                    .chunks_exact(channels)
                    .map(|f| f.iter().sum::<f32>() / inv),
            );
        }
        Ok(())
    }

    /// Drops the samples past `len` (an Opus stream's end trimming).
    pub(super) fn truncate(&mut self, len: usize) {
        self.samples.truncate(len);
    }

    /// The samples decoded.
    pub(super) fn into_samples(self) -> Vec<f32> {
        self.samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_in_frames_and_claims() {
        let limit = Limit::new(1.5).unwrap();
        assert_eq!(limit.frames(16_000, "x").unwrap(), 24_000);
        assert!(limit.check_claim(24_000, 16_000, "x").is_ok());
        let err = limit.check_claim(24_001, 16_000, "x").unwrap_err();
        assert!(
            matches!(err, DspError::TooLong { seconds_limit, claimed_seconds: Some(c), .. }
                if seconds_limit == 1.5 && (c - 24_001.0 / 16_000.0).abs() < 1e-12),
            "{err:?}"
        );
        // the largest claims and rates do not overflow
        assert!(limit.check_claim(u64::MAX, MAX_SAMPLE_RATE, "x").is_err());
        let huge = Limit::new(f64::MAX).unwrap();
        assert_eq!(huge.frames(MAX_SAMPLE_RATE, "x").unwrap(), usize::MAX);
        for rate in [0, MAX_SAMPLE_RATE + 1, u32::MAX] {
            let err = limit.frames(rate, "x").unwrap_err();
            assert!(
                matches!(err, DspError::UnsupportedSampleRate { got, .. } if got == rate),
                "{err:?}"
            );
        }
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                Limit::new(bad),
                Err(DspError::InvalidParameter { .. })
            ));
        }
    }

    #[test]
    fn samples_stop_at_the_limit_and_never_reserve_past_it() {
        let limit = Limit::new(1.0).unwrap();
        let mut m = MonoSamples::new(limit, 10, "x").unwrap();
        m.push_interleaved(&[1.0, 3.0, 5.0, 7.0], 2).unwrap();
        m.push_interleaved(&[0.5; 7], 1).unwrap();
        assert_eq!(m.samples.len(), 9);
        assert!(m.samples.capacity() <= 10);
        m.push_interleaved(&[0.25], 1).unwrap(); // exactly the limit
        let err = m.push_interleaved(&[0.0], 1).unwrap_err();
        assert!(
            matches!(
                err,
                DspError::TooLong {
                    claimed_seconds: None,
                    ..
                }
            ),
            "{err:?}"
        );
        let samples = m.into_samples();
        assert_eq!(samples.len(), 10);
        assert_eq!(&samples[..3], &[2.0, 6.0, 0.5]);
    }
}
