//! Streaming FLAC (16-bit, 24 kHz mono) with the pure-Rust `flacenc` crate: the STREAMINFO
//! header is written first (total length unknown when streaming, as the FLAC format allows),
//! then one fixed-size frame per 4096 samples as they arrive, the last one shorter.
use crate::encoder::{EncodeError, Encoder};
use crate::model::SAMPLE_RATE;
use flacenc::bitsink::ByteSink;
use flacenc::component::{BitRepr, StreamInfo};
use flacenc::config;
use flacenc::error::{Verified, Verify};
use flacenc::source::{Fill, FrameBuf};

/// Samples per FLAC frame.
const BLOCK: usize = 4096;
/// Bits per sample.
const BITS: usize = 16;
/// Channels.
const CHANNELS: u64 = 1;

/// A FLAC stream being encoded.
pub(crate) struct FlacEncoder {
    config: Verified<config::Encoder>,
    info: StreamInfo,
    frame: FrameBuf,
    pending: Vec<i32>,
    frames: usize,
}

fn err(reason: impl std::fmt::Display) -> EncodeError {
    EncodeError {
        format: "flac",
        reason: reason.to_string(),
    }
}

impl FlacEncoder {
    /// The encoder and the file's first bytes (`fLaC` and STREAMINFO; `total_samples` 0 =
    /// unknown).
    pub(crate) fn new(total_samples: Option<usize>) -> Result<(Self, Vec<u8>), EncodeError> {
        let config = config::Encoder::default()
            .into_verified()
            .map_err(|(_, e)| err(e))?;
        let info = StreamInfo::new(SAMPLE_RATE as usize, 1, BITS).map_err(err)?;
        let frame = FrameBuf::with_size(1, BLOCK).map_err(err)?;
        let header = stream_header(total_samples.unwrap_or(0) as u64);
        Ok((
            Self {
                config,
                info,
                frame,
                pending: Vec::with_capacity(BLOCK),
                frames: 0,
            },
            header,
        ))
    }

    /// Encodes `pending[..n]` as the next frame and drops it from `pending`.
    fn frame(&mut self, n: usize) -> Result<Vec<u8>, EncodeError> {
        self.frame
            .fill_interleaved(&self.pending[..n])
            .map_err(err)?;
        self.pending.drain(..n);
        let frame =
            flacenc::encode_fixed_size_frame(&self.config, &self.frame, self.frames, &self.info)
                .map_err(err)?;
        self.frames += 1;
        let mut sink = ByteSink::new();
        frame.write(&mut sink).map_err(err)?;
        Ok(sink.into_inner())
    }
}

impl Encoder for FlacEncoder {
    fn push(&mut self, samples: &[f32]) -> Result<Vec<u8>, EncodeError> {
        self.pending.extend(samples.iter().map(|&s| {
            let s = if s.is_finite() {
                s.clamp(-1.0, 1.0)
            } else {
                0.0
            };
            (s * 32767.0).round() as i32
        }));
        let mut out = Vec::new();
        while self.pending.len() >= BLOCK {
            out.extend(self.frame(BLOCK)?);
        }
        Ok(out)
    }

    fn finish(&mut self) -> Result<Vec<u8>, EncodeError> {
        if self.pending.is_empty() {
            return Ok(Vec::new());
        }
        self.frame(self.pending.len())
    }
}

/// `fLaC` and the STREAMINFO block (the last metadata block): fixed block size, frame sizes
/// and MD5 unknown (0).
fn stream_header(total_samples: u64) -> Vec<u8> {
    let mut h = b"fLaC".to_vec();
    h.push(0x80); // last metadata block, type 0 (STREAMINFO)
    h.extend_from_slice(&[0, 0, 34]);
    h.extend_from_slice(&(BLOCK as u16).to_be_bytes());
    h.extend_from_slice(&(BLOCK as u16).to_be_bytes());
    h.extend_from_slice(&[0; 6]); // min and max frame size: unknown
    let packed: u64 = (u64::from(SAMPLE_RATE) << 44)
        | ((CHANNELS - 1) << 41)
        | (((BITS - 1) as u64) << 36)
        | (total_samples & ((1 << 36) - 1));
    h.extend_from_slice(&packed.to_be_bytes());
    h.extend_from_slice(&[0; 16]); // MD5: not computed
    h
}
