//! Streaming Ogg Opus (RFC 7845): 24 kHz mono encoded by libopus 1.3.1 in 20 ms packets at
//! 48 kbit/s VBR, through `unsafe-libopus` (libopus translated to Rust, so no C toolchain and
//! the BSD licence of libopus), in Ogg pages written by the `ogg` crate. Each `push` ends a
//! page, so a streamed response carries playable pages as the audio arrives; `finish` pads the
//! last packet, covers the encoder's look-ahead and sets the end granule so players trim the
//! stream to exactly the samples given.
use crate::encoder::{EncodeError, Encoder};
use crate::model::SAMPLE_RATE;
use ogg::writing::{PacketWriteEndInfo, PacketWriter};

/// Samples per packet (20 ms at 24 kHz).
const FRAME: usize = 480;
/// Target bit rate, bit/s.
const BITRATE: i32 = 48_000;
/// Opus granule positions count 48 kHz samples.
const GRANULE_PER_SAMPLE: u64 = 48_000 / SAMPLE_RATE as u64;
/// Largest packet libopus is asked to write (its recommended maximum).
const MAX_PACKET: usize = 4000;
/// The Ogg stream's serial number (one logical stream per file).
const SERIAL: u32 = 0x4368_6174;

fn err(reason: impl std::fmt::Display) -> EncodeError {
    EncodeError {
        format: "opus",
        reason: reason.to_string(),
    }
}

/// The text of a libopus error code.
fn opus_error(code: i32) -> EncodeError {
    let text = match code {
        unsafe_libopus::OPUS_BAD_ARG => "bad argument",
        unsafe_libopus::OPUS_BUFFER_TOO_SMALL => "buffer too small",
        unsafe_libopus::OPUS_INTERNAL_ERROR => "internal error",
        unsafe_libopus::OPUS_INVALID_PACKET => "invalid packet",
        unsafe_libopus::OPUS_UNIMPLEMENTED => "unimplemented",
        unsafe_libopus::OPUS_INVALID_STATE => "invalid state",
        unsafe_libopus::OPUS_ALLOC_FAIL => "allocation failed",
        _ => "unknown error",
    };
    err(format!("libopus: {text} ({code})"))
}

/// An owned libopus encoder state.
struct RawEncoder(*mut unsafe_libopus::OpusEncoder);

// SAFETY: the state is plain memory owned by this value alone and used through `&mut self`.
unsafe impl Send for RawEncoder {}

impl RawEncoder {
    fn new() -> Result<Self, EncodeError> {
        let mut code = 0;
        // SAFETY: valid arguments (24 kHz is an Opus rate, 1 channel) and a valid out pointer;
        // a null result is checked.
        let st = unsafe {
            unsafe_libopus::opus_encoder_create(
                SAMPLE_RATE as i32,
                1,
                unsafe_libopus::OPUS_APPLICATION_AUDIO,
                &mut code,
            )
        };
        if st.is_null() || code != unsafe_libopus::OPUS_OK {
            return Err(opus_error(code));
        }
        let enc = Self(st);
        // SAFETY: `st` is a live encoder; each request takes the one argument given.
        let code = unsafe {
            unsafe_libopus::opus_encoder_ctl!(
                enc.0,
                unsafe_libopus::OPUS_SET_BITRATE_REQUEST,
                BITRATE
            )
        };
        if code != unsafe_libopus::OPUS_OK {
            return Err(opus_error(code));
        }
        // SAFETY: as above.
        let code = unsafe {
            unsafe_libopus::opus_encoder_ctl!(
                enc.0,
                unsafe_libopus::OPUS_SET_SIGNAL_REQUEST,
                unsafe_libopus::OPUS_SIGNAL_VOICE
            )
        };
        if code != unsafe_libopus::OPUS_OK {
            return Err(opus_error(code));
        }
        Ok(enc)
    }

    /// The encoder's look-ahead, in 24 kHz samples.
    fn lookahead(&mut self) -> Result<usize, EncodeError> {
        let mut n = 0i32;
        // SAFETY: a live encoder and one out argument.
        let code = unsafe {
            unsafe_libopus::opus_encoder_ctl!(
                self.0,
                unsafe_libopus::OPUS_GET_LOOKAHEAD_REQUEST,
                &mut n
            )
        };
        if code != unsafe_libopus::OPUS_OK {
            return Err(opus_error(code));
        }
        usize::try_from(n).map_err(|_| err(format!("libopus reported a look-ahead of {n}")))
    }

    /// One packet of exactly [`FRAME`] samples.
    fn encode(
        &mut self,
        frame: &[f32; FRAME],
        out: &mut [u8; MAX_PACKET],
    ) -> Result<usize, EncodeError> {
        // SAFETY: `frame` holds FRAME samples and `out` MAX_PACKET bytes, as passed.
        let n = unsafe {
            unsafe_libopus::opus_encode_float(
                self.0,
                frame.as_ptr(),
                FRAME as i32,
                out.as_mut_ptr(),
                MAX_PACKET as i32,
            )
        };
        usize::try_from(n).map_err(|_| opus_error(n))
    }
}

