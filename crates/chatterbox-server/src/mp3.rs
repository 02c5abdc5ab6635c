//! Streaming MP3 (64 kbit/s CBR, 24 kHz mono) with LAME through `mp3lame-encoder` (the `mp3`
//! feature): MPEG frames come out as samples go in, and `finish` flushes the last frames.
use crate::encoder::{EncodeError, Encoder};
use crate::model::SAMPLE_RATE;
use mp3lame_encoder::{Bitrate, Builder, FlushGap, MonoPcm, Quality};

fn err(reason: impl std::fmt::Display) -> EncodeError {
    EncodeError {
        format: "mp3",
        reason: reason.to_string(),
    }
}

/// An MP3 stream being encoded.
pub(crate) struct Mp3Encoder {
    enc: mp3lame_encoder::Encoder,
    pcm: Vec<i16>,
}

impl Mp3Encoder {
    pub(crate) fn new() -> Result<Self, EncodeError> {
        let mut b = Builder::new().ok_or_else(|| err("LAME could not be initialised"))?;
        b.set_num_channels(1).map_err(err)?;
        b.set_sample_rate(SAMPLE_RATE).map_err(err)?;
        b.set_brate(Bitrate::Kbps64).map_err(err)?;
        b.set_quality(Quality::Good).map_err(err)?;
        let enc = b.build().map_err(err)?;
        Ok(Self {
            enc,
            pcm: Vec::new(),
        })
    }
}

impl Encoder for Mp3Encoder {
    fn push(&mut self, samples: &[f32]) -> Result<Vec<u8>, EncodeError> {
        self.pcm.clear();
        self.pcm.extend(samples.iter().map(|&s| {
            let s = if s.is_finite() {
                s.clamp(-1.0, 1.0)
            } else {
                0.0
            };
            (s * 32767.0).round() as i16
        }));
        let mut out = Vec::with_capacity(mp3lame_encoder::max_required_buffer_size(samples.len()));
        self.enc
            .encode_to_vec(MonoPcm(&self.pcm), &mut out)
            .map_err(err)?;
        Ok(out)
    }

    fn finish(&mut self) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::with_capacity(16 * 1024);
        self.enc.flush_to_vec::<FlushGap>(&mut out).map_err(err)?;
        Ok(out)
    }
}
