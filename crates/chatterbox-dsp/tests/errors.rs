//! Bad input gives a typed error that names the problem; nothing panics.
use chatterbox_dsp::features::{FbankOptions, KaldiFbank, S3GenMel, S3GenMelConfig};
use chatterbox_dsp::resample::{HqResampler, SincResampler};
use chatterbox_dsp::{audio, window, Audio, DspError, Stft, WavFormat};

#[test]
fn missing_file_names_the_path() {
    let err = audio::load("/nonexistent/voice.wav").unwrap_err();
    assert!(matches!(err, DspError::Io { .. }));
    assert!(err.to_string().contains("/nonexistent/voice.wav"));
}

#[test]
fn corrupt_and_unknown_bytes_are_rejected() {
    let err = audio::decode(
        b"definitely not audio at all, just text".to_vec(),
        Some("wav"),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            DspError::UnsupportedFormat { .. } | DspError::Decode { .. }
        ),
        "{err}"
    );
    // a RIFF header that promises more than it holds
    let mut bytes = b"RIFF\xff\xff\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00".to_vec();
    bytes.extend_from_slice(&[0x80, 0x3e, 0, 0, 0, 0x7d, 0, 0, 2, 0, 16, 0]);
    let err = audio::decode(bytes, Some("wav")).unwrap_err();
    assert!(err.to_string().contains("<memory>"), "{err}");
}

#[test]
fn zero_length_wav_is_empty_audio() {
    let path = std::env::temp_dir().join("chatterbox-dsp-empty.wav");
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    hound::WavWriter::create(&path, spec)
        .unwrap()
        .finalize()
        .unwrap();
    let err = audio::load(&path).unwrap_err();
    assert!(matches!(err, DspError::EmptyAudio { .. }), "{err}");
    assert!(err.to_string().contains("chatterbox-dsp-empty.wav"));
}

#[test]
fn wav_round_trip_in_both_formats() {
    let samples: Vec<f32> = (0..800).map(|i| ((i as f32) * 0.01).sin() * 0.5).collect();
    let a = Audio::new(samples.clone(), 16000);
    for (fmt, tol) in [(WavFormat::Float32, 0.0), (WavFormat::Pcm16, 1.0 / 32767.0)] {
        let path = std::env::temp_dir().join(format!("chatterbox-dsp-rt-{fmt:?}.wav"));
        audio::write_wav(&path, &a, fmt).unwrap();
        let b = audio::load(&path).unwrap();
        assert_eq!(b.sample_rate, 16000);
        assert_eq!(b.samples.len(), samples.len());
        for (x, y) in samples.iter().zip(&b.samples) {
            assert!((x - y).abs() <= tol, "{fmt:?}: {x} vs {y}");
        }
    }
}

#[test]
fn non_finite_samples_are_reported_with_their_index() {
    let mut x = vec![0.1f32; 30_000];
    let at_1234 = |err: DspError| {
        assert!(
            matches!(err, DspError::NonFinite { index: 1234, .. }),
            "{err}"
        );
    };
    x[1234] = f32::NAN;
    let s3gen = S3GenMel::new(S3GenMelConfig::default()).unwrap();
    at_1234(s3gen.compute(&x).unwrap_err());
    x[1234] = f32::INFINITY;
    let fbank = KaldiFbank::new(FbankOptions::campplus()).unwrap();
    at_1234(fbank.compute(&x).unwrap_err());
    let err = SincResampler::new(24000, 16000)
        .unwrap()
        .process(&x)
        .unwrap_err();
    assert!(matches!(err, DspError::NonFinite { .. }));
    let err = audio::write_wav("/tmp/x.wav", &Audio::new(x, 16000), WavFormat::Pcm16).unwrap_err();
    assert!(matches!(err, DspError::NonFinite { .. }));
}

