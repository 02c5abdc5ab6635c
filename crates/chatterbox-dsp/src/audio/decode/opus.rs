//! Ogg Opus (RFC 7845), decoded at 48 kHz by libopus 1.3.1 (`unsafe-libopus`: libopus translated
//! to Rust, the crate the server encodes Opus with) from the pages the `ogg` crate reads.
//!
//! Channel mapping families 0 (mono, stereo), 1 (Vorbis order, up to 8 channels) and 255
//! (unordered) are decoded with libopus's multistream decoder and averaged to mono like every
//! other format; the ambisonic families (2, 3) are refused. The pre-skip of the identification
//! header is dropped from the start, the end page's granule position trims the end, and the
//! header's output gain is applied. The decoded-length limit applies before decoding where the
//! granule positions give the length, and to the samples as they are decoded.
use super::limit::{Limit, MonoSamples};
use super::SUPPORTED_FORMATS;
use crate::audio::Audio;
use crate::error::{check_signal, DspError, Result};
use ogg::reading::{OggReadError, PacketReader};
use std::io::{Read, Seek, SeekFrom};

/// Opus decodes at 48 kHz whatever rate was encoded (the header's input rate is only
/// informational), and its granule positions count 48 kHz samples.
pub(super) const OPUS_RATE: u32 = 48_000;
/// The longest Opus packet: 120 ms at 48 kHz, per channel.
const MAX_PACKET_FRAMES: usize = 5760;
/// Bytes at the end of the file searched for the last page (a page is at most 65307 bytes).
const TAIL_SCAN: u64 = 128 << 10;

/// Whether the first Ogg page at the start of `head` begins an Opus stream.
pub(super) fn starts_opus(head: &[u8]) -> bool {
    let Some(&segments) = head.get(26) else {
        return false;
    };
    let at = 27 + usize::from(segments);
    head.starts_with(b"OggS") && head.get(at..at + 8) == Some(&b"OpusHead"[..])
}

/// The identification header (RFC 7845 section 5.1).
#[derive(Debug)]
struct OpusHead {
    channels: usize,
    /// 48 kHz samples to drop from the start.
    pre_skip: u16,
    /// Output gain, Q7.8 dB.
    gain: i16,
    streams: u8,
    coupled: u8,
    /// The decoder stream of each output channel (255: silence).
    mapping: Vec<u8>,
}

/// Why an identification header is refused.
enum BadHead {
    Unsupported(String),
    Corrupt(String),
}

impl OpusHead {
    fn parse(p: &[u8]) -> std::result::Result<Self, BadHead> {
        let [b'O', b'p', b'u', b's', b'H', b'e', b'a', b'd', version, channels, s0, s1, _, _, _, _, g0, g1, family, ref table @ ..] =
            *p
        else {
            return Err(BadHead::Corrupt(format!(
                "its OpusHead header is {} bytes, shorter than 19",
                p.len()
            )));
        };
        if version >> 4 != 0 {
            return Err(BadHead::Unsupported(format!(
                "Ogg Opus version {version} (only version 0.x is defined)"
            )));
        }
        let channels = usize::from(channels);
        if channels == 0 {
            return Err(BadHead::Corrupt(
                "its OpusHead header has 0 channels".into(),
            ));
        }
        let (streams, coupled, mapping) = match family {
            0 if channels <= 2 => (1, channels as u8 - 1, (0..channels as u8).collect()),
            0 => {
                return Err(BadHead::Corrupt(format!(
                    "{channels} channels in channel mapping family 0 (at most 2)"
                )))
            }
            1 | 255 => {
                if family == 1 && channels > 8 {
                    return Err(BadHead::Corrupt(format!(
                        "{channels} channels in channel mapping family 1 (at most 8)"
                    )));
                }
                match *table {
                    [streams, coupled, ref mapping @ ..] if mapping.len() >= channels => {
                        (streams, coupled, mapping[..channels].to_vec())
                    }
                    _ => {
                        return Err(BadHead::Corrupt(
                            "its OpusHead header ends inside the channel mapping table".into(),
                        ))
                    }
                }
            }
            f => {
                return Err(BadHead::Unsupported(format!(
                    "Ogg Opus with channel mapping family {f} (ambisonics or undefined)"
                )))
            }
        };
        if streams == 0 || coupled > streams || usize::from(streams) + usize::from(coupled) > 255 {
            return Err(BadHead::Corrupt(format!(
                "{streams} streams of which {coupled} coupled in the channel mapping table"
            )));
        }
        Ok(Self {
            channels,
            pre_skip: u16::from_le_bytes([s0, s1]),
            gain: i16::from_le_bytes([g0, g1]),
            streams,
            coupled,
            mapping,
        })
    }

