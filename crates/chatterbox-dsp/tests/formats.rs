//! Real files from ffmpeg (tests/data/README.md says how each was made): every container and
//! codec decodes to the right rate, length and signal, and stereo is downmixed the same way
//! whatever the format.
mod common;

use chatterbox_dsp::{audio, Audio};
use common::dominant_frequency;
use std::f64::consts::PI;
use std::io::Cursor;

/// Every fixture is `0.25 * sin(2 pi 440 t)` for 0.3 s (stereo ones: in the left channel only).
const FREQ: f64 = 440.0;
const AMP: f64 = 0.25;
const SECONDS: f64 = 0.3;

/// The 16-bit lossless fixtures hold the sine rounded to 1/32768: half a step of error.
const LOSSLESS_ATOL: f32 = 0.5 / 32768.0 + 1e-7;
/// AAC-LC frames are 1024 samples. ffmpeg primes the encoder with 1024 samples (it writes an edit
/// list, which symphonia 0.6 does not apply) and pads the last frame, so the decoded length is
/// `n + 1024` rounded up to a whole frame: up to 2047 samples more than `n`.
const AAC_EXTRA_MAX: usize = 2 * 1024 - 1;
/// A 48-64 kbit/s AAC sine keeps its RMS within a few percent (measured: 0.8% low).
const AAC_RMS_RTOL: f64 = 0.05;
/// The frequency estimate's resolution: the DFT is scanned on a 0.5 Hz grid.
const FREQ_ATOL: f64 = 1.0;

fn fixture(name: &str) -> chatterbox_dsp::Result<Audio> {
    audio::load(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR")))
}

/// The steady middle half of a signal (away from codec start-up and the end).
fn middle(x: &[f32]) -> &[f32] {
    &x[x.len() / 4..x.len() * 3 / 4]
}

fn rms(x: &[f32]) -> f64 {
    (x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / x.len() as f64).sqrt()
}

/// The sine each fixture was made from, at `amp`.
fn sine(rate: u32, amp: f64) -> Vec<f32> {
    let n = (SECONDS * f64::from(rate)).round() as usize;
    (0..n)
        .map(|i| (amp * (2.0 * PI * FREQ * i as f64 / f64::from(rate)).sin()) as f32)
        .collect()
}

#[test]
fn alac_in_m4a_is_the_exact_sine() {
    // stereo: left is the sine, right is silent, so the channel mean is half the sine
    for (name, rate, amp) in [
        ("alac_mono_24k.m4a", 24_000, AMP),
        ("alac_stereo_44k.m4a", 44_100, AMP / 2.0),
    ] {
        let a = fixture(name).unwrap();
        assert_eq!(a.sample_rate, rate, "{name}");
        let want = sine(rate, amp);
        assert_eq!(a.samples.len(), want.len(), "{name}: ALAC is sample-exact");
        for (i, (x, y)) in a.samples.iter().zip(&want).enumerate() {
            assert!((x - y).abs() <= LOSSLESS_ATOL, "{name}[{i}]: {x} vs {y}");
        }
    }
}

#[test]
fn aac_in_m4a_and_adts_is_a_440_hz_sine() {
    for (name, rate, amp) in [
        ("aac_mono_24k.m4a", 24_000, AMP),
        ("aac_mono_24k.aac", 24_000, AMP),
        ("aac_stereo_44k.m4a", 44_100, AMP / 2.0),
    ] {
        let a = fixture(name).unwrap();
        assert_eq!(a.sample_rate, rate, "{name}");
        let n = (SECONDS * f64::from(rate)).round() as usize;
        let len = a.samples.len();
        assert!(
            (n..=n + AAC_EXTRA_MAX).contains(&len),
            "{name}: {len} samples for {n} encoded"
        );
        let mid = middle(&a.samples);
        let f = dominant_frequency(mid, rate);
        assert!((f - FREQ).abs() <= FREQ_ATOL, "{name}: peak at {f} Hz");
        let want_rms = amp / 2f64.sqrt();
        let got = rms(mid);
        assert!(
            (got / want_rms - 1.0).abs() <= AAC_RMS_RTOL,
            "{name}: rms {got} vs {want_rms}"
        );
    }
}

#[test]
fn other_formats_decode_to_the_same_sine() {
    // lossless: exact; lossy: frequency and level
    let a = fixture("flac_mono_24k.flac").unwrap();
    assert_eq!((a.sample_rate, a.samples.len()), (24_000, 7200));
    for (x, y) in a.samples.iter().zip(&sine(24_000, AMP)) {
        assert!((x - y).abs() <= LOSSLESS_ATOL);
    }
    for name in ["mp3_mono_24k.mp3", "vorbis_mono_24k.ogg"] {
        let a = fixture(name).unwrap();
        assert_eq!((a.sample_rate, a.samples.len()), (24_000, 7200), "{name}");
        let f = dominant_frequency(middle(&a.samples), 24_000);
        assert!((f - FREQ).abs() <= FREQ_ATOL, "{name}: peak at {f} Hz");
    }
}

/// The ALAC stereo clip and a stereo WAV of the same 16-bit samples give the same mono signal:
/// m4a goes through the same channel mean as every other format.
#[test]
fn stereo_m4a_downmixes_like_stereo_wav() {
    let alac = fixture("alac_stereo_44k.m4a").unwrap();
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: 44_100,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut wav = Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut wav, spec).unwrap();
    for v in sine(44_100, AMP) {
        w.write_sample((f64::from(v) * 32768.0).round() as i16)
            .unwrap();
        w.write_sample(0i16).unwrap();
    }
    w.finalize().unwrap();
    let wav = audio::decode(wav.into_inner(), Some("wav")).unwrap();
    assert_eq!(alac, wav);
}

/// ffmpeg's Ogg Opus (libopus 1.3.1, 24 kbit/s): 48 kHz, the pre-skip (312) dropped and the end
/// granule (14712) trimming the last packet, so exactly the 0.3 s encoded.
#[test]
fn ogg_opus_is_the_sine_at_48_khz() {
    let a = fixture("opus_mono_48k.ogg").unwrap();
    assert_eq!((a.sample_rate, a.samples.len()), (48_000, 14_400));
    let mid = middle(&a.samples);
    let f = dominant_frequency(mid, 48_000);
    assert!((f - FREQ).abs() <= FREQ_ATOL, "peak at {f} Hz");
    let want_rms = AMP / 2f64.sqrt();
    let got = rms(mid);
    assert!(
        (got / want_rms - 1.0).abs() <= AAC_RMS_RTOL,
        "rms {got} vs {want_rms}"
    );
}
