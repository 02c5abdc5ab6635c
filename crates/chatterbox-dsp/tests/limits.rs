//! The decoded-length limit: a file whose header claims more than the limit is refused before
//! decoding, a file that expands past it (FLAC frames of constant subframes) stops as soon as it
//! passes it, and audio of exactly the limit decodes.
mod common;

use chatterbox_dsp::audio::{self, MAX_DECODED_SECONDS, MAX_SAMPLE_RATE};
use chatterbox_dsp::DspError;
use common::{flac_constant, wav, FLAC_BLOCK};
use std::time::{Duration, Instant};

/// Far above what any refusal here takes (milliseconds when nothing past the limit is decoded;
/// decoding the whole of the largest input would take minutes and gigabytes), far below a
/// test-runner timeout.
const QUICK: Duration = Duration::from_secs(10);

/// A 16-bit mono WAV at `rate` whose samples are a ramp, `n` of them.
fn wav_of(rate: u32, n: usize) -> Vec<u8> {
    let pcm: Vec<u8> = (0..n)
        .flat_map(|i| ((i % 2000) as i16 - 1000).to_le_bytes())
        .collect();
    wav(1, 1, rate, rate * 2, 2, 16, &[], &pcm)
}

/// Decodes with `limit` (or the default), checks the error is `TooLong` with that limit and
/// the claim given, and that it came quickly; returns the message.
#[allow(clippy::unwrap_used, clippy::panic)] // a check that fails is a failing test
fn refused(bytes: Vec<u8>, limit: Option<f64>, claimed: Option<f64>) -> String {
    let t = Instant::now();
    let result = match limit {
        Some(s) => audio::decode_with_limit(bytes, None, s),
        None => audio::decode(bytes, None),
    };
    let elapsed = t.elapsed();
    let err = result.unwrap_err();
    let want = limit.unwrap_or(MAX_DECODED_SECONDS);
    match &err {
        DspError::TooLong {
            source_name,
            seconds_limit,
            claimed_seconds,
        } => {
            assert_eq!(source_name, "<memory>");
            assert_eq!(*seconds_limit, want);
            match (claimed_seconds, claimed) {
                (None, None) => {}
                (Some(got), Some(want)) => {
                    assert!((got - want).abs() < 1e-6, "claimed {got} s, want {want} s")
                }
                (got, want) => panic!("claimed {got:?}, want {want:?}"),
            }
        }
        e => panic!("expected TooLong, got {e:?}"),
    }
    assert!(elapsed < QUICK, "refused after {elapsed:?}");
    err.to_string()
}

#[test]
fn a_wav_header_claiming_hours_is_refused_before_decoding() {
    // 512 bytes of samples, a data chunk that claims 3 hours at 16 kHz
    let ok = wav_of(16_000, 256);
    let three_hours = 3 * 3600 * 16_000u32 * 2;
    let bytes = common::wav_claiming(&ok, three_hours);
    let msg = refused(bytes, None, Some(10_800.0));
    for part in ["limit of 600 s", "its header says 10800.0 s", "<memory>"] {
        assert!(msg.contains(part), "{msg:?} lacks {part:?}");
    }
}

#[test]
fn constant_flac_frames_stop_as_soon_as_they_pass_the_limit() {
    // 2000 frames of 65535 samples in 27 KB: 131 M samples, 4.5 hours at 8 kHz (the whole would
    // be 524 MB of f32). Unknown length: decoding stops after the 74th frame (600 s is 73.2).
    let bomb = flac_constant(8_000, 2_000, 0);
    assert!(bomb.len() < 32 << 10, "{} bytes", bomb.len());
    let msg = refused(bomb, None, None);
    assert!(msg.contains("limit of 600 s"), "{msg}");
    assert!(msg.contains("decoding stopped"), "{msg}");
    // the same frames with their length in STREAMINFO: refused before decoding
    let total = 2_000 * FLAC_BLOCK;
    let claimed = total as f64 / 8_000.0;
    refused(flac_constant(8_000, 2_000, total), None, Some(claimed));
}

