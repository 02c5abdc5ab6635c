//! `cargo xtask bench tokenizer`: the full-size S3 speech tokenizer on 6 s (`max_len` 150, as for
//! the T3 prompt) and 10 s (as in `embed_ref`) of 16 kHz audio, as JSON records
//! (`CHATTERBOX_BENCH_OUT`, else stdout). `parity/bench/tokenizer.py` times the reference on the
//! same shapes.
//!
//! - `CHATTERBOX_BENCH_DEVICE`: `cpu` (default), `cuda` or `cuda:N` (build with `--features
//!   cuda`), `metal` (`--features metal`).
//! - `CHATTERBOX_TOKENIZER_WEIGHTS`: a safetensors file with the tokenizer's weights (at the root
//!   or under `tokenizer.`, e.g. `s3gen.safetensors`); default: random weights of the real shapes.
//! - `CHATTERBOX_BENCH_THREADS` / `RAYON_NUM_THREADS`: CPU threads (set by `cargo xtask bench`).
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_s3gen::tokenizer::{ModelConfig, S3Tokenizer, FSMN_KERNEL, FSQ_DIM};
use chatterbox_testkit::{black_box, device_name, noisy_harmonics, test_device, time_it, BenchRun};
use std::collections::HashMap;

/// Random weights with the checkpoint's key names and shapes.
fn random_weights(cfg: &ModelConfig, dev: &Device) -> candle_core::Result<HashMap<String, Tensor>> {
    let d = cfg.n_audio_state;
    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        ("encoder.conv1.weight".into(), vec![d, cfg.n_mels, 3]),
        ("encoder.conv1.bias".into(), vec![d]),
        ("encoder.conv2.weight".into(), vec![d, d, 3]),
        ("encoder.conv2.bias".into(), vec![d]),
        (
            "quantizer._codebook.project_down.weight".into(),
            vec![FSQ_DIM, d],
        ),
        (
            "quantizer._codebook.project_down.bias".into(),
            vec![FSQ_DIM],
        ),
    ];
    for i in 0..cfg.n_audio_layer {
        let p = format!("encoder.blocks.{i}");
        for (name, shape) in [
            ("attn.query.weight", vec![d, d]),
            ("attn.query.bias", vec![d]),
            ("attn.key.weight", vec![d, d]),
            ("attn.value.weight", vec![d, d]),
            ("attn.value.bias", vec![d]),
            ("attn.out.weight", vec![d, d]),
            ("attn.out.bias", vec![d]),
            ("attn.fsmn_block.weight", vec![d, 1, FSMN_KERNEL]),
            ("attn_ln.weight", vec![d]),
            ("attn_ln.bias", vec![d]),
            ("mlp.0.weight", vec![4 * d, d]),
            ("mlp.0.bias", vec![4 * d]),
            ("mlp.2.weight", vec![d, 4 * d]),
            ("mlp.2.bias", vec![d]),
            ("mlp_ln.weight", vec![d]),
            ("mlp_ln.bias", vec![d]),
        ] {
            shapes.push((format!("{p}.{name}"), shape));
        }
    }
    shapes
        .into_iter()
        .map(|(k, s)| {
            let scale = (1.0 / *s.last().unwrap_or(&1) as f64).sqrt();
            let t = if k.ends_with("ln.weight") {
                Tensor::ones(s, DType::F32, dev)?
            } else {
                Tensor::randn(0f32, scale as f32, s, dev)?
            };
            Ok((k, t))
        })
        .collect()
}

fn main() -> anyhow::Result<()> {
    let dev = test_device("CHATTERBOX_BENCH_DEVICE")?;
    let device_name = device_name(&dev);
    let threads = std::env::var("CHATTERBOX_BENCH_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(candle_core::utils::get_num_threads);
    let cfg = ModelConfig::v2_25hz();
    let vb = match std::env::var_os("CHATTERBOX_TOKENIZER_WEIGHTS") {
        Some(path) => {
            // SAFETY: the weights file is not modified while mapped.
            let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[path], DType::F32, &dev)? };
            if vb.contains_tensor("tokenizer.encoder.conv1.weight") {
                vb.pp("tokenizer")
            } else {
                vb
            }
        }
        None => VarBuilder::from_tensors(random_weights(&cfg, &dev)?, DType::F32, &dev),
    };
    let tok = S3Tokenizer::new(&cfg, vb)?;

    let mut bench = BenchRun::new("tokenizer", device_name, threads, 34);
    let x6 = noisy_harmonics(16_000, 6.0);
    let x10 = noisy_harmonics(16_000, 10.0);
    for (stage, shape, wav, max_len) in [
        ("tokenizer_6s", "6 s @ 16 kHz -> 150 tokens", &x6, Some(150)),
        ("tokenizer_10s", "10 s @ 16 kHz -> 250 tokens", &x10, None),
    ] {
        let run = || -> anyhow::Result<()> {
            let t = tok.forward(&[wav.as_slice()], 16_000, max_len)?;
            // orders the clock read after the timed device work
            dev.synchronize()?;
            black_box(t);
            Ok(())
        };
        run()?;
        bench.push_timing(
            stage,
            shape,
            time_it(2, 10, 3.0, || {
                black_box(run().ok());
            }),
        );
        // the model alone (mel precomputed), to separate the front end from the encoder
        let (mel, lens) = tok.mel_batch(&[wav.as_slice()], 16_000, max_len)?;
        bench.push_timing(
            &format!("{stage}_model"),
            shape,
            time_it(2, 10, 3.0, || {
                let t = tok.model().quantize(&mel, &lens);
                // orders the clock read after the timed device work
                black_box(dev.synchronize().ok());
                black_box(t.ok());
            }),
        );
    }

    bench.emit()?;
    Ok(())
}
