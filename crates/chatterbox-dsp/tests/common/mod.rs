//! Inputs shared by the decoder tests (`hostile.rs`, `allocation.rs`, `properties.rs`,
//! `limits.rs`, `opus.rs`, `formats.rs`): the ffmpeg fixtures of tests/data, hand-made headers
//! with absurd values, files that expand to hours, and a frequency estimate.
// each test binary uses part of this module; a missing fixture or marker is a failing test
#![allow(dead_code, clippy::panic)]

use chatterbox_dsp::{Audio, DspError};

/// What any decode may return: audio with samples, a positive rate and finite values, or an
/// error of the kinds a file can cause.
pub fn audio_or_file_error(result: Result<Audio, DspError>) -> Result<(), String> {
    match result {
        Ok(a) if a.sample_rate == 0 || a.samples.is_empty() => Err(format!(
            "bad audio: {} samples at {} Hz",
            a.samples.len(),
            a.sample_rate
        )),
        Ok(a) if a.samples.iter().any(|v| !v.is_finite()) => Err("non-finite sample".into()),
        Ok(_)
        | Err(
            DspError::UnsupportedFormat { .. }
            | DspError::Decode { .. }
            | DspError::EmptyAudio { .. }
            | DspError::NonFinite { .. }
            | DspError::UnsupportedSampleRate { .. }
            | DspError::TooLong { .. },
        ) => Ok(()),
        Err(e) => Err(format!("unexpected error kind: {e:?}")),
    }
}

/// The decodable fixtures of tests/data (README.md there says how each was made).
pub const FIXTURES: [&str; 9] = [
    "aac_mono_24k.m4a",
    "aac_stereo_44k.m4a",
    "alac_mono_24k.m4a",
    "alac_stereo_44k.m4a",
    "aac_mono_24k.aac",
    "flac_mono_24k.flac",
    "mp3_mono_24k.mp3",
    "vorbis_mono_24k.ogg",
    "opus_mono_48k.ogg",
];

pub fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every fixture, plus a 16-bit mono WAV (written here: a WAV fixture would be the same bytes).
pub fn valid_files() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = FIXTURES
        .iter()
        .map(|n| (n.to_string(), fixture(n)))
        .collect();
    let pcm: Vec<u8> = (0..1000)
        .flat_map(|i| (((i as f32 * 0.1).sin() * 8000.0) as i16).to_le_bytes())
        .collect();
    files.push((
        "pcm16.wav".into(),
        wav(1, 1, 16_000, 32_000, 2, 16, &[], &pcm),
    ));
    files
}

fn chunk(id: &[u8; 4], size: u32, body: &[u8]) -> Vec<u8> {
    [&id[..], &size.to_le_bytes(), body].concat()
}

/// A WAV file with the given `fmt ` fields (`ext`: bytes after the 16 basic ones) and `data`.
#[allow(clippy::too_many_arguments)] // one per `fmt ` field
pub fn wav(
    tag: u16,
    channels: u16,
    rate: u32,
    byte_rate: u32,
    block_align: u16,
    bits: u16,
    ext: &[u8],
    data: &[u8],
) -> Vec<u8> {
    let mut fmt = Vec::new();
    for field in [
        &tag.to_le_bytes()[..],
        &channels.to_le_bytes(),
        &rate.to_le_bytes(),
    ] {
        fmt.extend_from_slice(field);
    }
    fmt.extend_from_slice(&byte_rate.to_le_bytes());
    fmt.extend_from_slice(&block_align.to_le_bytes());
    fmt.extend_from_slice(&bits.to_le_bytes());
    fmt.extend_from_slice(ext);
    let body = [
        &b"WAVE"[..],
        &chunk(b"fmt ", fmt.len() as u32, &fmt),
        &chunk(b"data", data.len() as u32, data),
    ]
    .concat();
    chunk(b"RIFF", body.len() as u32, &body)
}

/// A WAV file made by [`wav`] (no extension bytes) whose RIFF and data chunk sizes claim
/// `data_len` bytes of samples, whatever it holds.
pub fn wav_claiming(bytes: &[u8], data_len: u32) -> Vec<u8> {
    let riff = patched(bytes, 4, &(data_len + 36).to_le_bytes());
    patched(&riff, 40, &data_len.to_le_bytes())
}

