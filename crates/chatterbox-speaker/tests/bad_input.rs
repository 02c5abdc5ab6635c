//! Bad input gives typed errors, never panics: silent, empty, NaN, too short and wrongly
//! sampled clips, and checkpoints with missing or mis-shaped tensors. Also the documented
//! padding of clips shorter than one partial. Weights come from the committed tiny fixtures.
#![allow(clippy::unwrap_used)] // test helpers: a failing unwrap is a failing test
use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use chatterbox_dsp::{DspError, Matrix};
use chatterbox_speaker::{
    CAMPPlus, CAMPPlusConfig, EmbedOptions, SpeakerError, VoiceEncConfig, VoiceEncoder,
};
use chatterbox_testkit::{max_abs, max_abs_diff};
use std::collections::HashMap;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../parity/fixtures/speaker/{name}"))
}

fn ve_config() -> VoiceEncConfig {
    VoiceEncConfig {
        ve_hidden_size: 16,
        ..VoiceEncConfig::default()
    }
}

fn campplus_config() -> CAMPPlusConfig {
    CAMPPlusConfig {
        growth_rate: 2,
        bn_size: 2,
        init_channels: 4,
        ..CAMPPlusConfig::s3gen()
    }
}

fn ve() -> VoiceEncoder {
    VoiceEncoder::from_safetensors(fixture("ve_tiny.safetensors"), &ve_config(), &Device::Cpu)
        .unwrap()
}

fn tensors(name: &str) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture(name), &Device::Cpu).unwrap()
}

fn campplus_from(map: HashMap<String, Tensor>) -> chatterbox_speaker::Result<CAMPPlus> {
    let vb = VarBuilder::from_tensors(map, DType::F32, &Device::Cpu);
    CAMPPlus::new(&campplus_config(), vb.pp("speaker_encoder"))
}

fn campplus() -> CAMPPlus {
    campplus_from(tensors("campplus_tiny.safetensors")).unwrap()
}

/// A deterministic noisy tone.
fn clip(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| 0.3 * (i as f32 * 0.07).sin() + 0.05 * ((i * 7919 % 101) as f32 / 101.0 - 0.5))
        .collect()
}

#[test]
fn silent_clips_are_errors() {
    let zeros = vec![0f32; 16000];
    let opts = EmbedOptions::default();
    assert!(matches!(
        ve().embeds_from_wavs(&[&zeros], 16000, &opts),
        Err(SpeakerError::SilentAudio { len: 16000, .. })
    ));
    assert!(matches!(
        campplus().inference(&zeros, 16000),
        Err(SpeakerError::SilentAudio { len: 16000, .. })
    ));
}

#[test]
fn nan_and_empty_clips_are_errors() {
    let mut bad = clip(16000);
    bad[1234] = f32::NAN;
    let opts = EmbedOptions::default();
    let err = ve().embeds_from_wavs(&[&clip(16000), &bad], 16000, &opts);
    assert!(
        matches!(err, Err(SpeakerError::Dsp(DspError::NonFinite { index: 1234, ref what, .. })) if what == "wav 1"),
        "{err:?}"
    );
    let err = campplus().inference(&bad, 16000);
    assert!(
        matches!(
            err,
            Err(SpeakerError::Dsp(DspError::NonFinite { index: 1234, .. }))
        ),
        "{err:?}"
    );
    bad[1234] = f32::INFINITY;
    assert!(campplus().inference(&bad, 16000).is_err());

    assert!(matches!(
        ve().embeds_from_wavs(&[&[]], 16000, &opts),
        Err(SpeakerError::Dsp(DspError::EmptyAudio { .. }))
    ));
    assert!(matches!(
        ve().embeds_from_wavs(&[], 16000, &opts),
        Err(SpeakerError::InvalidInput { .. })
    ));
    assert!(matches!(
        campplus().inference(&[], 16000),
        Err(SpeakerError::Dsp(DspError::EmptyAudio { .. }))
    ));
}

#[test]
fn wrong_sample_rates_are_errors() {
    let x = clip(24000);
    assert!(matches!(
        ve().embeds_from_wavs(&[&x], 24000, &EmbedOptions::default()),
        Err(SpeakerError::UnsupportedSampleRate {
            got: 24000,
            expected: 16000,
            ..
        })
    ));
    assert!(matches!(
        campplus().inference(&x, 24000),
        Err(SpeakerError::UnsupportedSampleRate {
            got: 24000,
            expected: 16000,
            ..
        })
    ));
}

