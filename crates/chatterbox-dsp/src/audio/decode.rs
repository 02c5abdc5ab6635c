//! Decoding WAV, FLAC, MP3, Ogg Vorbis, AAC and ALAC in MP4/M4A and raw AAC (ADTS) with
//! symphonia, and Ogg Opus with libopus (see [`opus`]), downmixed to mono by the channel mean
//! (librosa's `to_mono`), at most [`MAX_DECODED_SECONDS`] long unless the caller gives another
//! limit (see [`limit`]).
//!
//! The container is chosen from the first bytes of the file (after any ID3v2 tags) and its
//! symphonia reader is opened directly. symphonia's own probe is not used: it scans the whole
//! input for a marker and, when none fits, logs `probe reached EOF` at error level through `log`
//! before failing, which a CLI user would see ahead of our error. Containers and codecs that are
//! recognised but not decoded (Matroska/WebM, AIFF, Ogg Speex, ...) are named in the error, with
//! [`SUPPORTED_FORMATS`].
//!
//! A WAV stream of unknown length (data size `0xFFFFFFFF`, what ffmpeg and `chatterbox speak
//! --stream -o -` write to pipes) is read to the end of the file: symphonia would read it in
//! whole packets and lose the last, partial one at the end of the data, so the size it reads is
//! the one the file holds (see [`UnknownWavSize`]).
//!
//! Two guards stand between hostile files and symphonia 0.6.1's faults: the Vorbis setup header
//! is checked before symphonia builds its codebooks (see [`vorbis`]), and a panic inside
//! symphonia becomes an error (see [`decode_source`]).
use super::Audio;
use crate::error::{check_signal, DspError, Result};
use limit::{Limit, MonoSamples};
pub use limit::{MAX_DECODED_SECONDS, MAX_SAMPLE_RATE};
use std::fs::File;
use std::io::{Cursor, Read, Seek, SeekFrom};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use symphonia::core::codecs::audio::well_known as codec_ids;
use symphonia::core::codecs::audio::{AudioCodecId, AudioDecoderOptions};
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::{FormatOptions, FormatReader, TrackType};
use symphonia::core::io::{MediaSource, MediaSourceStream};
use symphonia::default::formats::{
    AdtsReader, FlacReader, IsoMp4Reader, MpaReader, OggReader, WavReader,
};

/// The formats [`decode`] and [`load`] accept, as listed in their errors.
pub const SUPPORTED_FORMATS: &str =
    "WAV, FLAC, MP3, Ogg Vorbis, Ogg Opus, AAC or ALAC in MP4/M4A, raw AAC (ADTS)";

/// Decodes the audio file at `path` to mono, at most [`MAX_DECODED_SECONDS`] long (longer audio
/// is [`DspError::TooLong`]).
pub fn load(path: impl AsRef<Path>) -> Result<Audio> {
    load_with_limit(path, MAX_DECODED_SECONDS)
}

/// Decodes the audio file at `path` to mono, at most `max_seconds` long: a file whose header
/// claims more is refused before decoding, and decoding stops as soon as the audio passes the
/// limit, with [`DspError::TooLong`] (audio of exactly `max_seconds` is accepted).
/// `max_seconds` must be positive and finite ([`DspError::InvalidParameter`]).
pub fn load_with_limit(path: impl AsRef<Path>, max_seconds: f64) -> Result<Audio> {
    let limit = Limit::new(max_seconds)?;
    let path = path.as_ref();
    let file = File::open(path).map_err(|source| DspError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    decode_source(file, &path.display().to_string(), limit)
}

/// Decodes an in-memory audio file to mono, at most [`MAX_DECODED_SECONDS`] long (longer audio
/// is [`DspError::TooLong`]). The content decides the format; `extension` (`"wav"`, `"mp3"`,
/// ...) is accepted for callers that have one and is not needed.
pub fn decode(bytes: Vec<u8>, extension: Option<&str>) -> Result<Audio> {
    decode_with_limit(bytes, extension, MAX_DECODED_SECONDS)
}

/// [`decode`] with a limit of `max_seconds` instead of [`MAX_DECODED_SECONDS`], as
/// [`load_with_limit`] has (a server gives the longest upload it accepts).
pub fn decode_with_limit(
    bytes: Vec<u8>,
    extension: Option<&str>,
    max_seconds: f64,
) -> Result<Audio> {
    let _ = extension;
    let limit = Limit::new(max_seconds)?;
    decode_source(Cursor::new(bytes), "<memory>", limit)
}

/// The containers with a symphonia reader in this build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Container {
    Wav,
    Flac,
    Ogg,
    Mp4,
    Mpeg,
    Adts,
}

