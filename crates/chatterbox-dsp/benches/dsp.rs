//! `cargo xtask bench dsp`: the DSP stages the pipeline runs, on one core, as JSON records
//! (`CHATTERBOX_BENCH_OUT`, else stdout). `parity/bench/dsp.py` times the reference on the same
//! shapes.
use chatterbox_dsp::features::{
    FbankOptions, KaldiFbank, S3GenMel, S3GenMelConfig, S3TokenizerMel, VoiceEncoderMel,
    VoiceEncoderMelConfig,
};
use chatterbox_dsp::resample::{resample, SincResampler};
use chatterbox_testkit::{black_box, noisy_harmonics, time_it, BenchRun};

fn main() -> anyhow::Result<()> {
    let mut run = BenchRun::new("dsp", "cpu", 1, 34);
    let x44 = noisy_harmonics(44_100, 37.7);
    let x24 = noisy_harmonics(24_000, 10.0);
    let x16 = noisy_harmonics(16_000, 10.0);

    run.push_timing(
        "resample_hq_44k1_to_24k",
        "37.7 s @ 44.1 kHz",
        time_it(2, 10, 1.0, || {
            black_box(resample(&x44, 44_100, 24_000).ok());
        }),
    );
    run.push_timing(
        "resample_hq_44k1_to_16k",
        "37.7 s @ 44.1 kHz",
        time_it(2, 10, 1.0, || {
            black_box(resample(&x44, 44_100, 16_000).ok());
        }),
    );
    let sinc = SincResampler::new(24_000, 16_000)?;
    run.push_timing(
        "resample_sinc_24k_to_16k",
        "10 s @ 24 kHz",
        time_it(2, 10, 1.0, || {
            black_box(sinc.process(&x24).ok());
        }),
    );
    let s3gen = S3GenMel::new(S3GenMelConfig::default())?;
    run.push_timing(
        "s3gen_mel",
        "10 s @ 24 kHz",
        time_it(2, 10, 1.0, || {
            black_box(s3gen.compute(&x24).ok());
        }),
    );
    let ve = VoiceEncoderMel::new(VoiceEncoderMelConfig::default())?;
    run.push_timing(
        "voice_encoder_mel",
        "10 s @ 16 kHz",
        time_it(2, 10, 1.0, || {
            black_box(ve.compute(&x16).ok());
        }),
    );
    let tok = S3TokenizerMel::new(128)?;
    run.push_timing(
        "s3tokenizer_mel",
        "10 s @ 16 kHz",
        time_it(2, 10, 1.0, || {
            black_box(tok.compute(&x16).ok());
        }),
    );
    let fbank = KaldiFbank::new(FbankOptions::campplus())?;
    run.push_timing(
        "kaldi_fbank_campplus",
        "10 s @ 16 kHz",
        time_it(2, 10, 1.0, || {
            black_box(fbank.compute(&x16).ok());
        }),
    );

    run.emit()?;
    Ok(())
}
