//! Quantized checkpoint folders ([`write_quantized_checkpoint`]) through the library: the tiny
//! English checkpoint of the parity fixtures (8 wide, so bf16 is the format its projections
//! take) written with T3 in bf16, loaded with `from_dir`, speaks what `with_t3_format(Bf16)`
//! on the original speaks, exactly.
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test
mod fuzz_support;

use chatterbox_pipeline::{
    write_quantized_checkpoint, Audio, ChatterboxConfig, ChatterboxTts, DType, Device,
    GenerateOptions, MultilingualT3, PipelineError, Variant, WeightFormat,
};
use fuzz_support::{checkpoint_dir, ref_clip, temp_dir};

fn speak(mut tts: ChatterboxTts, clip: &Audio) -> Vec<f32> {
    tts.prepare_conditionals_from_audio(clip, 0.5).unwrap();
    let mut opts = GenerateOptions::english().with_seed(11);
    opts.max_new_tokens = 8;
    tts.generate("Hello there.", &opts).unwrap().samples
}

#[test]
fn a_bf16_folder_loads_as_stored_and_speaks_as_converting_at_load() {
    let (dir, clip) = (checkpoint_dir("english", "qckpt"), ref_clip(0));
    let root = temp_dir("qckpt-out");
    let cfg = ChatterboxConfig::from_dir_or(&dir, ChatterboxConfig::english()).unwrap();
    let out = root.join("bf16");
    let v2 = MultilingualT3::V2;
    let written =
        write_quantized_checkpoint(&dir, Variant::English, &v2, &cfg, WeightFormat::Bf16, &out)
            .unwrap();
    assert_eq!(written.t3_file, "t3_cfg.gguf");
    assert_eq!((written.report.quantized, written.report.kept), (8, 0));
    assert!(written.t3_bytes_after > 0);
    let mut copied = written.copied.clone();
    copied.sort();
    assert_eq!(
        copied,
        [
            "chatterbox_config.json",
            "s3gen.safetensors",
            "tokenizer.json",
            "ve.safetensors"
        ]
    );
    assert!(!out.join("t3_cfg.safetensors").exists());

    let loaded = ChatterboxTts::from_dir(&out, &Device::Cpu, DType::F32).unwrap();
    assert_eq!(loaded.t3_format(), WeightFormat::Bf16);
    let converted = ChatterboxTts::from_dir(&dir, &Device::Cpu, DType::F32)
        .unwrap()
        .with_t3_format(WeightFormat::Bf16)
        .unwrap();
    let (a, b) = (speak(loaded.clone(), &clip), speak(converted, &clip));
    assert!(!a.is_empty() && a.iter().all(|s| s.is_finite()));
    assert_eq!(a, b);
    // its own format again changes nothing; another is refused
    assert!(loaded.clone().with_t3_format(WeightFormat::Bf16).is_ok());
    assert!(loaded.clone().quantize_t3(WeightFormat::Q4).is_err());
    // quantized weights need T3 in f32
    let err = ChatterboxTts::from_dir(&out, &Device::Cpu, DType::BF16).err();
    assert!(
        matches!(&err, Some(PipelineError::Checkpoint { path, .. }) if path.ends_with("t3_cfg.gguf")),
        "{err:?}"
    );
    // a second write to the same folder is refused and leaves it as it was
    let err =
        write_quantized_checkpoint(&dir, Variant::English, &v2, &cfg, WeightFormat::Bf16, &out)
            .err();
    assert!(
        matches!(err, Some(PipelineError::InvalidInput { what, .. }) if what == "output directory")
    );
    assert!(out.join("t3_cfg.gguf").is_file());
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_dir_all(&dir);
}