impl Container {
    fn name(self) -> &'static str {
        match self {
            Container::Wav => "WAV",
            Container::Flac => "FLAC",
            Container::Ogg => "Ogg",
            Container::Mp4 => "MP4",
            Container::Mpeg => "MPEG audio",
            Container::Adts => "ADTS",
        }
    }

    fn open<'s>(
        self,
        mss: MediaSourceStream<'s>,
    ) -> symphonia::core::errors::Result<Box<dyn FormatReader + 's>> {
        let opts = FormatOptions::default();
        Ok(match self {
            Container::Wav => Box::new(WavReader::try_new(mss, opts)?),
            Container::Flac => Box::new(FlacReader::try_new(mss, opts)?),
            Container::Ogg => Box::new(OggReader::try_new(mss, opts)?),
            Container::Mp4 => Box::new(IsoMp4Reader::try_new(mss, opts)?),
            Container::Mpeg => Box::new(MpaReader::try_new(mss, opts)?),
            Container::Adts => Box::new(AdtsReader::try_new(mss, opts)?),
        })
    }
}

/// Bytes looked at to recognise a container.
const HEAD_LEN: usize = 16;
/// Bytes of an Ogg file searched for its Vorbis headers (libvorbis's take about 4 KB). Past
/// them (a huge comment header), the setup header is checked only once symphonia's Ogg reader
/// has read it.
const OGG_HEADER_SCAN: u64 = 256 << 10;