impl Drop for RawEncoder {
    fn drop(&mut self) {
        // SAFETY: created by `opus_encoder_create`, destroyed once.
        unsafe { unsafe_libopus::opus_encoder_destroy(self.0) }
    }
}

/// An Ogg Opus stream being encoded.
pub(crate) struct OpusEncoder {
    enc: RawEncoder,
    pages: PacketWriter<'static, Vec<u8>>,
    /// Samples given, not yet a whole packet.
    pending: Vec<f32>,
    /// Samples given in all.
    given: u64,
    /// Samples encoded into packets (padding included).
    encoded: u64,
    /// The look-ahead, 24 kHz samples.
    lookahead: usize,
    /// Pre-skip, 48 kHz samples (the look-ahead at 48 kHz).
    pre_skip: u64,
    packet: Box<[u8; MAX_PACKET]>,
}

impl OpusEncoder {
    /// A stream with its two header pages (returned: the start of the file).
    pub(crate) fn new() -> Result<(Self, Vec<u8>), EncodeError> {
        let mut enc = RawEncoder::new()?;
        let lookahead = enc.lookahead()?;
        let pre_skip = lookahead as u64 * GRANULE_PER_SAMPLE;
        let pre_skip_field = u16::try_from(pre_skip)
            .map_err(|_| err(format!("pre-skip {pre_skip} does not fit the header")))?;
        let mut pages = PacketWriter::new(Vec::new());
        pages
            .write_packet(
                opus_head(pre_skip_field),
                SERIAL,
                PacketWriteEndInfo::EndPage,
                0,
            )
            .map_err(err)?;
        pages
            .write_packet(opus_tags(), SERIAL, PacketWriteEndInfo::EndPage, 0)
            .map_err(err)?;
        let start = std::mem::take(pages.inner_mut());
        let this = Self {
            enc,
            pages,
            pending: Vec::with_capacity(FRAME),
            given: 0,
            encoded: 0,
            lookahead,
            pre_skip,
            packet: Box::new([0; MAX_PACKET]),
        };
        Ok((this, start))
    }

    /// Encodes every whole packet in `pending`; the last one written ends the page (or the
    /// stream when `end`).
    fn drain_packets(&mut self, end: bool) -> Result<Vec<u8>, EncodeError> {
        let whole = self.pending.len() / FRAME * FRAME;
        let mut frames = self.pending[..whole].chunks_exact(FRAME).peekable();
        while let Some(chunk) = frames.next() {
            let mut frame = [0f32; FRAME];
            for (d, &s) in frame.iter_mut().zip(chunk) {
                *d = if s.is_finite() {
                    s.clamp(-1.0, 1.0)
                } else {
                    0.0
                };
            }
            let n = self.enc.encode(&frame, &mut self.packet)?;
            self.encoded += FRAME as u64;
            let last = frames.peek().is_none();
            let info = match (last, end) {
                (false, _) => PacketWriteEndInfo::NormalPacket,
                (true, false) => PacketWriteEndInfo::EndPage,
                (true, true) => PacketWriteEndInfo::EndStream,
            };
            // The granule of the samples this packet completes; the last one is cut back to
            // the samples given, which tells players to drop the padding.
            let granule = if last && end {
                self.pre_skip + self.given * GRANULE_PER_SAMPLE
            } else {
                self.encoded * GRANULE_PER_SAMPLE
            };
            self.pages
                .write_packet(self.packet[..n].to_vec(), SERIAL, info, granule)
                .map_err(err)?;
        }
        self.pending.drain(..whole);
        Ok(std::mem::take(self.pages.inner_mut()))
    }
}

impl Encoder for OpusEncoder {
    fn push(&mut self, samples: &[f32]) -> Result<Vec<u8>, EncodeError> {
        self.given += samples.len() as u64;
        self.pending.extend_from_slice(samples);
        self.drain_packets(false)
    }

    fn finish(&mut self) -> Result<Vec<u8>, EncodeError> {
        // Every given sample must leave the encoder: encode past the look-ahead, in whole
        // packets, and at least one packet so the stream has an end page.
        let needed = self.given + self.lookahead as u64;
        let total = needed.div_ceil(FRAME as u64).max(1) * FRAME as u64;
        let pad = (total - self.encoded) as usize - self.pending.len();
        self.pending.resize(self.pending.len() + pad, 0.0);
        self.drain_packets(true)
    }
}

/// The identification header (RFC 7845 section 5.1): mono, channel mapping family 0.
fn opus_head(pre_skip: u16) -> Vec<u8> {
    let mut h = Vec::with_capacity(19);
    h.extend_from_slice(b"OpusHead");
    h.push(1); // version
    h.push(1); // channels
    h.extend_from_slice(&pre_skip.to_le_bytes());
    h.extend_from_slice(&SAMPLE_RATE.to_le_bytes()); // the input's rate, informational
    h.extend_from_slice(&0i16.to_le_bytes()); // output gain
    h.push(0); // mapping family
    h
}

