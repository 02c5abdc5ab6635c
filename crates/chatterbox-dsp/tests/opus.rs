//! Ogg Opus decoding: signals encoded here with libopus (`unsafe-libopus`) into Ogg pages (the
//! `ogg` crate), as chatterbox-server writes them, come back at 48 kHz with exactly their length
//! (the pre-skip dropped, the end granule trimming the padding), their waveform, the header's
//! output gain and the decoded-length limit; damaged files are errors, never panics.
mod common;

use chatterbox_dsp::{audio, Audio, DspError};
use common::dominant_frequency;
use ogg::writing::{PacketWriteEndInfo, PacketWriter};
use std::f64::consts::PI;

const SERIAL: u32 = 0x6f70_7573;

/// `seconds` of `amp * sin(2 pi freq t)` at `rate`.
fn sine(rate: u32, seconds: f64, freq: f64, amp: f64) -> Vec<f32> {
    let n = (seconds * f64::from(rate)).round() as usize;
    (0..n)
        .map(|i| (amp * (2.0 * PI * freq * i as f64 / f64::from(rate)).sin()) as f32)
        .collect()
}

/// An Opus stream's packets: the two headers, and each audio packet with its granule position.
struct Stream {
    head: Vec<u8>,
    tags: Vec<u8>,
    packets: Vec<(Vec<u8>, u64)>,
}

/// Encodes `pcm` (`channels` interleaved, at `rate`, one of Opus's rates) to Ogg Opus: 20 ms
/// packets, one per page, a pre-skip of the encoder's look-ahead, the end granule trimming the
/// padding, and an output gain of `gain` (Q7.8 dB).
fn encode(pcm: &[f32], rate: u32, channels: usize, gain: i16) -> Vec<u8> {
    ogg_file(&encode_stream(pcm, rate, channels, gain))
}

/// The pages of `stream`: each header alone on its page, then one audio packet a page.
#[allow(clippy::unwrap_used)] // writing to a Vec does not fail
fn ogg_file(stream: &Stream) -> Vec<u8> {
    let mut w = PacketWriter::new(Vec::new());
    for header in [&stream.head, &stream.tags] {
        w.write_packet(header.clone(), SERIAL, PacketWriteEndInfo::EndPage, 0)
            .unwrap();
    }
    for (k, (packet, granule)) in stream.packets.iter().enumerate() {
        let end = if k + 1 == stream.packets.len() {
            PacketWriteEndInfo::EndStream
        } else {
            PacketWriteEndInfo::EndPage
        };
        w.write_packet(packet.clone(), SERIAL, end, *granule)
            .unwrap();
    }
    w.into_inner()
}

/// [`encode`]'s packets.
fn encode_stream(pcm: &[f32], rate: u32, channels: usize, gain: i16) -> Stream {
    let mut code = 0;
    // SAFETY: valid arguments and out pointer; destroyed below.
    let enc = unsafe {
        unsafe_libopus::opus_encoder_create(
            rate as i32,
            channels as i32,
            unsafe_libopus::OPUS_APPLICATION_AUDIO,
            &mut code,
        )
    };
    assert!(!enc.is_null() && code == unsafe_libopus::OPUS_OK, "{code}");
    let mut lookahead = 0i32;
    // SAFETY: a live encoder and one out argument.
    let code = unsafe {
        unsafe_libopus::opus_encoder_ctl!(
            enc,
            unsafe_libopus::OPUS_GET_LOOKAHEAD_REQUEST,
            &mut lookahead
        )
    };
    assert_eq!(code, unsafe_libopus::OPUS_OK);
    let per_sample = u64::from(48_000 / rate); // granule units (48 kHz) per input sample
    let pre_skip = lookahead as u64 * per_sample;
    let n = pcm.len() / channels;
    let frame = rate as usize / 50;

    let mut head = b"OpusHead".to_vec();
    head.extend_from_slice(&[1, channels as u8]);
    head.extend_from_slice(&(pre_skip as u16).to_le_bytes());
    head.extend_from_slice(&rate.to_le_bytes());
    head.extend_from_slice(&gain.to_le_bytes());
    head.push(0); // mapping family 0
    let mut tags = b"OpusTags".to_vec();
    tags.extend_from_slice(&4u32.to_le_bytes());
    tags.extend_from_slice(b"test");
    tags.extend_from_slice(&0u32.to_le_bytes());

    // every sample leaves the encoder: encode past the look-ahead, in whole packets
    let packets = (n + lookahead as usize).div_ceil(frame);
    let mut padded = pcm.to_vec();
    padded.resize(packets * frame * channels, 0.0);
    let mut out = [0u8; 4000];
    let mut written = Vec::new();
    for (k, chunk) in padded.chunks_exact(frame * channels).enumerate() {
        // SAFETY: `chunk` holds `frame` frames of `channels` samples; `out` 4000 bytes.
        let len = unsafe {
            unsafe_libopus::opus_encode_float(
                enc,
                chunk.as_ptr(),
                frame as i32,
                out.as_mut_ptr(),
                out.len() as i32,
            )
        };
        assert!(len > 0, "opus_encode_float: {len}");
        let last = k + 1 == packets;
        let granule = if last {
            pre_skip + n as u64 * per_sample
        } else {
            ((k + 1) * frame) as u64 * per_sample
        };
        written.push((out[..len as usize].to_vec(), granule));
    }
    // SAFETY: created above, destroyed once.
    unsafe { unsafe_libopus::opus_encoder_destroy(enc) };
    Stream {
        head,
        tags,
        packets: written,
    }
}