/// What the first bytes of a file say it is.
enum Sniffed {
    Supported(Container),
    /// A format we recognise but do not decode, by name.
    Known(&'static str),
    Unknown,
}

/// Recognises the container from its first bytes (`head`, at most [`HEAD_LEN`]).
fn sniff(head: &[u8]) -> Sniffed {
    let at = |offset: usize, magic: &[u8]| head.get(offset..offset + magic.len()) == Some(magic);
    if at(0, b"RIFF") || at(0, b"RIFX") || at(0, b"RF64") || at(0, b"BW64") {
        return match (at(0, b"RIFF"), at(8, b"WAVE")) {
            (true, true) => Sniffed::Supported(Container::Wav),
            (false, true) => Sniffed::Known("big-endian or 64-bit WAV (RIFX/RF64/BW64)"),
            _ if at(8, b"AVI ") => Sniffed::Known("AVI"),
            _ if at(8, b"WEBP") => Sniffed::Known("WebP (an image)"),
            _ => Sniffed::Known("a RIFF file that is not WAVE"),
        };
    }
    if at(0, b"fLaC") {
        return Sniffed::Supported(Container::Flac);
    }
    if at(0, b"OggS") {
        return Sniffed::Supported(Container::Ogg);
    }
    if at(4, b"ftyp") {
        return Sniffed::Supported(Container::Mp4);
    }
    if let [0xFF, b1, ..] = *head {
        if b1 & 0xE0 == 0xE0 {
            // a 12-bit sync word with layer bits 00 is ADTS AAC, anything else an MPEG audio layer
            return Sniffed::Supported(if b1 & 0xF6 == 0xF0 {
                Container::Adts
            } else {
                Container::Mpeg
            });
        }
    }
    const KNOWN: [(usize, &[u8], &str); 12] = [
        (0, b"\x1A\x45\xDF\xA3", "Matroska/WebM"),
        (0, b"FORM", "AIFF"),
        (0, b"caff", "Core Audio (CAF)"),
        (0, b"#!AMR", "AMR"),
        (0, b"\x30\x26\xB2\x75\x8E\x66\xCF\x11", "WMA/ASF"),
        (0, b"wvpk", "WavPack"),
        (0, b"MAC ", "Monkey's Audio"),
        (0, b".snd", "Sun/NeXT AU"),
        (0, b"MThd", "MIDI"),
        (0, b"ADIF", "ADIF AAC"),
        (4, b"moov", "QuickTime without an ftyp box"),
        (4, b"mdat", "QuickTime without an ftyp box"),
    ];
    KNOWN
        .iter()
        .find(|(offset, magic, _)| at(*offset, magic))
        .map_or(Sniffed::Unknown, |(_, _, name)| Sniffed::Known(name))
}

/// Size of the ID3v2 tag at the start of `head` (header, body and footer), if there is one.
fn id3v2_len(head: &[u8]) -> Option<u64> {
    match *head {
        [b'I', b'D', b'3', major, minor, flags, s0, s1, s2, s3, ..]
            if major < 0xFF && minor < 0xFF && [s0, s1, s2, s3].iter().all(|b| b & 0x80 == 0) =>
        {
            let body = [s0, s1, s2, s3]
                .iter()
                .fold(0u64, |acc, &b| (acc << 7) | u64::from(b));
            let footer = if flags & 0x10 != 0 { 10 } else { 0 };
            Some(10 + body + footer)
        }
        _ => None,
    }
}

/// Skips ID3v2 tags and reads up to [`HEAD_LEN`] bytes there. Returns the offset of the
/// container and its first bytes, and leaves `r` at offset 0.
fn read_head<R: Read + Seek>(r: &mut R) -> std::io::Result<(u64, Vec<u8>)> {
    let mut start = 0u64;
    loop {
        r.seek(SeekFrom::Start(start))?;
        let mut head = Vec::with_capacity(HEAD_LEN);
        r.by_ref().take(HEAD_LEN as u64).read_to_end(&mut head)?;
        match id3v2_len(&head) {
            // each tag moves on by at least 10 bytes, so this ends at the end of the input
            Some(len) => start = start.saturating_add(len),
            None => {
                r.seek(SeekFrom::Start(0))?;
                return Ok((start, head));
            }
        }
    }
}

/// A name for the codecs a container may hold that this build does not decode.
fn codec_name(id: AudioCodecId) -> String {
    let name = match id {
        codec_ids::CODEC_ID_OPUS => "Opus",
        codec_ids::CODEC_ID_SPEEX => "Speex",
        codec_ids::CODEC_ID_MP1 => "MPEG Layer I",
        codec_ids::CODEC_ID_MP2 => "MPEG Layer II",
        codec_ids::CODEC_ID_AC3 => "AC-3",
        codec_ids::CODEC_ID_EAC3 => "E-AC-3",
        codec_ids::CODEC_ID_DCA => "DTS",
        codec_ids::CODEC_ID_WMA => "WMA",
        codec_ids::CODEC_ID_MUSEPACK => "Musepack",
        _ => return format!("codec {id}"),
    };
    name.to_string()
}

/// Decodes `source` and turns a panic inside symphonia into [`DspError::Decode`]. symphonia is
/// not panic-free on malformed input: in builds with overflow checks (debug, tests), a WAV with
/// thousands of channels overflows its block-align product (`wave/chunks.rs`) and an MP4 `stts`
/// count near 2^32 its sample arithmetic (`atoms/stts.rs`), where release builds wrap; its Ogg
/// Vorbis `lookup1_values` asserts in every build (checked beforehand by [`vorbis`] where the
/// headers are within the first [`OGG_HEADER_SCAN`] bytes). Nothing outlives the unwind: the
/// reader, decoder and buffers are all dropped with it. The panic hook still prints the panic.
/// The same guard covers the Ogg Opus path ([`opus`]): libopus and the `ogg` crate are not known
/// to panic, but both are checked for overflow in debug builds like symphonia.
fn decode_source<S: MediaSource + 'static>(source: S, name: &str, limit: Limit) -> Result<Audio> {
    std::panic::catch_unwind(AssertUnwindSafe(|| decode_unguarded(source, name, limit)))
        .unwrap_or_else(|payload| {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(DspError::Decode {
                source_name: name.to_string(),
                reason: format!("the decoder failed on malformed data (it panicked: {what})"),
            })
        })
}