/// The comment header (RFC 7845 section 5.2): the vendor string, no comments.
fn opus_tags() -> Vec<u8> {
    let vendor = format!(
        "chatterbox-server ({})",
        unsafe_libopus::opus_get_version_string()
    );
    let mut t = Vec::with_capacity(16 + vendor.len());
    t.extend_from_slice(b"OpusTags");
    t.extend_from_slice(&(vendor.len() as u32).to_le_bytes());
    t.extend_from_slice(vendor.as_bytes());
    t.extend_from_slice(&0u32.to_le_bytes());
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use ogg::reading::PacketReader;

    /// Decodes an Ogg Opus file with libopus: (pre-skip, end granule, 24 kHz samples with the
    /// pre-skip removed and cut at the end granule).
    fn decode(file: Vec<u8>) -> (u64, u64, Vec<f32>) {
        let mut r = PacketReader::new(std::io::Cursor::new(file));
        let head = r.read_packet_expected().unwrap();
        assert_eq!(&head.data[..8], b"OpusHead");
        let pre_skip = u64::from(u16::from_le_bytes([head.data[10], head.data[11]]));
        let tags = r.read_packet_expected().unwrap();
        assert_eq!(&tags.data[..8], b"OpusTags");
        let mut code = 0;
        // SAFETY: valid arguments; freed below.
        let dec = unsafe { unsafe_libopus::opus_decoder_create(SAMPLE_RATE as i32, 1, &mut code) };
        assert!(!dec.is_null() && code == unsafe_libopus::OPUS_OK);
        let mut pcm = Vec::new();
        let mut end = 0;
        let mut buf = vec![0f32; 5760];
        while let Some(p) = r.read_packet().unwrap() {
            // SAFETY: a live decoder, the packet's bytes and a buffer of 5760 samples.
            let n = unsafe {
                unsafe_libopus::opus_decode_float(
                    dec,
                    p.data.as_ptr(),
                    p.data.len() as i32,
                    buf.as_mut_ptr(),
                    buf.len() as i32,
                    0,
                )
            };
            assert!(n > 0, "decode failed: {n}");
            pcm.extend_from_slice(&buf[..n as usize]);
            if p.last_in_stream() {
                end = p.absgp_page();
            }
        }
        // SAFETY: created above.
        unsafe { unsafe_libopus::opus_decoder_destroy(dec) };
        let skip = (pre_skip / GRANULE_PER_SAMPLE) as usize;
        let len = ((end - pre_skip) / GRANULE_PER_SAMPLE) as usize;
        assert!(pcm.len() >= skip + len, "{} < {skip} + {len}", pcm.len());
        (pre_skip, end, pcm[skip..skip + len].to_vec())
    }

    fn tone(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (2.0 * std::f32::consts::PI * 220.0 * i as f32 / 24_000.0).sin() * 0.5)
            .collect()
    }

    fn snr_db(want: &[f32], got: &[f32]) -> f64 {
        let (mut s, mut e) = (0f64, 0f64);
        for (a, b) in want.iter().zip(got) {
            s += f64::from(*a).powi(2);
            e += f64::from(a - b).powi(2);
        }
        10.0 * (s / e.max(1e-30)).log10()
    }

    #[test]
    fn streamed_pieces_decode_to_the_samples_with_exact_length() {
        let x = tone(24_000 + 123);
        let (mut enc, mut file) = OpusEncoder::new().unwrap();
        for c in x.chunks(1001) {
            file.extend(enc.push(c).unwrap());
        }
        file.extend(enc.finish().unwrap());
        assert_eq!(&file[..4], b"OggS");
        let (pre_skip, end, y) = decode(file);
        assert!(pre_skip > 0);
        assert_eq!(end - pre_skip, x.len() as u64 * 2);
        assert_eq!(y.len(), x.len());
        // a lossy codec: the tone comes back, delayed by nothing (pre-skip removed)
        let snr = snr_db(&x[2400..], &y[2400..]);
        assert!(snr > 15.0, "SNR {snr:.1} dB");
    }

    #[test]
    fn each_push_ends_a_page_and_empty_audio_is_a_valid_file() {
        let (mut enc, start) = OpusEncoder::new().unwrap();
        // two header pages
        assert_eq!(start.windows(4).filter(|w| w == b"OggS").count(), 2);
        assert!(enc.push(&[0.1; 100]).unwrap().is_empty()); // less than a packet
        let page = enc.push(&[0.1; 1000]).unwrap();
        assert_eq!(&page[..4], b"OggS");
        let (mut enc, mut file) = OpusEncoder::new().unwrap();
        file.extend(enc.finish().unwrap());
        let (pre_skip, end, y) = decode(file);
        assert_eq!((end, y.len()), (pre_skip, 0));
    }

    #[test]
    fn odd_samples_are_clamped_not_failed() {
        let (mut enc, mut file) = OpusEncoder::new().unwrap();
        file.extend(
            enc.push(&[f32::NAN, f32::INFINITY, 7.0, -7.0, 0.0])
                .unwrap(),
        );
        file.extend(enc.finish().unwrap());
        let (_, _, y) = decode(file);
        assert_eq!(y.len(), 5);
        assert!(y.iter().all(|s| s.is_finite()));
    }
}