    /// The output gain as a factor.
    fn gain_factor(&self) -> f32 {
        10f32.powf(f32::from(self.gain) / (20.0 * 256.0))
    }
}

/// An owned libopus multistream decoder at 48 kHz.
struct Decoder {
    st: *mut unsafe_libopus::OpusMSDecoder,
    channels: usize,
}

impl Decoder {
    /// A decoder for `head`'s streams, or libopus's error code.
    fn new(head: &OpusHead) -> std::result::Result<Self, i32> {
        let channels = i32::try_from(head.channels).map_err(|_| unsafe_libopus::OPUS_BAD_ARG)?;
        if head.mapping.len() != head.channels {
            return Err(unsafe_libopus::OPUS_BAD_ARG);
        }
        let mut code = 0;
        // SAFETY: `mapping` holds `channels` entries, which is all libopus reads of it (it
        // checks each against the stream counts); the out pointer is valid, a null result is
        // checked.
        let st = unsafe {
            unsafe_libopus::opus_multistream_decoder_create(
                OPUS_RATE as i32,
                channels,
                i32::from(head.streams),
                i32::from(head.coupled),
                head.mapping.as_ptr(),
                &mut code,
            )
        };
        if st.is_null() || code != unsafe_libopus::OPUS_OK {
            return Err(if code == unsafe_libopus::OPUS_OK {
                unsafe_libopus::OPUS_ALLOC_FAIL
            } else {
                code
            });
        }
        Ok(Self {
            st,
            channels: head.channels,
        })
    }

    /// Decodes one packet into `pcm` (interleaved, room for [`MAX_PACKET_FRAMES`] frames):
    /// the frames decoded, or libopus's error code.
    fn decode(&mut self, packet: &[u8], pcm: &mut [f32]) -> std::result::Result<usize, i32> {
        let len = i32::try_from(packet.len()).map_err(|_| unsafe_libopus::OPUS_INVALID_PACKET)?;
        if pcm.len() < MAX_PACKET_FRAMES * self.channels {
            return Err(unsafe_libopus::OPUS_BUFFER_TOO_SMALL);
        }
        // SAFETY: a live decoder; `packet` holds `len` bytes; `pcm` holds MAX_PACKET_FRAMES
        // frames of `channels` samples, the most libopus writes when given that frame size.
        let n = unsafe {
            unsafe_libopus::opus_multistream_decode_float(
                self.st,
                packet.as_ptr(),
                len,
                pcm.as_mut_ptr(),
                MAX_PACKET_FRAMES as i32,
                0,
            )
        };
        usize::try_from(n).map_err(|_| n)
    }
}

impl Drop for Decoder {
    fn drop(&mut self) {
        // SAFETY: created by `opus_multistream_decoder_create`, destroyed once.
        unsafe { unsafe_libopus::opus_multistream_decoder_destroy(self.st) }
    }
}

