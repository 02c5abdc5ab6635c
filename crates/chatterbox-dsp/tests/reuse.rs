//! The crate as another audio project uses it: public API only, synthetic signals, no files.
//! Each extractor is checked against what the signal implies (shapes, where a tone lands,
//! round trips), not against the reference (that is `tests/parity.rs`).
use approx::assert_abs_diff_eq;
use chatterbox_dsp::audio::{decode, wav_bytes};
use chatterbox_dsp::features::{
    FbankOptions, KaldiFbank, S3GenMel, S3GenMelConfig, S3TokenizerMel, VoiceEncoderMel,
    VoiceEncoderMelConfig,
};
use chatterbox_dsp::resample::SincResampler;
use chatterbox_dsp::{
    hz_to_mel, mel_to_hz, trim_silence, window, Audio, Istft, Matrix, Stft, TrimOptions, WavFormat,
};

type R = anyhow::Result<()>;

fn sine(hz: f64, sr: u32, seconds: f64, amp: f32) -> Vec<f32> {
    let n = (f64::from(sr) * seconds) as usize;
    (0..n)
        .map(|i| amp * (2.0 * std::f64::consts::PI * hz * i as f64 / f64::from(sr)).sin() as f32)
        .collect()
}

/// Row holding the largest value of column `c`.
fn argmax_row(m: &Matrix, c: usize) -> usize {
    (0..m.rows())
        .max_by(|&a, &b| m.get(a, c).total_cmp(&m.get(b, c)))
        .unwrap_or(0)
}

/// Index of the Slaney mel filter of `n_mels` bins over `[0, fmax]` centred nearest `hz`.
fn nearest_mel_bin(hz: f64, n_mels: usize, fmax: f64) -> usize {
    let top = hz_to_mel(fmax);
    (0..n_mels)
        .min_by(|&a, &b| {
            let centre = |i: usize| mel_to_hz(top * (i + 1) as f64 / (n_mels + 1) as f64);
            (centre(a) - hz).abs().total_cmp(&(centre(b) - hz).abs())
        })
        .unwrap_or(0)
}

#[test]
fn s3gen_mel_of_a_tone_peaks_at_its_frequency() -> R {
    let cfg = S3GenMelConfig::default();
    assert_eq!(cfg.sample_rate(), 24_000);
    let mel = S3GenMel::new(cfg.clone())?;
    let wav = sine(1000.0, cfg.sample_rate(), 1.0, 0.5);
    let m = mel.compute(&wav)?;
    assert_eq!(m.shape(), (80, 50));
    assert_eq!(mel.num_frames(wav.len()), 50);
    assert!(m.as_slice().iter().all(|v| v.is_finite()));
    let want = nearest_mel_bin(1000.0, 80, cfg.fmax);
    for t in [10, 25, 40] {
        let got = argmax_row(&m, t);
        assert!(
            got.abs_diff(want) <= 1,
            "frame {t}: bin {got}, 1 kHz is bin {want}"
        );
    }
    // log of a value clamped at 1e-5
    let floor = (1e-5f32).ln();
    assert!(m.as_slice().iter().all(|&v| v >= floor - 1e-4));
    // same input, same output
    assert_eq!(mel.compute(&wav)?, m);
    // a configuration built with the builders computes what it says
    let narrow = S3GenMel::new(
        S3GenMelConfig::default()
            .with_num_mels(40)
            .with_fmax(4000.0),
    )?;
    assert_eq!(narrow.compute(&wav)?.shape(), (40, 50));
    Ok(())
}