#[test]
fn a_smaller_limit_refuses_a_3_second_clip_and_accepts_its_length() {
    let clip = wav_of(16_000, 48_000); // 3 s
    let msg = refused(clip.clone(), Some(1.0), Some(3.0));
    assert!(msg.contains("limit of 1 s"), "{msg}");
    refused(clip.clone(), Some(2.9999), Some(3.0));
    // exactly the limit decodes, to the sample
    let a = audio::decode_with_limit(clip.clone(), None, 3.0).unwrap();
    assert_eq!((a.sample_rate, a.samples.len()), (16_000, 48_000));
    assert_eq!(a, audio::decode(clip, None).unwrap());
    // a FLAC of unknown length: 3 frames of 65535 samples at 65535 Hz are 3 s
    let flac = flac_constant(65_535, 3, 0);
    let msg = refused(flac.clone(), Some(2.5), None);
    assert!(msg.contains("limit of 2.5 s"), "{msg}");
    let a = audio::decode_with_limit(flac, None, 3.0).unwrap();
    assert_eq!(a.samples.len(), 3 * 65_535);
    assert!(a.samples.iter().all(|&v| v == 0.125));
}

#[test]
fn audio_of_exactly_the_default_limit_decodes_and_one_sample_more_does_not() {
    // 600 s at 1 kHz: the most the default limit allows
    let most = (MAX_DECODED_SECONDS * 1_000.0) as usize;
    let a = audio::decode(wav_of(1_000, most), None).unwrap();
    assert_eq!((a.sample_rate, a.samples.len()), (1_000, most));
    refused(wav_of(1_000, most + 1), None, Some(600.001));
    // a FLAC just under the limit, of unknown length: 9 frames of 65535 at 1 kHz are 589.8 s
    let a = audio::decode(flac_constant(1_000, 9, 0), None).unwrap();
    assert_eq!(a.samples.len(), 9 * 65_535);
    let msg = refused(flac_constant(1_000, 10, 0), None, None);
    assert!(msg.contains("600 s"), "{msg}");
}

#[test]
fn load_applies_the_limit_to_files_too() {
    let path = std::env::temp_dir().join("chatterbox-dsp-limit-3s.wav");
    std::fs::write(&path, wav_of(16_000, 48_000)).unwrap();
    let err = audio::load_with_limit(&path, 2.0).unwrap_err();
    assert!(
        matches!(&err, DspError::TooLong { seconds_limit, .. } if *seconds_limit == 2.0),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("chatterbox-dsp-limit-3s.wav"),
        "{err}"
    );
    assert_eq!(audio::load(&path).unwrap().samples.len(), 48_000);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn absurd_limits_and_rates_are_refused_not_overflowed() {
    let clip = wav_of(16_000, 160);
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let err = audio::decode_with_limit(clip.clone(), None, bad).unwrap_err();
        assert!(
            matches!(
                err,
                DspError::InvalidParameter {
                    name: "max_seconds",
                    ..
                }
            ),
            "{bad}: {err:?}"
        );
    }
    // the largest finite limit is no limit, and does not overflow
    assert_eq!(
        audio::decode_with_limit(clip, None, f64::MAX)
            .unwrap()
            .samples
            .len(),
        160
    );
    // a rate above MAX_SAMPLE_RATE: refused, naming the highest rate decoded
    for rate in [MAX_SAMPLE_RATE + 1, 4_000_000_000, u32::MAX] {
        let bytes = wav(1, 1, rate, rate.wrapping_mul(2), 2, 16, &[], &[0x11; 64]);
        let err = audio::decode(bytes, None).unwrap_err();
        assert!(
            matches!(err, DspError::UnsupportedSampleRate { got, .. } if got == rate),
            "{rate}: {err:?}"
        );
        assert!(err.to_string().contains("384000 Hz"), "{err}");
    }
    // the highest rate decodes
    let a = audio::decode(wav_of(MAX_SAMPLE_RATE, 1000), None).unwrap();
    assert_eq!(a.sample_rate, MAX_SAMPLE_RATE);
}
