//! Audio encoders that work as the audio arrives: each turns chunks of 24 kHz samples into the
//! bytes of one file (WAV, raw PCM, FLAC, Ogg Opus, and MP3 with the `mp3` feature). A streamed WAV has the unknown-length sizes
//! (`0xFFFFFFFF`); a whole file gets its exact sizes.
use crate::flac::FlacEncoder;
use crate::format::AudioFormat;
use crate::model::SAMPLE_RATE;
use chatterbox_dsp::audio::{encode_samples, wav_stream_header, WavFormat};

/// An error of an encoder (a format this build cannot encode, a failing encoder).
#[derive(Debug, thiserror::Error)]
#[error("cannot encode {format}: {reason}")]
pub struct EncodeError {
    /// The format.
    pub format: &'static str,
    /// Why.
    pub reason: String,
}

/// Turns samples into a file's bytes, a piece at a time.
pub trait Encoder: Send {
    /// Bytes for `samples` (possibly empty: encoders that work in blocks keep a remainder).
    fn push(&mut self, samples: &[f32]) -> Result<Vec<u8>, EncodeError>;
    /// The remaining bytes at the end of the audio.
    fn finish(&mut self) -> Result<Vec<u8>, EncodeError>;
}

/// A streaming encoder for `format` and the bytes that start the file. `total_samples`, when
/// known (a whole file), goes into the header; `None` writes the formats' unknown-length
/// markers.
pub fn encoder(
    format: AudioFormat,
    total_samples: Option<usize>,
) -> Result<(Box<dyn Encoder>, Vec<u8>), EncodeError> {
    let unsupported = || EncodeError {
        format: format.name(),
        reason: "not supported by this build".into(),
    };
    match format {
        AudioFormat::Wav => {
            let mut header =
                wav_stream_header(SAMPLE_RATE, WavFormat::Pcm16).map_err(|e| EncodeError {
                    format: "wav",
                    reason: e.to_string(),
                })?;
            if let Some(n) = total_samples {
                set_wav_sizes(&mut header, n);
            }
            Ok((Box::new(Pcm16), header))
        }
        AudioFormat::Pcm => Ok((Box::new(Pcm16), Vec::new())),
        AudioFormat::Flac => {
            let (enc, header) = FlacEncoder::new(total_samples)?;
            Ok((Box::new(enc), header))
        }
        #[cfg(feature = "mp3")]
        AudioFormat::Mp3 => Ok((Box::new(crate::mp3::Mp3Encoder::new()?), Vec::new())),
        #[cfg(not(feature = "mp3"))]
        AudioFormat::Mp3 => Err(unsupported()),
        AudioFormat::Opus => {
            let (enc, header) = crate::opus::OpusEncoder::new()?;
            Ok((Box::new(enc), header))
        }
        AudioFormat::Aac => Err(unsupported()),
    }
}

/// The whole file of `samples` in `format`.
pub fn encode_file(format: AudioFormat, samples: &[f32]) -> Result<Vec<u8>, EncodeError> {
    let (mut enc, mut out) = encoder(format, Some(samples.len()))?;
    out.extend(enc.push(samples)?);
    out.extend(enc.finish()?);
    Ok(out)
}

/// Fills in the RIFF and data sizes of a 44-byte PCM16 WAV header for `n` samples (sizes that
/// do not fit in 32 bits keep the unknown-length marker).
fn set_wav_sizes(header: &mut [u8], n: usize) {
    let data = n.checked_mul(2).and_then(|d| u32::try_from(d).ok());
    if let (Some(data), true) = (data, header.len() == 44) {
        if let Some(riff) = data.checked_add(36) {
            header[4..8].copy_from_slice(&riff.to_le_bytes());
            header[40..44].copy_from_slice(&data.to_le_bytes());
        }
    }
}

/// Signed 16-bit little-endian samples (the body of WAV and raw PCM).
struct Pcm16;

impl Encoder for Pcm16 {
    fn push(&mut self, samples: &[f32]) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::with_capacity(samples.len() * 2);
        encode_samples(samples, WavFormat::Pcm16, &mut out);
        Ok(out)
    }

    fn finish(&mut self) -> Result<Vec<u8>, EncodeError> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(n: usize) -> Vec<f32> {
        (0..n).map(|i| (i as f32 * 0.05).sin() * 0.5).collect()
    }

    #[test]
    fn wav_file_and_stream_decode() {
        let x = tone(5000);
        let file = encode_file(AudioFormat::Wav, &x).unwrap();
        let a = chatterbox_dsp::audio::decode(file, None).unwrap();
        assert_eq!((a.samples.len(), a.sample_rate), (5000, SAMPLE_RATE));
        let (mut enc, mut s) = encoder(AudioFormat::Wav, None).unwrap();
        assert_eq!(&s[4..8], &[0xff; 4]);
        for c in x.chunks(777) {
            s.extend(enc.push(c).unwrap());
        }
        s.extend(enc.finish().unwrap());
        let b = chatterbox_dsp::audio::decode(s, None).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn flac_file_and_stream_decode_to_the_samples() {
        let x = tone(10_000);
        let want: Vec<f32> =
            chatterbox_dsp::audio::decode(encode_file(AudioFormat::Wav, &x).unwrap(), None)
                .unwrap()
                .samples;
        let file = encode_file(AudioFormat::Flac, &x).unwrap();
        let a = chatterbox_dsp::audio::decode(file, None).unwrap();
        assert_eq!(a.samples, want);
        let (mut enc, mut s) = encoder(AudioFormat::Flac, None).unwrap();
        for c in x.chunks(1234) {
            s.extend(enc.push(c).unwrap());
        }
        s.extend(enc.finish().unwrap());
        let b = chatterbox_dsp::audio::decode(s, None).unwrap();
        assert_eq!(b.samples, want);
        assert_eq!(b.sample_rate, SAMPLE_RATE);
    }

    #[test]
    fn unsupported_formats_are_errors() {
        assert!(encoder(AudioFormat::Aac, None).is_err());
        assert!(!AudioFormat::Aac.is_supported());
        assert!(encoder(AudioFormat::Opus, None).is_ok());
        assert_eq!(
            encoder(AudioFormat::Mp3, None).is_ok(),
            cfg!(feature = "mp3")
        );
    }

    #[cfg(feature = "mp3")]
    #[test]
    fn mp3_stream_decodes() {
        let x = tone(24_000);
        let (mut enc, mut s) = encoder(AudioFormat::Mp3, None).unwrap();
        for c in x.chunks(5000) {
            s.extend(enc.push(c).unwrap());
        }
        s.extend(enc.finish().unwrap());
        let a = chatterbox_dsp::audio::decode(s, None).unwrap();
        assert_eq!(a.sample_rate, SAMPLE_RATE);
        // MP3 adds encoder delay and padding: about the same length
        assert!(
            (a.samples.len() as i64 - 24_000).abs() < 3000,
            "{}",
            a.samples.len()
        );
    }
}