/// `bytes` with `new` written at `at`.
pub fn patched(bytes: &[u8], at: usize, new: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[at..at + new.len()].copy_from_slice(new);
    out
}

/// The offset of the first `fourcc` in an MP4 file (the box type, 4 bytes after its size).
pub fn find(bytes: &[u8], fourcc: &[u8]) -> usize {
    bytes
        .windows(fourcc.len())
        .position(|w| w == fourcc)
        .unwrap_or_else(|| panic!("no {:?}", String::from_utf8_lossy(fourcc)))
}

/// A FLAC STREAMINFO body (34 bytes).
#[allow(clippy::too_many_arguments)]
pub fn streaminfo(
    min_block: u16,
    max_block: u16,
    min_frame: u32,
    max_frame: u32,
    rate: u32,
    channels: u8,
    bits: u8,
    total: u64,
) -> Vec<u8> {
    let mut b = Vec::with_capacity(34);
    b.extend_from_slice(&min_block.to_be_bytes());
    b.extend_from_slice(&max_block.to_be_bytes());
    b.extend_from_slice(&min_frame.to_be_bytes()[1..]);
    b.extend_from_slice(&max_frame.to_be_bytes()[1..]);
    let packed: u64 = (u64::from(rate & 0xF_FFFF) << 44)
        | (u64::from((channels.wrapping_sub(1)) & 7) << 41)
        | (u64::from((bits.wrapping_sub(1)) & 31) << 36)
        | (total & 0xF_FFFF_FFFF);
    b.extend_from_slice(&packed.to_be_bytes());
    b.extend_from_slice(&[0; 16]);
    b
}

