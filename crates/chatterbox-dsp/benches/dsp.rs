//! `cargo xtask bench dsp`: the DSP stages the pipeline runs, on one core, as JSON records
//! (`CHATTERBOX_BENCH_OUT`, else stdout). `parity/bench/dsp.py` times the reference on the same
//! shapes.
use chatterbox_dsp::features::{
    FbankOptions, KaldiFbank, S3GenMel, S3GenMelConfig, S3TokenizerMel, VoiceEncoderMel,
    VoiceEncoderMelConfig,
};
use chatterbox_dsp::resample::{resample, SincResampler};
use chatterbox_testkit::{black_box, time_it, BenchRecord};

/// A deterministic speech-like test signal (harmonics, amplitude modulation, a little noise).
fn signal(sr: u32, secs: f64) -> Vec<f32> {
    let n = (sr as f64 * secs).round() as usize;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|i| {
            let t = i as f64 / sr as f64;
            let f0 = 120.0 + 30.0 * (2.0 * std::f64::consts::PI * 0.7 * t).sin();
            let mut v = 0.0;
            for h in 1..=10 {
                v += (2.0 * std::f64::consts::PI * f0 * h as f64 * t).sin() / h as f64;
            }
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let noise = (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
            (0.2 * v * (0.55 + 0.45 * (8.0 * std::f64::consts::PI * t).sin()) + 0.01 * noise) as f32
        })
        .collect()
}

fn main() -> anyhow::Result<()> {
    let mut records = Vec::new();
    let mut push = |stage: &str, shape: &str, timing| {
        let r = BenchRecord {
            group: "dsp".into(),
            stage: stage.into(),
            implementation: "rust".into(),
            device: "cpu".into(),
            threads: 1,
            timing,
            shape: shape.into(),
        };
        eprintln!(
            "{stage:<34} {:>9.3} ms (median of {})",
            r.timing.median_ms, r.timing.iters
        );
        records.push(r);
    };
    let x44 = signal(44_100, 37.7);
    let x24 = signal(24_000, 10.0);
    let x16 = signal(16_000, 10.0);

    push(
        "resample_hq_44k1_to_24k",
        "37.7 s @ 44.1 kHz",
        time_it(2, 10, 1.0, || {
            black_box(resample(&x44, 44_100, 24_000).ok());
        }),
    );
    push(
        "resample_hq_44k1_to_16k",
        "37.7 s @ 44.1 kHz",
        time_it(2, 10, 1.0, || {
            black_box(resample(&x44, 44_100, 16_000).ok());
        }),
    );
    let sinc = SincResampler::new(24_000, 16_000)?;
    push(
        "resample_sinc_24k_to_16k",
        "10 s @ 24 kHz",
        time_it(2, 10, 1.0, || {
            black_box(sinc.process(&x24).ok());
        }),
    );
    let s3gen = S3GenMel::new(S3GenMelConfig::default())?;
    push(
        "s3gen_mel",
        "10 s @ 24 kHz",
        time_it(2, 10, 1.0, || {
            black_box(s3gen.compute(&x24).ok());
        }),
    );
    let ve = VoiceEncoderMel::new(VoiceEncoderMelConfig::default())?;
    push(
        "voice_encoder_mel",
        "10 s @ 16 kHz",
        time_it(2, 10, 1.0, || {
            black_box(ve.compute(&x16).ok());
        }),
    );
    let tok = S3TokenizerMel::new(128)?;
    push(
        "s3tokenizer_mel",
        "10 s @ 16 kHz",
        time_it(2, 10, 1.0, || {
            black_box(tok.compute(&x16).ok());
        }),
    );
    let fbank = KaldiFbank::new(FbankOptions::campplus())?;
    push(
        "kaldi_fbank_campplus",
        "10 s @ 16 kHz",
        time_it(2, 10, 1.0, || {
            black_box(fbank.compute(&x16).ok());
        }),
    );

    chatterbox_testkit::emit_records(&records)?;
    Ok(())
}
