//! T3's weight formats through the pipeline (`with_t3_format`): the tiny English checkpoint of
//! the parity fixtures (8 wide), loaded from a directory, speaking with bf16 T3 weights (its
//! projections are too narrow for the 32-value blocks of q8, which keeps them).
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test
use chatterbox_pipeline::{Audio, ChatterboxTts, DType, Device, GenerateOptions, WeightFormat};
use chatterbox_testkit::fixtures_root;
use std::collections::HashMap;
use std::path::PathBuf;

/// The English fixture as a checkpoint directory with its config sidecar, and its reference
/// clip.
fn english_dir() -> (PathBuf, Audio) {
    let fx = fixtures_root().join("pipeline");
    let dir = std::env::temp_dir().join(format!(
        "chatterbox-pipeline-quantize-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let t = candle_core::safetensors::load(fx.join("english.safetensors"), &Device::Cpu).unwrap();
    for (prefix, file) in [
        ("t3.", "t3_cfg.safetensors"),
        ("ve.", "ve.safetensors"),
        ("s3gen.", "s3gen.safetensors"),
    ] {
        let part: HashMap<String, candle_core::Tensor> = t
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v.clone())))
            .collect();
        candle_core::safetensors::save(&part, dir.join(file)).unwrap();
    }
    std::fs::copy(
        fixtures_root().join("text/assets/en/tokenizer.json"),
        dir.join("tokenizer.json"),
    )
    .unwrap();
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fx.join("english.json")).unwrap()).unwrap();
    std::fs::write(
        dir.join(chatterbox_pipeline::CONFIG_FILE),
        serde_json::to_string(&meta["config"]["chatterbox"]).unwrap(),
    )
    .unwrap();
    let wav = t["in.ref_24k"]
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    (dir, Audio::new(wav, 24_000))
}

#[test]
fn a_checkpoint_loaded_with_converted_t3_weights_speaks() {
    let (dir, clip) = english_dir();
    let tts = ChatterboxTts::from_dir(&dir, &Device::Cpu, DType::F32).unwrap();
    assert_eq!(tts.t3_format(), WeightFormat::F32);
    // 8 wide: no projection takes q8's 32-value blocks, so all 8 (2 layers x 4) are kept
    let report = tts.clone().quantize_t3(WeightFormat::Q8).unwrap();
    assert_eq!((report.quantized, report.kept), (0, 8));
    let mut bf16 = tts.clone().with_t3_format(WeightFormat::Bf16).unwrap();
    assert_eq!(bf16.t3_format(), WeightFormat::Bf16);
    // the original keeps its f32 weights
    assert_eq!(tts.t3_format(), WeightFormat::F32);
    bf16.prepare_conditionals_from_audio(&clip, 0.5).unwrap();
    let mut opts = GenerateOptions::english().with_seed(7);
    opts.max_new_tokens = 8;
    let audio = bf16.generate("Hello there.", &opts).unwrap();
    assert_eq!(audio.sample_rate, 24_000);
    assert!(!audio.samples.is_empty());
    assert!(audio.samples.iter().all(|s| s.is_finite()));
    // a second quantization is refused and leaves the model as it was
    let mut again = bf16.clone();
    assert!(again.quantize_t3(WeightFormat::Q4).is_err());
    assert_eq!(again.t3_format(), WeightFormat::Bf16);
    // the exact format is accepted and changes nothing
    let report = again.quantize_t3(WeightFormat::F32).unwrap();
    assert_eq!(report.quantized, 0);
    let _ = std::fs::remove_dir_all(&dir);
}