/// The Pearson correlation of `a` and `b` (equal lengths).
fn correlation(a: &[f32], b: &[f32]) -> f64 {
    let mean = |x: &[f32]| x.iter().map(|&v| f64::from(v)).sum::<f64>() / x.len() as f64;
    let (ma, mb) = (mean(a), mean(b));
    let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x) - ma, f64::from(y) - mb);
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    ab / (aa * bb).sqrt()
}

fn rms(x: &[f32]) -> f64 {
    (x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / x.len() as f64).sqrt()
}

/// The middle half of a signal, away from the codec's start-up.
fn middle(x: &[f32]) -> &[f32] {
    &x[x.len() / 4..x.len() * 3 / 4]
}

/// Checks `got` is `want` (at 48 kHz) through Opus: same length, correlated at lag 0, 440 Hz.
fn assert_sine(got: &Audio, want: &[f32]) {
    assert_eq!(got.sample_rate, 48_000);
    assert_eq!(got.samples.len(), want.len());
    let r = correlation(middle(&got.samples), middle(want));
    assert!(r > 0.9, "correlation {r}");
    let f = dominant_frequency(middle(&got.samples), 48_000);
    assert!((f - 440.0).abs() <= 1.0, "peak at {f} Hz");
}

#[test]
fn a_mono_sine_round_trips_at_48_khz_with_its_exact_length() {
    let x = sine(48_000, 1.0, 440.0, 0.5);
    let file = encode(&x, 48_000, 1, 0);
    let a = audio::decode(file, Some("opus")).unwrap();
    assert_sine(&a, &x);
    // aligned: the pre-skip is dropped, so lag 0 correlates best among nearby lags
    let m = middle(&a.samples);
    let at = |lag: usize| correlation(&m[..m.len() - 48], &middle(&x)[lag..m.len() - 48 + lag]);
    let r0 = at(0);
    assert!(r0 > 0.95, "lag 0: {r0}");
    for lag in [12, 24, 48] {
        assert!(at(lag) < r0, "lag {lag}: {} >= {r0}", at(lag));
    }
}

#[test]
fn every_opus_input_rate_decodes_at_48_khz() {
    // encoded from 8, 12, 16 and 24 kHz: 48 kHz out, 48000/rate times the samples
    for rate in [8_000u32, 12_000, 16_000, 24_000] {
        let x = sine(rate, 0.5, 440.0, 0.5);
        let a = audio::decode(encode(&x, rate, 1, 0), None).unwrap();
        let want = sine(48_000, 0.5, 440.0, 0.5);
        assert_eq!(a.sample_rate, 48_000, "{rate}");
        assert_eq!(a.samples.len(), want.len(), "{rate}");
        let f = dominant_frequency(middle(&a.samples), 48_000);
        assert!((f - 440.0).abs() <= 1.0, "{rate}: peak at {f} Hz");
    }
}

#[test]
fn stereo_is_the_channel_mean() {
    // left: the sine; right: silence. The mean is the sine at half its level.
    let left = sine(48_000, 1.0, 440.0, 0.5);
    let stereo: Vec<f32> = left.iter().flat_map(|&v| [v, 0.0]).collect();
    let a = audio::decode(encode(&stereo, 48_000, 2, 0), None).unwrap();
    let half: Vec<f32> = left.iter().map(|v| v / 2.0).collect();
    assert_sine(&a, &half);
    let ratio = rms(middle(&a.samples)) / rms(middle(&half));
    assert!((ratio - 1.0).abs() < 0.1, "rms ratio {ratio}");
}

#[test]
fn the_output_gain_scales_the_samples() {
    let x = sine(48_000, 0.5, 440.0, 0.5);
    let plain = audio::decode(encode(&x, 48_000, 1, 0), None).unwrap();
    // -6 dB in Q7.8: the same packets, every sample times 10^(-1536/5120)
    let quiet = audio::decode(encode(&x, 48_000, 1, -1536), None).unwrap();
    let factor = 10f32.powf(-1536.0 / 5120.0);
    assert_eq!(plain.samples.len(), quiet.samples.len());
    for (i, (p, q)) in plain.samples.iter().zip(&quiet.samples).enumerate() {
        assert!(
            (p * factor - q).abs() <= 1e-6,
            "[{i}]: {p} * {factor} vs {q}"
        );
    }
}