#[test]
fn too_short_clips_are_errors_down_to_the_documented_minimum() {
    let opts = EmbedOptions::default();
    assert!(matches!(
        ve().embeds_from_wavs(&[&clip(150)], 16000, &opts),
        Err(SpeakerError::TooShort {
            len: 150,
            min: 201,
            ..
        })
    ));
    let e = ve().embeds_from_wavs(&[&clip(201)], 16000, &opts).unwrap();
    assert!(e.to_vec2::<f32>().unwrap()[0].iter().all(|v| v.is_finite()));

    let cp = campplus();
    assert_eq!(cp.min_samples(), 720);
    assert!(matches!(
        cp.inference(&clip(719), 16000),
        Err(SpeakerError::TooShort {
            len: 719,
            min: 720,
            ..
        })
    ));
    let x = cp
        .inference(&clip(720), 16000)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    assert!(x[0].iter().all(|v| v.is_finite()));
}

#[test]
fn a_clip_shorter_than_one_partial_is_zero_padded_to_one_partial() {
    let ve = ve();
    let opts = EmbedOptions::default();
    let x = clip(8000); // 0.5 s: 51 frames
    let utt = ve.embeds_from_wavs(&[&x], 16000, &opts).unwrap();
    let mel = ve.melspectrogram(&x, opts.trim_top_db, "clip").unwrap();
    assert!(mel.rows() < 160);
    let mut padded = mel.as_slice().to_vec();
    padded.resize(160 * 40, 0.0);
    let partial = ve
        .forward(&Tensor::from_vec(padded, (1, 160, 40), &Device::Cpu).unwrap())
        .unwrap();
    assert!(max_abs_diff(&utt, &partial).unwrap() < 1e-6);
}

#[test]
fn missing_and_misshaped_tensors_name_the_key() {
    let mut map = tensors("ve_tiny.safetensors");
    map.remove("lstm.weight_hh_l1");
    let vb = VarBuilder::from_tensors(map, DType::F32, &Device::Cpu);
    let err = VoiceEncoder::new(&ve_config(), vb).unwrap_err();
    assert!(
        matches!(&err, SpeakerError::MissingWeight { key } if key == "lstm.weight_hh_l1"),
        "{err}"
    );

    let mut map = tensors("ve_tiny.safetensors");
    map.insert(
        "proj.weight".into(),
        Tensor::zeros((256, 17), DType::F32, &Device::Cpu).unwrap(),
    );
    let vb = VarBuilder::from_tensors(map, DType::F32, &Device::Cpu);
    let err = VoiceEncoder::new(&ve_config(), vb).unwrap_err();
    assert!(
        matches!(&err, SpeakerError::ShapeMismatch { key, expected, actual }
            if key == "proj.weight" && expected == &[256, 16] && actual == &[256, 17]),
        "{err}"
    );
    // A checkpoint for another configuration: the first tensor that disagrees is named.
    let vb = VarBuilder::from_tensors(tensors("ve_tiny.safetensors"), DType::F32, &Device::Cpu);
    assert!(matches!(
        VoiceEncoder::new(&VoiceEncConfig::default(), vb),
        Err(SpeakerError::ShapeMismatch { .. })
    ));

    let key = "speaker_encoder.xvector.block2.tdnnd3.cam_layer.linear1.bias";
    let mut map = tensors("campplus_tiny.safetensors");
    assert!(map.remove(key).is_some());
    let err = campplus_from(map).unwrap_err();
    assert!(
        matches!(&err, SpeakerError::MissingWeight { key: k } if k == key),
        "{err}"
    );

    let key = "speaker_encoder.head.layer2.0.shortcut.1.running_var";
    let mut map = tensors("campplus_tiny.safetensors");
    map.insert(
        key.into(),
        Tensor::ones(31, DType::F32, &Device::Cpu).unwrap(),
    );
    let err = campplus_from(map).unwrap_err();
    assert!(
        matches!(&err, SpeakerError::ShapeMismatch { key: k, .. } if k == key),
        "{err}"
    );
}

