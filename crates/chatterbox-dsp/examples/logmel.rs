//! Loads an audio file and writes S3Gen's 80-bin log-mel spectrogram (the feature Chatterbox
//! conditions its decoder on) to a safetensors file.
//!
//! ```text
//! cargo run --release -p chatterbox-dsp --example logmel -- [INPUT] [OUTPUT]
//! ```
//! INPUT defaults to the bundled 24 kHz speech-like sample, OUTPUT to `logmel.safetensors`
//! (one tensor `mel`, shape `(80, frames)`). Any rate is resampled to 24 kHz first.
use anyhow::{Context, Result};
use chatterbox_dsp::features::{S3GenMel, S3GenMelConfig};
use std::path::PathBuf;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let input = args.next().map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/data/speech_24k.wav")
    });
    let output = PathBuf::from(args.next().unwrap_or_else(|| "logmel.safetensors".into()));

    let audio = chatterbox_dsp::audio::load(&input)?;
    let cfg = S3GenMelConfig::default();
    let audio = audio.resampled(cfg.sampling_rate)?;
    let mel = S3GenMel::new(cfg)?.compute(&audio.samples)?;
    let (bins, frames) = mel.shape();

    let bytes: Vec<u8> = mel
        .as_slice()
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![bins, frames], &bytes)?;
    safetensors::serialize_to_file([("mel", view)], None, &output)
        .with_context(|| format!("writing {}", output.display()))?;

    let (min, max) = mel
        .as_slice()
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let mean = mel.as_slice().iter().sum::<f32>() / mel.as_slice().len() as f32;
    println!(
        "{}: {:.2} s at {} Hz -> log-mel {bins} x {frames} (min {min:.3}, max {max:.3}, mean {mean:.3}) -> {}",
        input.display(),
        audio.duration_secs(),
        audio.sample_rate,
        output.display()
    );
    Ok(())
}
