//! The public API's contracts: loading (torch zip and safetensors, and every way a checkpoint
//! can be wrong), input checks, output lengths. Uses the committed tiny PerthNet of the parity
//! fixtures (`parity/recorders/watermark.py`).
// Helpers outside `#[test]` fns unwrap too: a failed unwrap is a failed test with a backtrace.
#![allow(clippy::unwrap_used)]

use candle_core::{Device, Tensor};
use chatterbox_watermark::{
    load_state_dict, PerthConfig, PerthNet, PerthWatermarker, WatermarkError, MAX_SAMPLE_RATE,
};
use std::collections::HashMap;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    chatterbox_testkit::committed_fixtures_root().join("watermark")
}

fn tiny_config() -> PerthConfig {
    PerthConfig {
        hidden_size: 8,
        ..PerthConfig::implicit()
    }
}

fn tiny_weights() -> HashMap<String, Tensor> {
    load_state_dict(fixtures().join("encoder.safetensors")).unwrap()
}

fn tiny() -> PerthWatermarker {
    PerthWatermarker::new(
        PerthNet::from_state_dict(&tiny_config(), tiny_weights(), &Device::Cpu).unwrap(),
    )
}

fn speech(sr: u32, secs: f64) -> Vec<f32> {
    chatterbox_testkit::speech_like(sr, secs)
}

#[test]
fn torch_checkpoint_and_safetensors_give_the_same_network() {
    let from_pth = PerthNet::load(
        fixtures().join("tiny_perth_net.pth.tar"),
        &tiny_config(),
        &Device::Cpu,
    )
    .unwrap();
    let pth = load_state_dict(fixtures().join("tiny_perth_net.pth.tar")).unwrap();
    // the state dict under "model", `ap.*` buffers included (ignored by the network)
    assert!(pth.contains_key("ap.spectrogram.window"));
    assert_eq!(
        pth["encoder.layers.1.conv.weight"].dims(),
        &[8, 8, 7],
        "hidden 8, kernel 7"
    );
    let x = speech(32_000, 0.5);
    let a = PerthWatermarker::new(from_pth)
        .apply_watermark(&x, 32_000)
        .unwrap();
    let b = tiny().apply_watermark(&x, 32_000).unwrap();
    assert_eq!(a, b);
}