#[test]
fn batchnorm_counters_in_the_checkpoint_are_ignored() {
    let map = tensors("campplus_tiny.safetensors");
    let counters: Vec<&String> = map
        .keys()
        .filter(|k| k.ends_with("num_batches_tracked"))
        .collect();
    assert!(!counters.is_empty());
    assert!(counters.iter().all(|k| map[*k].dtype() == DType::I64));
    // and without them the model loads the same
    let without: HashMap<String, Tensor> = map
        .iter()
        .filter(|(k, _)| !k.ends_with("num_batches_tracked"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let x = clip(16000);
    let a = campplus_from(map).unwrap().inference(&x, 16000).unwrap();
    let b = campplus_from(without)
        .unwrap()
        .inference(&x, 16000)
        .unwrap();
    assert_eq!(max_abs_diff(&a, &b).unwrap(), 0.0);
}

#[test]
fn unreadable_checkpoints_are_errors() {
    let cfg = VoiceEncConfig::default();
    assert!(matches!(
        VoiceEncoder::from_safetensors("/nonexistent/ve.safetensors", &cfg, &Device::Cpu),
        Err(SpeakerError::Checkpoint { .. })
    ));
    // a file that is neither safetensors nor a torch zip pickle
    let json = fixture("ve_tiny.json");
    assert!(matches!(
        VoiceEncoder::from_safetensors(&json, &cfg, &Device::Cpu),
        Err(SpeakerError::Checkpoint { .. })
    ));
    assert!(matches!(
        VoiceEncoder::from_pth(&json, &cfg, &Device::Cpu),
        Err(SpeakerError::Checkpoint { .. })
    ));
}

#[test]
fn an_all_zero_projection_is_a_degenerate_embedding() {
    // VarMap's default initialisation is all zeros: every projected unit is 0 after the ReLU.
    let vm = VarMap::new();
    let vb = VarBuilder::from_varmap(&vm, DType::F32, &Device::Cpu);
    let ve = VoiceEncoder::new(&ve_config(), vb).unwrap();
    assert!(matches!(
        ve.embeds_from_wavs(&[&clip(16000)], 16000, &EmbedOptions::default()),
        Err(SpeakerError::DegenerateEmbedding { index: 0 })
    ));
}

#[test]
fn unsupported_configurations_and_shapes_are_errors() {
    let vm = VarMap::new();
    let vb = VarBuilder::from_varmap(&vm, DType::F32, &Device::Cpu);
    let cfg = VoiceEncConfig {
        mel_type: "db".into(),
        ..VoiceEncConfig::default()
    };
    assert!(matches!(
        VoiceEncoder::new(&cfg, vb.clone()),
        Err(SpeakerError::UnsupportedConfig {
            field: "mel_type",
            ..
        })
    ));
    let cfg = CAMPPlusConfig {
        output_level: "frame".into(),
        ..CAMPPlusConfig::s3gen()
    };
    assert!(matches!(
        CAMPPlus::new(&cfg, vb),
        Err(SpeakerError::UnsupportedConfig {
            field: "output_level",
            ..
        })
    ));

    let ve = ve();
    let wrong = Tensor::zeros((2, 10, 39), DType::F32, &Device::Cpu).unwrap();
    assert!(matches!(
        ve.forward(&wrong),
        Err(SpeakerError::InvalidInput { .. })
    ));
    let mels = Tensor::ones((2, 10, 40), DType::F32, &Device::Cpu).unwrap();
    let opts = EmbedOptions::default();
    assert!(matches!(
        ve.inference(&mels, &[10], &opts),
        Err(SpeakerError::InvalidInput { .. })
    ));
    assert!(matches!(
        ve.inference(&mels, &[10, 0], &opts),
        Err(SpeakerError::InvalidInput { .. })
    ));
    let empty = Matrix::zeros(0, 40);
    assert!(matches!(
        ve.embeds_from_mels(&[empty], &opts),
        Err(SpeakerError::InvalidInput { .. })
    ));
    let mut bad_opts = EmbedOptions::default();
    bad_opts.min_coverage = 0.0;
    assert!(matches!(
        ve.embeds_from_wavs(&[&clip(16000)], 16000, &bad_opts),
        Err(SpeakerError::InvalidInput { .. })
    ));

    let cp = campplus();
    let feats = Tensor::zeros((1, 2, 80), DType::F32, &Device::Cpu).unwrap();
    assert!(matches!(
        cp.forward(&feats),
        Err(SpeakerError::InvalidInput { .. })
    ));
    let feats = Tensor::zeros((1, 20, 81), DType::F32, &Device::Cpu).unwrap();
    assert!(matches!(
        cp.forward(&feats),
        Err(SpeakerError::InvalidInput { .. })
    ));
}

#[test]
fn both_code_paths_agree_on_batches() {
    // forward on a batch of partials / features, CPU kernels against candle ops
    let ve = ve();
    let mels = Tensor::rand(0f32, 2.0, (5, 37, 40), &Device::Cpu).unwrap();
    let a = ve.forward(&mels).unwrap();
    let b = ve.clone().with_cpu_kernels(false).forward(&mels).unwrap();
    let d = max_abs_diff(&a, &b).unwrap();
    assert!(d < 1e-5, "{d}");

    let cp = campplus();
    let feats = Tensor::randn(0f32, 1.0, (3, 233, 80), &Device::Cpu).unwrap();
    let a = cp.forward(&feats).unwrap();
    let b = cp.clone().with_cpu_kernels(false).forward(&feats).unwrap();
    let scale = max_abs(&b).unwrap();
    let d = max_abs_diff(&a, &b).unwrap();
    assert!(d < 1e-5 * scale.max(1.0), "{d} (scale {scale})");
}