/// The CRC of an Ogg page (polynomial 0x04c11db7, not reflected), with its CRC field zeroed.
fn ogg_crc(page: &[u8]) -> u32 {
    let mut crc = 0u32;
    for (i, &byte) in page.iter().enumerate() {
        let byte = if (22..26).contains(&i) { 0 } else { byte };
        crc ^= u32::from(byte) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04c1_1db7
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// `bytes` with the Ogg page at `page` given a granule position of `granule`, its CRC made
/// right again.
pub fn ogg_granule_patched(bytes: &[u8], page: usize, granule: u64) -> Vec<u8> {
    let mut bytes = patched(bytes, page + 6, &granule.to_le_bytes());
    let segments = usize::from(bytes[page + 26]);
    let len = 27
        + segments
        + bytes[page + 27..page + 27 + segments]
            .iter()
            .map(|&s| usize::from(s))
            .sum::<usize>();
    let crc = ogg_crc(&bytes[page..page + len]);
    bytes[page + 22..page + 26].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// The offset of the last Ogg page in `bytes`.
pub fn last_ogg_page(bytes: &[u8]) -> usize {
    bytes
        .windows(4)
        .rposition(|w| w == b"OggS")
        .unwrap_or_else(|| panic!("no Ogg page"))
}

/// A FLAC frame's CRC-8 (polynomial 0x07) or CRC-16 (0x8005), MSB first, initial value 0.
fn flac_crc(bytes: &[u8], bits: u32, poly: u32) -> u32 {
    let top = 1u32 << (bits - 1);
    let mask = if bits == 32 {
        u32::MAX
    } else {
        (1 << bits) - 1
    };
    let mut crc = 0u32;
    for &b in bytes {
        crc ^= u32::from(b) << (bits - 8);
        for _ in 0..8 {
            crc = (if crc & top != 0 {
                (crc << 1) ^ poly
            } else {
                crc << 1
            }) & mask;
        }
    }
    crc
}

/// Samples in each frame of [`flac_constant`]: the largest FLAC block.
pub const FLAC_BLOCK: u64 = 65_535;

/// A 16-bit mono FLAC at `rate` of `frames` frames of [`FLAC_BLOCK`] samples, each a constant
/// subframe (the value 4096: 0.125) in 13-15 bytes. STREAMINFO gives `total` samples (0:
/// unknown). 2000 frames, 27 KB, are 131 M samples.
pub fn flac_constant(rate: u32, frames: u32, total: u64) -> Vec<u8> {
    let block = FLAC_BLOCK as u16;
    let mut out = b"fLaC".to_vec();
    out.extend_from_slice(&[0x80, 0, 0, 34]); // the last metadata block: STREAMINFO, 34 bytes
    out.extend_from_slice(&streaminfo(block, block, 0, 0, rate, 1, 16, total));
    for n in 0..frames {
        // sync, fixed block size; block size in 16 bits at the end of the header, rate from
        // STREAMINFO; mono, 16 bits
        let mut frame = vec![0xFF, 0xF8, 0x70, 0x08];
        // the frame number, UTF-8 coded
        match n {
            0..=0x7F => frame.push(n as u8),
            0x80..=0x7FF => {
                frame.extend_from_slice(&[0xC0 | (n >> 6) as u8, 0x80 | (n & 0x3F) as u8])
            }
            _ => frame.extend_from_slice(&[
                0xE0 | ((n >> 12) & 0x0F) as u8,
                0x80 | ((n >> 6) & 0x3F) as u8,
                0x80 | (n & 0x3F) as u8,
            ]),
        }
        frame.extend_from_slice(&(block - 1).to_be_bytes());
        frame.push(flac_crc(&frame, 8, 0x07) as u8);
        frame.extend_from_slice(&[0x00, 0x10, 0x00]); // a constant subframe of 4096
        let crc = flac_crc(&frame, 16, 0x8005) as u16;
        frame.extend_from_slice(&crc.to_be_bytes());
        out.extend_from_slice(&frame);
    }
    out
}

/// The frequency in 300..600 Hz with the most energy (Hann-windowed DFT on a 0.5 Hz grid).
pub fn dominant_frequency(x: &[f32], rate: u32) -> f64 {
    use std::f64::consts::PI;
    let n = x.len() as f64;
    let power = |f: f64| {
        let (mut re, mut im) = (0.0, 0.0);
        for (i, &v) in x.iter().enumerate() {
            let w = 0.5 - 0.5 * (2.0 * PI * i as f64 / n).cos();
            let phase = 2.0 * PI * f * i as f64 / f64::from(rate);
            re += w * f64::from(v) * phase.cos();
            im -= w * f64::from(v) * phase.sin();
        }
        re * re + im * im
    };
    let grid = (0..600).map(|k| 300.0 + k as f64 * 0.5);
    grid.map(|f| (power(f), f))
        .fold(
            (f64::MIN, 0.0),
            |best, cur| if cur.0 > best.0 { cur } else { best },
        )
        .1
}

/// An Ogg fixture with `new` written at `at` in its first page (the codec's identification
/// header starts at 28), the page's CRC made right again.
fn ogg_first_page_patched(name: &str, at: usize, new: &[u8]) -> Vec<u8> {
    let mut bytes = patched(&fixture(name), at, new);
    let segments = usize::from(bytes[26]);
    let len = 27
        + segments
        + bytes[27..27 + segments]
            .iter()
            .map(|&s| usize::from(s))
            .sum::<usize>();
    let crc = ogg_crc(&bytes[..len]);
    bytes[22..26].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Headers with absurd sizes and counts, for every container: each must give a typed error or
/// valid audio, quickly and without allocating out of proportion.
pub fn hostile_inputs() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add = |name: &str, bytes: Vec<u8>| out.push((name.to_string(), bytes));
    let pcm = vec![0x11u8; 512];

    // WAV
    let ok = wav(1, 1, 16_000, 32_000, 2, 16, &[], &pcm);
    add(
        "wav: RIFF size 0xFFFFFFFF",
        patched(&ok, 4, &u32::MAX.to_le_bytes()),
    );
    add(
        "wav: data size 0xFFFFFFFF",
        patched(&ok, 40, &u32::MAX.to_le_bytes()),
    );
    add(
        "wav: fmt size 0xFFFFFFFF",
        patched(&ok, 16, &u32::MAX.to_le_bytes()),
    );
    add("wav: fmt size 0", patched(&ok, 16, &0u32.to_le_bytes()));
    for channels in [0u16, 3, 64, 1024, 65535] {
        let align = channels.wrapping_mul(2);
        add(
            &format!("wav: {channels} channels"),
            wav(
                1,
                channels,
                16_000,
                32_000 * u32::from(channels),
                align,
                16,
                &[],
                &pcm,
            ),
        );
    }
    for rate in [0u32, 1, 4_000_000_000, u32::MAX] {
        add(
            &format!("wav: rate {rate}"),
            wav(1, 1, rate, rate.wrapping_mul(2), 2, 16, &[], &pcm),
        );
    }
    for bits in [0u16, 1, 7, 12, 33, 64, 65535] {
        add(
            &format!("wav: {bits} bits"),
            wav(1, 1, 16_000, 32_000, 2, bits, &[], &pcm),
        );
        add(
            &format!("wav: float {bits} bits"),
            wav(3, 1, 16_000, 32_000, 4, bits, &[], &pcm),
        );
    }
    for align in [0u16, 1, 3, 65535] {
        add(
            &format!("wav: block align {align}"),
            wav(1, 1, 16_000, 32_000, align, 16, &[], &pcm),
        );
    }
    // WAVE_FORMAT_EXTENSIBLE with absurd extension sizes and a zero channel mask
    let mut ext = vec![0xFF, 0xFF, 16, 0, 0, 0, 0, 0, 1, 0];
    ext.extend_from_slice(&[0; 14]);
    add(
        "wav: extensible, cbSize 65535",
        wav(0xFFFE, 2, 16_000, 64_000, 4, 16, &ext, &pcm),
    );
    let ext = [22, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 1, 0];
    add(
        "wav: extensible, short",
        wav(0xFFFE, 2, 16_000, 64_000, 4, 16, &ext, &pcm),
    );
    // ADPCM (MS: cbSize, samples per block, coefficient count; IMA: samples per block)
    for spb in [0u16, 1, 65535] {
        let mut ext = vec![32, 0];
        ext.extend_from_slice(&spb.to_le_bytes());
        ext.extend_from_slice(&[0xFF, 0xFF]);
        add(
            &format!("wav: MS ADPCM, {spb} samples/block"),
            wav(2, 2, 16_000, 16_000, 65535, 4, &ext, &pcm),
        );
        let ext = [&[2u8, 0][..], &spb.to_le_bytes()].concat();
        add(
            &format!("wav: IMA ADPCM, {spb} samples/block"),
            wav(0x11, 2, 16_000, 16_000, 65535, 4, &ext, &pcm),
        );
    }
    add(
        "wav: MP3 codec in WAV",
        wav(0x55, 1, 16_000, 4_000, 1, 0, &[], &pcm),
    );
    // a chunk that claims 4 GB before the data
    let mut big = ok[..36].to_vec();
    big.extend_from_slice(&chunk(b"LIST", 0xFFFF_FFF0, b"INFOjunk"));
    big.extend_from_slice(&ok[36..]);
    add("wav: LIST chunk of 4 GB", big);

    // FLAC: STREAMINFO at 8..42 of the fixture
    let flac = fixture("flac_mono_24k.flac");
    for (name, body) in [
        ("block sizes 0", streaminfo(0, 0, 0, 0, 24_000, 1, 16, 7200)),
        (
            "block size 65535",
            streaminfo(65535, 65535, 0, 0, 24_000, 1, 16, 7200),
        ),
        (
            "min block > max",
            streaminfo(4096, 16, 0, 0, 24_000, 1, 16, 7200),
        ),
        (
            "frame sizes 2^24-1",
            streaminfo(2304, 2304, 0xFF_FFFF, 0xFF_FFFF, 24_000, 1, 16, 7200),
        ),
        ("rate 0", streaminfo(2304, 2304, 0, 0, 0, 1, 16, 7200)),
        (
            "rate 2^20-1",
            streaminfo(2304, 2304, 0, 0, 0xF_FFFF, 1, 16, 7200),
        ),
        (
            "8 channels",
            streaminfo(2304, 2304, 0, 0, 24_000, 8, 16, 7200),
        ),
        ("32 bits", streaminfo(2304, 2304, 0, 0, 24_000, 1, 32, 7200)),
        ("1 bit", streaminfo(2304, 2304, 0, 0, 24_000, 1, 1, 7200)),
        (
            "2^36-1 samples",
            streaminfo(2304, 2304, 0, 0, 24_000, 1, 16, (1 << 36) - 1),
        ),
        ("0 samples", streaminfo(2304, 2304, 0, 0, 24_000, 1, 16, 0)),
    ] {
        add(&format!("flac: {name}"), patched(&flac, 8, &body));
    }
    add(
        "flac: STREAMINFO length 2^24-1",
        patched(&flac, 5, &[0xFF, 0xFF, 0xFF]),
    );
    add("flac: STREAMINFO length 0", patched(&flac, 5, &[0, 0, 0]));
    // a metadata block inserted after STREAMINFO that claims 16 MB, with absurd inner lengths
    for (kind, name) in [
        (2u8, "APPLICATION"),
        (3, "SEEKTABLE"),
        (4, "VORBIS_COMMENT"),
        (5, "CUESHEET"),
        (6, "PICTURE"),
        (127, "invalid"),
    ] {
        let mut bytes = flac[..42].to_vec();
        bytes.extend_from_slice(&[kind, 0xFF, 0xFF, 0xFF]);
        bytes.extend_from_slice(&[0xFF; 64]);
        bytes.extend_from_slice(&flac[42..]);
        add(&format!("flac: {name} block of 16 MB"), bytes);
        let mut bytes = flac[..42].to_vec();
        bytes.extend_from_slice(&[kind, 0, 0, 64]);
        bytes.extend_from_slice(&[0xFF; 64]);
        bytes.extend_from_slice(&flac[42..]);
        add(&format!("flac: {name} block, inner lengths 2^32-1"), bytes);
    }

    // MP4 (AAC and ALAC fixtures)
    let m4a = fixture("aac_mono_24k.m4a");
    let alac = fixture("alac_mono_24k.m4a");
    let at = |fourcc: &[u8], off: usize| find(&m4a, fourcc) + off;
    for (name, pos, value) in [
        ("moov size 0 (to the end)", at(b"moov", 0) - 4, 0u32),
        ("moov size 2^32-1", at(b"moov", 0) - 4, u32::MAX),
        ("moov size 9", at(b"moov", 0) - 4, 9),
        ("mdat size 2^32-1", at(b"mdat", 0) - 4, u32::MAX),
        ("trak size 2^32-1", at(b"trak", 0) - 4, u32::MAX),
        ("stsd size 2^32-1", at(b"stsd", 0) - 4, u32::MAX),
        ("mdhd timescale 0", at(b"mdhd", 16), 0),
        ("mdhd duration 2^32-1", at(b"mdhd", 20), u32::MAX),
        ("mvhd timescale 0", at(b"mvhd", 16), 0),
        ("stsd 2^32-1 entries", at(b"stsd", 8), u32::MAX),
        ("stts 2^32-1 entries", at(b"stts", 8), u32::MAX),
        ("stts sample count 2^32-1", at(b"stts", 12), u32::MAX),
        ("stts sample delta 2^32-1", at(b"stts", 16), u32::MAX),
        ("stsc 2^32-1 entries", at(b"stsc", 8), u32::MAX),
        ("stsc samples per chunk 2^32-1", at(b"stsc", 16), u32::MAX),
        ("stsc first chunk 0", at(b"stsc", 12), 0),
        ("stsz 2^32-1 samples", at(b"stsz", 12), u32::MAX),
        ("stsz fixed size 2^32-1", at(b"stsz", 8), u32::MAX),
        ("stsz first size 2^32-1", at(b"stsz", 16), u32::MAX),
        ("stco 2^32-1 entries", at(b"stco", 8), u32::MAX),
        ("stco offset 2^32-1", at(b"stco", 12), u32::MAX),
        ("elst 2^32-1 entries", at(b"elst", 8), u32::MAX),
        ("elst media time 2^31-1", at(b"elst", 16), 0x7FFF_FFFF),
        ("mp4a sample rate 0", at(b"mp4a", 28), 0),
    ] {
        add(
            &format!("m4a: {name}"),
            patched(&m4a, pos, &value.to_be_bytes()),
        );
    }
    for (name, pos, value) in [
        ("mp4a 0 channels", at(b"mp4a", 20), 0u16),
        ("mp4a 65535 channels", at(b"mp4a", 20), 65535),
        ("mp4a 65535-bit samples", at(b"mp4a", 22), 65535),
        ("mp4a version 2", at(b"mp4a", 12), 2),
    ] {
        add(
            &format!("m4a: {name}"),
            patched(&m4a, pos, &value.to_be_bytes()),
        );
    }
    // esds descriptor lengths of 2^28-1
    add(
        "m4a: esds lengths 2^28-1",
        patched(&m4a, at(b"esds", 9), &[0xFF, 0xFF, 0xFF, 0x7F]),
    );
    // 64-bit box sizes: ftyp, then moov or mdat declared 2^63 bytes long
    let ftyp = &m4a[..at(b"ftyp", 0) - 4 + 28];
    let moov_start = at(b"moov", 0) - 4;
    for fourcc in [b"moov", b"mdat", b"free"] {
        for size in [1u64 << 63, u64::MAX, 0, 15] {
            let mut bytes = ftyp.to_vec();
            bytes.extend_from_slice(&1u32.to_be_bytes());
            bytes.extend_from_slice(fourcc);
            bytes.extend_from_slice(&size.to_be_bytes());
            bytes.extend_from_slice(&m4a[moov_start + 8..]);
            add(
                &format!(
                    "m4a: {} with 64-bit size {size}",
                    String::from_utf8_lossy(fourcc)
                ),
                bytes,
            );
        }
    }
    // the ALAC magic cookie (after the second "alac"): frame length, bit depth, channels, ...
    let cookie = find(&alac[find(&alac, b"alac") + 4..], b"alac") + find(&alac, b"alac") + 4;
    for (name, off, value) in [
        ("frame length 2^32-1", 8usize, vec![0xFF, 0xFF, 0xFF, 0xFF]),
        ("frame length 0", 8, vec![0, 0, 0, 0]),
        ("bit depth 0", 13, vec![0]),
        ("bit depth 64", 13, vec![64]),
        ("bit depth 255", 13, vec![255]),
        ("255 channels", 17, vec![255]),
        ("0 channels", 17, vec![0]),
        ("rice params 255", 14, vec![255, 255, 255]),
        ("max frame bytes 2^32-1", 20, vec![0xFF; 4]),
        ("sample rate 0", 28, vec![0; 4]),
    ] {
        add(
            &format!("alac: {name}"),
            patched(&alac, cookie + off, &value),
        );
    }

    // MP3: ID3v2 tag at 0 (10-byte body), first frame at 20, "Info" tag at 36
    let mp3 = fixture("mp3_mono_24k.mp3");
    let info = find(&mp3, b"Info");
    add("mp3: ID3v2 size 2^28-1", patched(&mp3, 6, &[0x7F; 4]));
    add("mp3: ID3v2 with footer flag", patched(&mp3, 5, &[0x10]));
    add(
        "mp3: Info frames 2^32-1",
        patched(&mp3, info + 8, &[0xFF; 4]),
    );
    add(
        "mp3: Info bytes 2^32-1",
        patched(&mp3, info + 12, &[0xFF; 4]),
    );
    add(
        "mp3: LAME delay and padding 4095",
        patched(&mp3, info + 4 + 116 + 21, &[0xFF; 3]),
    );
    add("mp3: header bits all set", patched(&mp3, 20, &[0xFF; 4]));
    add("mp3: reserved rate index", patched(&mp3, 22, &[0x8C]));
    add("mp3: free-format bitrate", patched(&mp3, 22, &[0x04]));
    add("mp3: layer I", patched(&mp3, 21, &[0xF7]));
    add("mp3: layer II", patched(&mp3, 21, &[0xF5]));
    add(
        "mp3: frame syncs only",
        [0xFF, 0xFB, 0x90, 0x64].repeat(512),
    );
    add(
        "mp3: ID3v2 tags back to back",
        b"ID3\x04\0\0\0\0\0\0".repeat(400),
    );

    // ADTS: 7-byte headers; frame length (13 bits), rate index, channel configuration
    let adts = fixture("aac_mono_24k.aac");
    add(
        "adts: frame length 2^13-1",
        patched(&adts, 3, &[adts[3] | 0x03, 0xFF, adts[5] | 0xE0]),
    );
    add(
        "adts: frame length 0",
        patched(&adts, 3, &[adts[3] & 0xFC, 0, adts[5] & 0x1F]),
    );
    add(
        "adts: frame length 7",
        patched(&adts, 3, &[adts[3] & 0xFC, 0, (adts[5] & 0x1F) | 0xE0]),
    );
    add("adts: rate index 15", patched(&adts, 2, &[adts[2] | 0x3C]));
    add(
        "adts: rate index 13",
        patched(&adts, 2, &[(adts[2] & 0xC3) | (13 << 2)]),
    );
    add(
        "adts: channel configuration 0",
        patched(&adts, 2, &[adts[2] & 0xFE, adts[3] & 0x3F]),
    );
    add(
        "adts: channel configuration 7",
        patched(&adts, 2, &[adts[2] | 1, adts[3] | 0xC0]),
    );
    add(
        "adts: profile 3 (LTP)",
        patched(&adts, 2, &[adts[2] | 0xC0]),
    );

    // Ogg Vorbis: identification header fields (CRC kept right so the page is read)
    for (name, at, value) in [
        ("0 channels", 39usize, vec![0u8]),
        ("255 channels", 39, vec![255]),
        ("rate 0", 40, vec![0; 4]),
        ("rate 2^32-1", 40, vec![0xFF; 4]),
        ("block sizes 2^15", 56, vec![0xFF]),
        ("block sizes 1", 56, vec![0x00]),
        ("short block > long", 56, vec![0x67]),
        ("version 1", 35, vec![1]),
    ] {
        add(
            &format!("vorbis: {name}"),
            ogg_first_page_patched("vorbis_mono_24k.ogg", at, &value),
        );
    }
    let ogg = fixture("vorbis_mono_24k.ogg");
    add("ogg: 255 segments of 255", {
        let mut b = ogg[..26].to_vec();
        b.push(255);
        b.extend_from_slice(&[255; 255]);
        b.extend_from_slice(&[0; 300]);
        b
    });
    // Vorbis setup headers: 20 bytes that symphonia 0.6.1 would build into 430 MB (256 times),
    // a codebook its `lookup1_values` asserts on (a panic in release builds too), and the most
    // the check in decode.rs lets through (two codebooks of 2^16 16-bit codewords)
    add(
        "vorbis: 256 codebooks of 2^17 17-bit codewords",
        vorbis_codebook_bomb(256),
    );
    add(
        "vorbis: 1 codebook of 2^17 17-bit codewords",
        vorbis_codebook_bomb(1),
    );
    add(
        "vorbis: codebook of 2^17 entries in 32 dimensions",
        vorbis_with_codebooks(1, 17, &[1 << 17], 32),
    );
    add(
        "vorbis: codebook of 2^24-1 entries in 2 dimensions",
        vorbis_with_codebooks(1, 24, &[(1 << 24) - 1], 2),
    );
    add(
        "vorbis: 2 codebooks of 2^16 16-bit codewords",
        vorbis_with_codebooks(2, 16, &[1 << 16], 31),
    );

    // files longer than MAX_DECODED_SECONDS: a WAV header claiming 3 hours, constant FLAC
    // frames for 4.5 hours (unknown length, and the length given), an Opus end granule of 2^62
    add(
        "wav: RIFF and data sizes of 3 hours",
        wav_claiming(&ok, 3 * 3600 * 32_000),
    );
    add(
        "flac: 250 constant frames of 65535 at 1 kHz",
        flac_constant(1_000, 250, 0),
    );
    add(
        "flac: 250 constant frames of 65535 at 1 kHz, length given",
        flac_constant(1_000, 250, 250 * FLAC_BLOCK),
    );
    let opus = fixture("opus_mono_48k.ogg");
    add(
        "opus: end granule 2^62",
        ogg_granule_patched(&opus, last_ogg_page(&opus), 1 << 62),
    );

    // OpusHead: channel count at 37, mapping family at 46
    add(
        "opus: 255 channels",
        ogg_first_page_patched("opus_mono_48k.ogg", 37, &[255]),
    );
    add(
        "opus: mapping family 255",
        ogg_first_page_patched("opus_mono_48k.ogg", 46, &[255]),
    );

    out
}

/// Bits written least-significant first, as Vorbis packs them.
struct BitWriter {
    bytes: Vec<u8>,
    used: u32,
}

impl BitWriter {
    fn put(&mut self, value: u64, bits: u32) {
        for i in 0..bits {
            if self.used.is_multiple_of(8) {
                self.bytes.push(0);
            }
            let last = self.bytes.len() - 1;
            self.bytes[last] |= (((value >> i) & 1) as u8) << (self.used % 8);
            self.used += 1;
        }
    }
}

/// One Ogg page of `serial` holding whole `packets` (`flags`: 4 for the last page).
fn ogg_page(serial: &[u8], seq: u32, flags: u8, granule: u64, packets: &[&[u8]]) -> Vec<u8> {
    let mut lacing = Vec::new();
    for p in packets {
        lacing.extend(std::iter::repeat_n(255u8, p.len() / 255));
        lacing.push((p.len() % 255) as u8);
    }
    let mut page = vec![b'O', b'g', b'g', b'S', 0, flags];
    page.extend_from_slice(&granule.to_le_bytes());
    page.extend_from_slice(serial);
    page.extend_from_slice(&seq.to_le_bytes());
    page.extend_from_slice(&[0; 4]);
    page.push(lacing.len() as u8);
    page.extend_from_slice(&lacing);
    for p in packets {
        page.extend_from_slice(p);
    }
    let crc = ogg_crc(&page);
    page[22..26].copy_from_slice(&crc.to_le_bytes());
    page
}

/// An Ogg Vorbis file whose setup header declares `count` codebooks of the largest size
/// symphonia accepts (131072 entries, 17-bit codewords, 31 dimensions): 20 bytes each, and over
/// 400 MB each for symphonia 0.6.1's decoder to build. Nothing after the codebooks is valid.
pub fn vorbis_codebook_bomb(count: usize) -> Vec<u8> {
    vorbis_with_codebooks(count, 17, &[1 << 17], 31)
}

/// An Ogg Vorbis file whose setup header has `count` codebooks, each with `runs[i]` codewords of
/// length `first_len + i` (length-ordered) and a type-1 lookup of `dims` dimensions (one
/// multiplicand when there are fewer than `2^dims` entries). The rest of the header is invalid.
pub fn vorbis_with_codebooks(count: usize, first_len: u32, runs: &[u64], dims: u16) -> Vec<u8> {
    let entries: u64 = runs.iter().sum();
    let ogg = fixture("vorbis_mono_24k.ogg");
    let first_page = 27 + 1 + usize::from(ogg[27]);
    let serial = &ogg[14..18];
    let mut setup = BitWriter {
        bytes: b"\x05vorbis".to_vec(),
        used: 56,
    };
    setup.put(count as u64 - 1, 8);
    for _ in 0..count {
        setup.put(0x564342, 24); // sync
        setup.put(dims.into(), 16);
        setup.put(entries, 24);
        setup.put(1, 1); // length-ordered
        setup.put(u64::from(first_len) - 1, 5);
        let mut done = 0;
        for &run in runs {
            setup.put(run, 64 - (entries - done).leading_zeros());
            done += run;
        }
        setup.put(1, 4); // lookup type 1
        setup.put(0, 32); // minimum
        setup.put(0, 32); // delta
        setup.put(0, 4); // 1-bit multiplicands
        setup.put(0, 1); // no sequence
        setup.put(0, 1); // lookup1_values(entries, dims) = 1 multiplicand
    }
    setup.put(0, 64); // not a valid rest of the setup header
    let comment = b"\x03vorbis\0\0\0\0\0\0\0\0\x01";
    assert!(
        setup.bytes.len() < 250 * 255,
        "one page holds at most 255 lacing values"
    );
    [
        &ogg[..first_page],
        &ogg_page(serial, 1, 0, 0, &[comment, &setup.bytes]),
        &ogg_page(serial, 2, 4, 256, &[&[0; 16]]),
    ]
    .concat()
}