#[test]
fn the_other_extractors_give_the_documented_shapes() -> R {
    let wav = sine(440.0, 16_000, 0.5, 0.3);
    let ve = VoiceEncoderMel::new(VoiceEncoderMelConfig::default())?.compute(&wav)?;
    assert_eq!(ve.shape(), (40, 1 + wav.len() / 160));
    assert!(ve.as_slice().iter().all(|&v| v.is_finite() && v >= 0.0));
    let want = nearest_mel_bin(440.0, 40, 8000.0);
    assert!(argmax_row(&ve, 25).abs_diff(want) <= 1);

    let s3 = S3TokenizerMel::new(128)?.compute(&wav)?;
    assert_eq!(s3.shape(), (128, wav.len() / 160));
    // floored at max - 8 in log10, then (x + 4) / 4: a range of at most 2
    let (lo, hi) = s3
        .as_slice()
        .iter()
        .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    assert!(hi - lo <= 2.0 + 1e-6, "{lo}..{hi}");

    let fbank = KaldiFbank::new(FbankOptions::campplus())?.compute(&wav)?;
    assert_eq!(fbank.shape(), (1 + (wav.len() - 400) / 160, 80));
    // per-utterance mean subtraction: every bin averages to zero
    for c in 0..80 {
        let mean: f32 =
            (0..fbank.rows()).map(|r| fbank.get(r, c)).sum::<f32>() / fbank.rows() as f32;
        assert_abs_diff_eq!(mean, 0.0, epsilon = 1e-4);
    }
    let raw = KaldiFbank::new(FbankOptions::default().with_num_mel_bins(23))?.compute(&wav)?;
    assert_eq!(raw.cols(), 23);
    Ok(())
}

#[test]
fn stft_and_istft_round_trip() -> R {
    let x = sine(300.0, 16_000, 0.25, 0.7);
    let win = window::hann(400, true);
    let spec = Stft::new(400, 100, &win, true)?.process(&x)?;
    assert_eq!(spec.n_freq, 201);
    let back = Istft::new(400, 100, &win, true)?.process(&spec)?;
    assert_eq!(
        back.len(),
        Istft::new(400, 100, &win, true)?.output_len(spec.n_frames)
    );
    let n = back.len().min(x.len());
    assert!(n > x.len() - 400);
    assert_abs_diff_eq!(&back[..n], &x[..n], epsilon = 1e-5);
    Ok(())
}

#[test]
fn sinc_resampling_keeps_a_tone() -> R {
    let x = sine(440.0, 24_000, 0.5, 0.5);
    let y = SincResampler::new(24_000, 16_000)?.process(&x)?;
    assert_eq!(y.len(), 8_000);
    let want = sine(440.0, 16_000, 0.5, 0.5);
    // away from the edges, where the kernel sees zeros beyond the signal
    assert_abs_diff_eq!(&y[200..7_800], &want[200..7_800], epsilon = 5e-3);
    Ok(())
}

#[test]
fn trimming_finds_the_tone_between_silences() -> R {
    let sr = 16_000;
    let mut y = vec![0f32; sr as usize];
    y.extend(sine(440.0, sr, 1.0, 0.5));
    y.extend(vec![0f32; sr as usize]);
    let (start, end) = trim_silence(&y, &TrimOptions::default())?;
    // within a frame (2048) of the tone's edges
    assert!(start.abs_diff(16_000) <= 2_048, "start {start}");
    assert!(end.abs_diff(32_000) <= 2_048, "end {end}");
    let (s2, e2) = trim_silence(&y, &TrimOptions::default().with_top_db(60.0))?;
    assert!(s2 <= start && e2 >= end);
    Ok(())
}

#[test]
fn wav_bytes_decode_back_in_memory() -> R {
    let audio = Audio::new(sine(440.0, 24_000, 0.1, 0.5), 24_000);
    let back = decode(wav_bytes(&audio, WavFormat::Float32)?, Some("wav"))?;
    assert_eq!(back, audio);
    let pcm = decode(wav_bytes(&audio, WavFormat::Pcm16)?, None)?;
    assert_eq!(pcm.sample_rate, 24_000);
    assert_abs_diff_eq!(
        pcm.samples.as_slice(),
        audio.samples.as_slice(),
        epsilon = 1e-4
    );
    Ok(())
}