#[test]
fn missing_and_corrupt_checkpoints_are_named_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.pth.tar");
    let err = PerthWatermarker::load(&missing, &Device::Cpu).unwrap_err();
    assert!(matches!(err, WatermarkError::CheckpointNotFound { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("nope.pth.tar") && msg.contains("perth_net_250000.pth.tar"),
        "{msg}"
    );

    for (name, bytes) in [
        ("garbage.pth.tar", b"not a checkpoint at all".to_vec()),
        (
            "truncated_zip.pth.tar",
            b"PK\x03\x04\x14\x00\x00\x00garbage".to_vec(),
        ),
        ("empty.safetensors", Vec::new()),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let err = PerthWatermarker::load(&p, &Device::Cpu).unwrap_err();
        assert!(
            matches!(err, WatermarkError::CorruptCheckpoint { .. }),
            "{name}: {err}"
        );
        assert!(err.to_string().contains(name), "{err}");
    }
    // a torch checkpoint cut in half
    let full = std::fs::read(fixtures().join("tiny_perth_net.pth.tar")).unwrap();
    let p = dir.path().join("half.pth.tar");
    std::fs::write(&p, &full[..full.len() / 2]).unwrap();
    let err = PerthNet::load(&p, &tiny_config(), &Device::Cpu).unwrap_err();
    assert!(
        matches!(err, WatermarkError::CorruptCheckpoint { .. }),
        "{err}"
    );
}

#[test]
fn missing_weights_and_wrong_shapes_name_the_key() {
    let mut w = tiny_weights();
    w.remove("decoder.fast_layers.3.conv.bias");
    let err = PerthNet::from_state_dict(&tiny_config(), w, &Device::Cpu).unwrap_err();
    assert!(
        matches!(&err, WatermarkError::MissingWeight { key } if key == "decoder.fast_layers.3.conv.bias"),
        "{err}"
    );
    // the shipped config (hidden 256) against hidden-8 weights
    let err = PerthNet::from_state_dict(&PerthConfig::implicit(), tiny_weights(), &Device::Cpu)
        .unwrap_err();
    match err {
        WatermarkError::ShapeMismatch {
            key,
            expected,
            actual,
        } => {
            assert_eq!(key, "encoder.layers.0.conv.weight");
            assert_eq!(expected, vec![256, 128, 1]);
            assert_eq!(actual, vec![8, 128, 1]);
        }
        other => panic!("expected ShapeMismatch, got {other}"),
    }
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let wm = tiny();
    assert!(matches!(
        wm.apply_watermark(&[], 24_000),
        Err(WatermarkError::EmptySignal { .. })
    ));
    let mut x = speech(24_000, 0.2);
    x[100] = f32::INFINITY;
    assert!(matches!(
        wm.get_watermark(&x, 24_000),
        Err(WatermarkError::NonFinite { index: 100, .. })
    ));
    let x = speech(24_000, 0.2);
    for sr in [0, 999, MAX_SAMPLE_RATE + 1, u32::MAX] {
        assert!(matches!(
            wm.apply_watermark(&x, sr),
            Err(WatermarkError::UnsupportedSampleRate { got, .. }) if got == sr
        ));
        assert!(wm.get_watermark(&x, sr).is_err());
    }
    // silence: no frame passes the loudness mask (the reference returns NaN)
    assert!(matches!(
        wm.detect(&[0.0; 4000], 32_000),
        Err(WatermarkError::NothingToDetect)
    ));
    // embedding silence is harmless: the mask keeps it as it is
    let y = wm.apply_watermark(&[0.0; 4000], 32_000).unwrap();
    assert!(y.iter().all(|v| v.abs() < 1e-6));
}

#[test]
fn shortest_signals_follow_the_stft_padding() {
    let wm = tiny();
    assert_eq!(wm.min_signal_len(32_000), 1025);
    // ceil(769 * 4 / 3) = 1026 >= 1025, ceil(768 * 4 / 3) = 1024
    assert_eq!(wm.min_signal_len(24_000), 769);
    assert_eq!(wm.min_signal_len(16_000), 513);
    for sr in [16_000u32, 24_000, 32_000, 44_100] {
        let n = wm.min_signal_len(sr);
        let x = speech(sr, 0.2);
        assert!(wm.apply_watermark(&x[..n], sr).is_ok(), "{sr} Hz, {n}");
        assert!(wm.detect(&x[..n], sr).is_ok(), "{sr} Hz, {n}");
        assert!(matches!(
            wm.apply_watermark(&x[..n - 1], sr),
            Err(WatermarkError::SignalTooShort { min, .. }) if min == n
        ));
    }
}

#[test]
fn output_lengths_follow_the_reference() {
    let wm = tiny();
    // 32 kHz: the iSTFT returns whole hops
    let x = speech(32_000, 0.5);
    assert_eq!(
        wm.apply_watermark(&x[..10_001], 32_000).unwrap().len(),
        9_920
    );
    // 24 kHz: 7_777 -> ceil(7_777 * 4 / 3) = 10_370 -> 10_240 -> ceil(10_240 * 3 / 4) = 7_680
    let x = speech(24_000, 0.5);
    assert_eq!(
        wm.apply_watermark(&x[..7_777], 24_000).unwrap().len(),
        7_680
    );
}

#[test]
fn detection_is_clipped_and_rounded() {
    let wm = tiny();
    let x = speech(24_000, 0.5);
    let d = wm.detect(&x, 24_000).unwrap();
    assert_eq!(d.score, d.raw.clamp(0.0, 1.0));
    assert!(d.confidence == 0.0 || d.confidence == 1.0);
    assert_eq!(d.confidence, d.score.round_ties_even());
    assert_eq!(wm.get_watermark(&x, 24_000).unwrap(), d.confidence);
}

#[test]
fn random_weights_are_seeded_and_watermark_with_finite_output() {
    let dev = Device::Cpu;
    let a = PerthWatermarker::random(7, &dev).unwrap();
    let b = PerthWatermarker::random(7, &dev).unwrap();
    let c = PerthWatermarker::random(8, &dev).unwrap();
    let clip = speech(24_000, 1.0);
    let (wa, wb, wc) = (
        a.apply_watermark(&clip, 24_000).unwrap(),
        b.apply_watermark(&clip, 24_000).unwrap(),
        c.apply_watermark(&clip, 24_000).unwrap(),
    );
    assert_eq!(wa, wb, "one seed, one network");
    assert_ne!(wa, wc, "another seed, another network");
    assert_eq!(wa.len(), clip.len());
    assert!(wa.iter().all(|v| v.is_finite()));
    // it changes the audio, a little (the shipped model changes it by far less)
    let diff = wa
        .iter()
        .zip(&clip)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    let peak = clip.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(diff > 0.0 && diff < 0.5 * peak, "{diff} vs peak {peak}");
}