#[test]
fn zero_sample_rates_are_rejected() {
    for err in [
        SincResampler::new(0, 16000).unwrap_err(),
        SincResampler::new(16000, 0).unwrap_err(),
        HqResampler::new(0, 24000).unwrap_err(),
    ] {
        assert!(
            matches!(err, DspError::UnsupportedSampleRate { got: 0, .. }),
            "{err}"
        );
    }
    let err = audio::write_wav(
        "/tmp/x.wav",
        &Audio::new(vec![0.0; 10], 0),
        WavFormat::Pcm16,
    )
    .unwrap_err();
    assert!(matches!(
        err,
        DspError::UnsupportedSampleRate { got: 0, .. }
    ));
    let opts = FbankOptions {
        sample_frequency: 0.0,
        ..FbankOptions::default()
    };
    assert!(KaldiFbank::new(opts).is_err());
}

#[test]
fn empty_and_too_short_inputs() {
    let stft = Stft::new(400, 160, &window::hann(400, true), true).unwrap();
    assert!(matches!(
        stft.process(&[]).unwrap_err(),
        DspError::EmptyAudio { .. }
    ));
    // reflect padding of 200 needs more than 200 samples, as torch requires
    assert!(matches!(
        stft.process(&[0.0; 150]).unwrap_err(),
        DspError::TooShort { .. }
    ));
    let fbank = KaldiFbank::new(FbankOptions::campplus()).unwrap();
    assert!(matches!(
        fbank.compute(&[0.0; 399]).unwrap_err(),
        DspError::TooShort { min: 400, .. }
    ));
    assert!(matches!(
        S3GenMel::new(S3GenMelConfig::default())
            .unwrap()
            .compute(&[0.0; 700])
            .unwrap_err(),
        DspError::TooShort { .. }
    ));
}

#[test]
fn bad_parameters_are_rejected() {
    assert!(Stft::new(400, 0, &window::hann(400, true), true).is_err());
    assert!(Stft::new(400, 160, &window::hann(401, true), true).is_err());
    assert!(chatterbox_dsp::MelFilterbank::new(16000, 400, 40, 9000.0, Some(8000.0)).is_err());
}

#[test]
fn unreadable_files_say_why_and_list_the_formats_that_work() {
    let err = audio::decode(Vec::new(), None).unwrap_err();
    assert!(err.to_string().contains("the file is empty"), "{err}");
    let err = audio::decode(b"ID3\x04\0\0\0\0\0\x05hello".to_vec(), None).unwrap_err();
    assert!(
        err.to_string().contains("nothing follows the ID3v2 tag"),
        "{err}"
    );
    let err = audio::decode(b"<!DOCTYPE html><html>".to_vec(), Some("wav")).unwrap_err();
    assert!(matches!(err, DspError::UnsupportedFormat { .. }), "{err}");
    assert!(
        err.to_string().contains("starts with \"<!DOCTYP\""),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("the formats that work are WAV, FLAC, MP3"),
        "{err}"
    );
    // recognised containers that are not decoded say what they are
    for (bytes, what) in [
        (
            &b"\x1A\x45\xDF\xA3\x01\x00\x00\x00webm"[..],
            "Matroska/WebM is not supported",
        ),
        (b"FORM\x00\x00\x10\x00AIFFCOMM", "AIFF is not supported"),
        (b"RIFF\x10\x00\x00\x00AVI LIST", "AVI is not supported"),
    ] {
        let msg = audio::decode(bytes.to_vec(), None).unwrap_err().to_string();
        assert!(msg.contains(what) && msg.contains("Ogg Vorbis"), "{msg}");
    }
}

#[test]
fn float_wav_with_nan_is_non_finite() {
    let mut data: Vec<u8> = [0.5f32, -0.25, f32::NAN, 0.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    data.extend_from_slice(&f32::INFINITY.to_le_bytes());
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16000,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let mut wav = std::io::Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut wav, spec).unwrap();
    for chunk in data.chunks_exact(4) {
        w.write_sample(f32::from_le_bytes(chunk.try_into().unwrap()))
            .unwrap();
    }
    w.finalize().unwrap();
    let err = audio::decode(wav.into_inner(), None).unwrap_err();
    assert!(matches!(err, DspError::NonFinite { index: 2, .. }), "{err}");
}