fn decode_unguarded<S: MediaSource + 'static>(
    mut source: S,
    name: &str,
    limit: Limit,
) -> Result<Audio> {
    let unsupported = |what: String| DspError::UnsupportedFormat {
        source_name: name.to_string(),
        reason: format!("{what}; the formats that work are {SUPPORTED_FORMATS}"),
    };
    let corrupt = |reason: String| DspError::Decode {
        source_name: name.to_string(),
        reason,
    };
    // symphonia errors: an unsupported feature is a format error, anything else corruption
    let symphonia_error = |e: SymphoniaError| match e {
        SymphoniaError::Unsupported(what) => unsupported(what.to_string()),
        SymphoniaError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            corrupt("the file ends early (truncated)".into())
        }
        e => corrupt(e.to_string()),
    };
    let io_error = |e: std::io::Error| corrupt(format!("read failed: {e}"));

    let (start, head) = read_head(&mut source).map_err(io_error)?;
    let container = match sniff(&head) {
        Sniffed::Supported(c) => c,
        _ if head.is_empty() && start == 0 => return Err(corrupt("the file is empty".into())),
        _ if head.is_empty() => return Err(corrupt("nothing follows the ID3v2 tag".into())),
        Sniffed::Known(format) => return Err(unsupported(format!("{format} is not supported"))),
        Sniffed::Unknown => {
            let first = &head[..head.len().min(8)];
            return Err(unsupported(format!(
                "not a recognised audio file (it starts with \"{}\")",
                first.escape_ascii()
            )));
        }
    };

    let bad_vorbis = |why: String| corrupt(format!("bad Vorbis setup header: {why}"));
    if container == Container::Ogg {
        // the Vorbis headers, before symphonia's Ogg reader reads them
        let mut head = Vec::new();
        source.seek(SeekFrom::Start(start)).map_err(io_error)?;
        source
            .by_ref()
            .take(OGG_HEADER_SCAN)
            .read_to_end(&mut head)
            .map_err(io_error)?;
        source.seek(SeekFrom::Start(0)).map_err(io_error)?;
        if opus::starts_opus(&head) {
            return opus::decode(&mut source, start, name, limit);
        }
        if let [ident, _comment, setup] = &ogg_packets(&head, 3)[..] {
            if ident.starts_with(b"\x01vorbis") {
                vorbis::check_setup(setup).map_err(bad_vorbis)?;
            }
        }
    }
    let patched = match container {
        Container::Wav => wav_data_size(&mut source, start).map_err(io_error)?,
        _ => None,
    };
    let source: Box<dyn MediaSource> = match patched {
        Some((at, size)) => Box::new(UnknownWavSize {
            inner: source,
            pos: 0,
            at,
            size: size.to_le_bytes(),
        }),
        None => Box::new(source),
    };
    let mut mss = MediaSourceStream::new(source, Default::default());
    if start > 0 {
        mss.seek(SeekFrom::Start(start)).map_err(io_error)?;
    }
    let mut format = container.open(mss).map_err(symphonia_error)?;
    let track = format
        .default_track(TrackType::Audio)
        .ok_or_else(|| corrupt(format!("the {} file has no audio track", container.name())))?;
    let track_id = track.id;
    let claimed_frames = track.num_frames;
    let params = track
        .codec_params
        .as_ref()
        .and_then(|p| p.audio())
        .ok_or_else(|| corrupt("the audio track has no codec parameters".into()))?
        .clone();
    // the identification header (30 bytes) and the setup header, as symphonia's Ogg reader
    // passes them (its `lookup1_values` has run on them by now: checked above for Ogg)
    if let (codec_ids::CODEC_ID_VORBIS, Some(extra)) = (params.codec, &params.extra_data) {
        if extra.starts_with(b"\x01vorbis") {
            vorbis::check_setup(extra.get(30..).unwrap_or_default()).map_err(bad_vorbis)?;
        }
    }
    let codecs = symphonia::default::get_codecs();
    if codecs.get_audio_decoder(params.codec).is_none() {
        let codec = codec_name(params.codec);
        return Err(unsupported(match container {
            Container::Ogg => format!("Ogg {codec} is not supported"),
            c => format!("{codec} in {} is not supported", c.name()),
        }));
    }
    // the length the container gives, before anything is decoded; MP3 and ADTS lengths are
    // symphonia's estimates from the bit rate, left to the decoded length
    let exact_length = !matches!(container, Container::Mpeg | Container::Adts);
    if let (Some(frames), Some(rate), true) = (claimed_frames, params.sample_rate, exact_length) {
        limit.check_claim(frames, rate, name)?;
    }
    let mut decoder = codecs
        .make_audio_decoder(&params, &AudioDecoderOptions::default())
        .map_err(symphonia_error)?;
    let mut rate = params.sample_rate;
    let mut mono = match rate {
        Some(rate) => Some(MonoSamples::new(limit, rate, name)?),
        None => None,
    };
    let mut interleaved: Vec<f32> = Vec::new();
    loop {
        let packet = match format.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            // a file cut short keeps what was decoded before the cut
            Err(SymphoniaError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                break
            }
            Err(e) => return Err(symphonia_error(e)),
        };
        if packet.track_id != track_id {
            continue;
        }
        let buf = decoder.decode(&packet).map_err(symphonia_error)?;
        let spec = buf.spec();
        let out = match &mut mono {
            Some(out) => out,
            // the rate of the first buffer, where the container does not give one
            None => {
                rate = Some(spec.rate());
                mono.insert(MonoSamples::new(limit, spec.rate(), name)?)
            }
        };
        let channels = spec.channels().count().max(1);
        interleaved.resize(buf.samples_interleaved(), 0.0);
        buf.copy_to_slice_interleaved(&mut interleaved);
        out.push_interleaved(&interleaved, channels)?;
    }
    let (Some(out), Some(sample_rate)) = (mono, rate) else {
        return Err(corrupt("the sample rate is not given".into()));
    };
    let samples = out.into_samples();
    // no samples, or NaN / infinite ones (a float WAV may hold any bit pattern)
    check_signal(name, &samples)?;
    Ok(Audio {
        samples,
        sample_rate,
    })
}