/// Decodes the Ogg Opus stream that starts at `start` in `source` to mono at 48 kHz, at most
/// `limit` long; `name` names the source in errors.
pub(super) fn decode<R: Read + Seek>(
    source: &mut R,
    start: u64,
    name: &str,
    limit: Limit,
) -> Result<Audio> {
    let corrupt = |reason: String| DspError::Decode {
        source_name: name.to_string(),
        reason,
    };
    let unsupported = |what: String| DspError::UnsupportedFormat {
        source_name: name.to_string(),
        reason: format!("{what} is not supported; the formats that work are {SUPPORTED_FORMATS}"),
    };
    let ogg_error = |e: OggReadError| {
        corrupt(match e {
            OggReadError::HashMismatch(..) => {
                "an Ogg page is damaged (its checksum does not match)".into()
            }
            OggReadError::ReadError(e) => format!("read failed: {e}"),
            OggReadError::NoCapturePatternFound => "no Ogg page where one was expected".into(),
            OggReadError::InvalidStreamStructVer(v) => format!("an Ogg page of version {v}"),
            OggReadError::InvalidData => "the Ogg pages are out of order or malformed".into(),
        })
    };
    let truncated = || corrupt("the file ends inside its Opus headers (truncated)".into());

    source
        .seek(SeekFrom::Start(start))
        .map_err(|e| corrupt(format!("read failed: {e}")))?;
    let mut pages = PacketReader::new(source);
    // The next packet: `None` at the end of the file, or where it is cut short (what was
    // decoded before the cut is kept, as for every format).
    let next = |pages: &mut PacketReader<&mut R>| match pages.read_packet() {
        Ok(p) => Ok(p),
        Err(OggReadError::ReadError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Ok(None)
        }
        Err(e) => Err(ogg_error(e)),
    };

    let head_packet = next(&mut pages)?.ok_or_else(truncated)?;
    let serial = head_packet.stream_serial();
    let head = OpusHead::parse(&head_packet.data).map_err(|bad| match bad {
        BadHead::Unsupported(what) => unsupported(what),
        BadHead::Corrupt(why) => corrupt(format!("not a valid Ogg Opus stream: {why}")),
    })?;
    let tags = loop {
        let p = next(&mut pages)?.ok_or_else(truncated)?;
        if p.stream_serial() == serial {
            break p;
        }
    };
    if !tags.data.starts_with(b"OpusTags") {
        return Err(corrupt(
            "not a valid Ogg Opus stream: its second packet is not an OpusTags header".into(),
        ));
    }

    let mut decoder = Decoder::new(&head).map_err(|code| {
        corrupt(format!(
            "libopus refused the stream's channel layout ({})",
            unsafe_libopus::opus_strerror(code)
        ))
    })?;
    let channels = head.channels;
    let mut out = MonoSamples::new(limit, OPUS_RATE, name)?;
    let mut pcm = vec![0f32; MAX_PACKET_FRAMES * channels];
    let mut to_skip = usize::from(head.pre_skip);
    let mut claim_checked = false;
    // packets read after the headers (of every stream in the file), for errors
    for index in 0u64.. {
        let Some(packet) = next(&mut pages)? else {
            break;
        };
        if packet.stream_serial() != serial {
            continue;
        }
        if !claim_checked {
            // the length the granule positions give, from the end of the first audio page to
            // the last page (a lower bound: the first page's own samples are not counted)
            let last = last_granule(pages.get_mut(), serial)
                .map_err(|e| corrupt(format!("read failed: {e}")))?;
            if let Some(last) = last {
                let claimed = last
                    .saturating_sub(packet.absgp_page())
                    .saturating_sub(u64::from(head.pre_skip));
                limit.check_claim(claimed, OPUS_RATE, name)?;
            }
            claim_checked = true;
        }
        // end trimming: the last granule counts the samples the stream holds, so the encoder's
        // padding is cut before it counts towards the limit
        let end = if packet.last_in_stream() {
            usize::try_from(packet.absgp_page().saturating_sub(u64::from(head.pre_skip))).ok()
        } else {
            None
        };
        if let Some(end) = end {
            out.truncate(end);
        }
        // an empty packet holds no frame (libopus would conceal a lost one)
        if !packet.data.is_empty() {
            let frames = decoder.decode(&packet.data, &mut pcm).map_err(|code| {
                corrupt(format!(
                    "Opus packet {index} is corrupt ({})",
                    unsafe_libopus::opus_strerror(code)
                ))
            })?;
            let skip = to_skip.min(frames);
            to_skip -= skip;
            let keep = match end {
                Some(end) => (frames - skip).min(end - out.len()),
                None => frames - skip,
            };
            out.push_interleaved(&pcm[skip * channels..(skip + keep) * channels], channels)?;
        }
        if packet.last_in_stream() {
            break;
        }
    }
    let mut samples = out.into_samples();
    if head.gain != 0 {
        let gain = head.gain_factor();
        samples.iter_mut().for_each(|s| *s *= gain);
    }
    check_signal(name, &samples)?;
    Ok(Audio {
        samples,
        sample_rate: OPUS_RATE,
    })
}

/// The granule position of the last page of stream `serial` that ends a packet, among the last
/// [`TAIL_SCAN`] bytes of `r`; leaves `r` where it was. Pages are recognised by their header
/// alone (capture pattern, version 0, serial, a size that fits): a granule is only a claim, checked
/// again by the decoded length.
fn last_granule<R: Read + Seek>(r: &mut R, serial: u32) -> std::io::Result<Option<u64>> {
    let here = r.stream_position()?;
    let end = r.seek(SeekFrom::End(0))?;
    r.seek(SeekFrom::Start(end.saturating_sub(TAIL_SCAN)))?;
    let mut tail = Vec::new();
    r.by_ref().take(TAIL_SCAN).read_to_end(&mut tail)?;
    r.seek(SeekFrom::Start(here))?;
    let mut last = None;
    let starts = tail.windows(4).enumerate().filter(|(_, w)| *w == b"OggS");
    for (at, _) in starts {
        let Some(header) = tail.get(at..at + 27) else {
            break;
        };
        let segments = usize::from(header[26]);
        let Some(lacing) = tail.get(at + 27..at + 27 + segments) else {
            continue;
        };
        let body: usize = lacing.iter().map(|&l| usize::from(l)).sum();
        let page_serial = u32::from_le_bytes([header[14], header[15], header[16], header[17]]);
        let mut granule = [0u8; 8];
        granule.copy_from_slice(&header[6..14]);
        let granule = u64::from_le_bytes(granule);
        let whole = at + 27 + segments + body <= tail.len();
        if header[4] == 0 && page_serial == serial && granule != u64::MAX && whole {
            last = Some(granule);
        }
    }
    Ok(last)
}
