//! T3's weight formats through the pipeline (`with_t3_format`): the tiny English checkpoint of
//! the parity fixtures (8 wide), loaded from a directory, speaking with bf16 T3 weights (its
//! projections are too narrow for the 32-value blocks of q8, which keeps them).
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test
mod fuzz_support;

use chatterbox_pipeline::{ChatterboxTts, DType, Device, GenerateOptions, WeightFormat};
use fuzz_support::{checkpoint_dir, ref_clip};

#[test]
fn a_checkpoint_loaded_with_converted_t3_weights_speaks() {
    let (dir, clip) = (checkpoint_dir("english", "quantize"), ref_clip(0));
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