mod limit;
mod opus;
mod vorbis;

/// Chunks of a WAV file looked through for its data chunk.
const WAV_CHUNK_SCAN: usize = 1024;

/// Where a WAV file (the RIFF header at `start`) of unknown length has its data size
/// ([`UNKNOWN_WAV_SIZE`](super::UNKNOWN_WAV_SIZE)) and the size of the data it holds: the
/// rest of the file (at most `0xFFFFFFFE` bytes). `None` for a file whose data size is given
/// or whose data chunk is not found (symphonia says what is wrong). Leaves `r` at offset 0.
fn wav_data_size<R: Read + Seek>(r: &mut R, start: u64) -> std::io::Result<Option<(u64, u32)>> {
    let mut pos = start.saturating_add(12);
    let mut found = None;
    for _ in 0..WAV_CHUNK_SCAN {
        r.seek(SeekFrom::Start(pos))?;
        let mut header = [0u8; 8];
        if r.read_exact(&mut header).is_err() {
            break;
        }
        let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        if &header[..4] == b"data" {
            if len == super::UNKNOWN_WAV_SIZE {
                let data_start = pos.saturating_add(8);
                let end = r.seek(SeekFrom::End(0))?;
                let held = end.saturating_sub(data_start).min(u64::from(u32::MAX - 1));
                // `held` fits: it is at most u32::MAX - 1
                found = Some((
                    pos.saturating_add(4),
                    u32::try_from(held).unwrap_or(u32::MAX - 1),
                ));
            }
            break;
        }
        if len == super::UNKNOWN_WAV_SIZE {
            break;
        }
        // chunks are padded to an even length
        pos = pos.saturating_add(8 + u64::from(len) + u64::from(len & 1));
    }
    r.seek(SeekFrom::Start(0))?;
    Ok(found)
}

/// A WAV file whose data size reads as `size` (the 4 bytes at offset `at`) instead of
/// [`UNKNOWN_WAV_SIZE`](super::UNKNOWN_WAV_SIZE): every other byte is the file's own.
struct UnknownWavSize<S> {
    inner: S,
    /// Offset of the next byte read.
    pos: u64,
    at: u64,
    size: [u8; 4],
}

impl<S: Read> Read for UnknownWavSize<S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let from = self.pos;
        self.pos = from.saturating_add(n as u64);
        for (i, &b) in self.size.iter().enumerate() {
            let offset = self.at.saturating_add(i as u64);
            if (from..self.pos).contains(&offset) {
                if let Some(slot) = usize::try_from(offset - from)
                    .ok()
                    .and_then(|k| buf.get_mut(k))
                {
                    *slot = b;
                }
            }
        }
        Ok(n)
    }
}

impl<S: Seek> Seek for UnknownWavSize<S> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = self.inner.seek(to)?;
        Ok(self.pos)
    }
}

impl<S: MediaSource> MediaSource for UnknownWavSize<S> {
    fn is_seekable(&self) -> bool {
        self.inner.is_seekable()
    }

    fn byte_len(&self) -> Option<u64> {
        self.inner.byte_len()
    }
}

/// The first `n` packets of the first logical stream in the start of an Ogg file (fewer where
/// `head` ends first).
fn ogg_packets(head: &[u8], n: usize) -> Vec<Vec<u8>> {
    let mut packets = Vec::new();
    let mut current = Vec::new();
    let mut serial = None;
    let mut rest = head;
    while packets.len() < n {
        let Some(segments) = rest.get(26).map(|&s| usize::from(s)) else {
            break;
        };
        let Some(lacing) = rest.get(27..27 + segments) else {
            break;
        };
        let body_len: usize = lacing.iter().map(|&l| usize::from(l)).sum();
        let (Some(body), true) = (
            rest.get(27 + segments..27 + segments + body_len),
            rest.starts_with(b"OggS"),
        ) else {
            break;
        };
        if *serial.get_or_insert(&rest[14..18]) == &rest[14..18] {
            let mut at = 0;
            for &l in lacing {
                current.extend_from_slice(&body[at..at + usize::from(l)]);
                at += usize::from(l);
                if l < 255 && packets.len() < n {
                    packets.push(std::mem::take(&mut current));
                }
            }
        }
        rest = &rest[27 + segments + body_len..];
    }
    packets
}