#[test]
fn the_limit_applies_to_opus_before_and_while_decoding() {
    let x = sine(48_000, 1.0, 440.0, 0.5);
    let file = encode(&x, 48_000, 1, 0);
    // the granule positions say 1 s (less the first page): refused before decoding
    let err = audio::decode_with_limit(file.clone(), None, 0.5).unwrap_err();
    assert!(
        matches!(&err, DspError::TooLong { seconds_limit, claimed_seconds: Some(c), .. }
            if *seconds_limit == 0.5 && *c > 0.9),
        "{err:?}"
    );
    assert!(err.to_string().contains("limit of 0.5 s"), "{err}");
    // exactly 1 s decodes
    assert_eq!(
        audio::decode_with_limit(file.clone(), None, 1.0)
            .unwrap()
            .samples
            .len(),
        48_000
    );
    // every granule 0 (no length given): decoding stops as it passes the limit
    let mut quiet = file;
    let mut page = 0;
    while let Some(at) = quiet[page..].windows(4).position(|w| w == b"OggS") {
        quiet = common::ogg_granule_patched(&quiet, page + at, 0);
        page += at + 4;
    }
    let err = audio::decode_with_limit(quiet, None, 0.5).unwrap_err();
    assert!(
        matches!(
            &err,
            DspError::TooLong {
                claimed_seconds: None,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn truncated_and_corrupt_files_are_errors_or_a_prefix_never_panics() {
    let x = sine(48_000, 0.5, 440.0, 0.5);
    let file = encode(&x, 48_000, 1, 0);
    let full = audio::decode(file.clone(), None).unwrap();
    // cut inside the headers: an error that says so
    for cut in [10, 30, 60] {
        let err = audio::decode(file[..cut].to_vec(), None).unwrap_err();
        assert!(matches!(err, DspError::Decode { .. }), "{cut}: {err:?}");
        assert!(err.to_string().contains("truncated"), "{cut}: {err}");
    }
    // cut inside the audio: the packets before the cut, the same samples
    let half = audio::decode(file[..file.len() / 2].to_vec(), None).unwrap();
    assert!(half.samples.len() < full.samples.len());
    assert!(half.samples.len() > full.samples.len() / 4);
    assert_eq!(half.samples[..], full.samples[..half.samples.len()]);
    // a damaged byte in an audio page: its checksum fails
    let mut damaged = file.clone();
    let at = damaged.len() / 2;
    damaged[at] ^= 0x55;
    let err = audio::decode(damaged, None).unwrap_err();
    assert!(err.to_string().contains("checksum"), "{err}");
    // a packet libopus refuses (code 3, zero frames), in a page with a good checksum
    let mut stream = encode_stream(&x, 48_000, 1, 0);
    stream.packets = vec![(vec![0xFB, 0x00], 960)];
    let err = audio::decode(ogg_file(&stream), None).unwrap_err();
    assert!(matches!(err, DspError::Decode { .. }), "{err:?}");
    assert!(
        err.to_string().contains("Opus packet 0 is corrupt"),
        "{err}"
    );
    // every cut and a byte overwritten anywhere: audio or a typed error, never a panic
    for cut in 0..file.len() {
        let result = audio::decode(file[..cut].to_vec(), None);
        if let Err(why) = common::audio_or_file_error(result) {
            panic!("cut at {cut}: {why}");
        }
    }
    for at in (0..file.len()).step_by(7) {
        let mut bytes = file.clone();
        bytes[at] = bytes[at].wrapping_add(1);
        if let Err(why) = common::audio_or_file_error(audio::decode(bytes, None)) {
            panic!("byte {at}: {why}");
        }
    }
}

#[test]
fn bad_identification_headers_are_named() {
    let file = encode(&sine(48_000, 0.1, 440.0, 0.5), 48_000, 1, 0);
    // the OpusHead packet starts at 28: channels at 37, mapping family at 46
    let ogg_patched = |at: usize, value: u8| {
        let mut bytes = common::patched(&file, at, &[value]);
        // the first page's CRC, made right again
        bytes = common::ogg_granule_patched(&bytes, 0, 0);
        audio::decode(bytes, None).unwrap_err()
    };
    let err = ogg_patched(37, 3);
    assert!(matches!(err, DspError::Decode { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("3 channels in channel mapping family 0"),
        "{err}"
    );
    let err = ogg_patched(46, 2);
    assert!(matches!(err, DspError::UnsupportedFormat { .. }), "{err:?}");
    assert!(
        err.to_string().contains("channel mapping family 2"),
        "{err}"
    );
    let err = ogg_patched(37, 0);
    assert!(err.to_string().contains("0 channels"), "{err}");
}
