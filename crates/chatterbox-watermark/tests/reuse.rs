//! The crate as another audio project uses it: public API only, a PerthNet of hidden size 8
//! built from a plain state dict held in memory, no files. The reference's numbers are
//! `tests/parity.rs`'s job.
use candle_core::{DType, Device, Tensor};
use chatterbox_watermark::{PerthConfig, PerthNet, PerthWatermarker, WatermarkError};
use std::collections::HashMap;

type R = anyhow::Result<()>;

fn tiny() -> PerthConfig {
    PerthConfig::implicit().with_hidden_size(8)
}

/// Small deterministic weights under every key the network reads.
fn state_dict(cfg: &PerthConfig) -> anyhow::Result<HashMap<String, Tensor>> {
    let mut out = HashMap::new();
    for (k, (key, shape)) in PerthNet::weight_shapes(cfg).into_iter().enumerate() {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|i| 0.2 * ((i * 5 + k * 11) as f32 * 0.731).sin())
            .collect();
        out.insert(key, Tensor::from_vec(values, shape, &Device::Cpu)?);
    }
    Ok(out)
}

fn speech_like(sr: u32, seconds: f32) -> Vec<f32> {
    let n = (sr as f32 * seconds) as usize;
    (0..n)
        .map(|i| {
            let t = i as f32 / sr as f32;
            let envelope = 0.5 + 0.5 * (2.0 * std::f32::consts::PI * 3.0 * t).sin();
            envelope
                * (0.3 * (2.0 * std::f32::consts::PI * 180.0 * t).sin()
                    + 0.1 * (2.0 * std::f32::consts::PI * 720.0 * t).sin())
        })
        .collect()
}

#[test]
fn a_network_from_a_state_dict_embeds_and_detects() -> R {
    let cfg = tiny();
    assert_eq!(cfg.subband(), 128);
    let shapes = PerthNet::weight_shapes(&cfg);
    assert_eq!(shapes.len(), 56);
    assert!(shapes.contains(&("encoder.layers.0.conv.weight".to_string(), vec![8, 128, 1])));
    let dev = Device::Cpu;
    let wm = PerthWatermarker::new(PerthNet::from_state_dict(&cfg, state_dict(&cfg)?, &dev)?);
    assert_eq!(wm.min_signal_len(32_000), 1025);

    // at the network's rate the output is the input rounded down to whole hops (320)
    let x = speech_like(32_000, 0.5);
    let marked = wm.apply_watermark(&x, 32_000)?;
    assert_eq!(marked.len(), x.len() / 320 * 320);
    assert!(marked.iter().all(|v| v.is_finite()));
    let changed = marked
        .iter()
        .zip(&x)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(changed > 1e-4, "the watermark changed nothing ({changed})");
    // same weights, same input: the same samples, from a second network too
    assert_eq!(wm.apply_watermark(&x, 32_000)?, marked);
    let again = PerthWatermarker::new(PerthNet::from_state_dict(&cfg, state_dict(&cfg)?, &dev)?);
    assert_eq!(again.apply_watermark(&x, 32_000)?, marked);

    // at 24 kHz: resampled there and back
    let x24 = speech_like(24_000, 0.5);
    let marked24 = wm.apply_watermark(&x24, 24_000)?;
    assert!(marked24.len() <= x24.len() && marked24.len() + 240 >= x24.len());

    let d = wm.detect(&marked, 32_000)?;
    assert!(d.raw.is_finite());
    assert_eq!(d.score, d.raw.clamp(0.0, 1.0));
    assert_eq!(d.confidence, d.score.round_ties_even());
    assert_eq!(d.is_watermarked(), d.confidence == 1.0);
    assert_eq!(wm.get_watermark(&marked, 32_000)?, d.confidence);
    assert_eq!(wm.detect(&marked, 32_000)?, d);
    Ok(())
}

#[test]
fn bad_state_dicts_and_inputs_are_typed_errors() -> R {
    let cfg = tiny();
    let dev = Device::Cpu;
    let mut weights = state_dict(&cfg)?;
    weights.remove("decoder.fast_layers.6.conv.bias");
    match PerthNet::from_state_dict(&cfg, weights, &dev) {
        Err(WatermarkError::MissingWeight { key }) => {
            assert_eq!(key, "decoder.fast_layers.6.conv.bias")
        }
        other => anyhow::bail!("expected MissingWeight, got {other:?}"),
    }
    let mut weights = state_dict(&cfg)?;
    weights.insert(
        "encoder.layers.3.conv.weight".into(),
        Tensor::zeros((8, 8, 5), DType::F32, &dev)?,
    );
    match PerthNet::from_state_dict(&cfg, weights, &dev) {
        Err(WatermarkError::ShapeMismatch {
            key,
            expected,
            actual,
        }) => {
            assert_eq!(key, "encoder.layers.3.conv.weight");
            assert_eq!((expected, actual), (vec![8, 8, 7], vec![8, 8, 5]));
        }
        other => anyhow::bail!("expected ShapeMismatch, got {other:?}"),
    }
    // an f16 state dict with an extra buffer loads (converted to f32, the buffer ignored)
    let mut weights: HashMap<String, Tensor> = state_dict(&cfg)?
        .into_iter()
        .map(|(k, v)| Ok((k, v.to_dtype(DType::F16)?)))
        .collect::<candle_core::Result<_>>()?;
    weights.insert("ap.window".into(), Tensor::ones(2048, DType::F32, &dev)?);
    let wm = PerthWatermarker::new(PerthNet::from_state_dict(&cfg, weights, &dev)?);

    assert!(matches!(
        PerthNet::from_state_dict(
            &tiny().with_window_fn("kaiser".into()),
            state_dict(&cfg)?,
            &dev
        ),
        Err(WatermarkError::InvalidConfig(_))
    ));
    assert!(matches!(
        wm.detect(&vec![0f32; 32_000], 32_000),
        Err(WatermarkError::NothingToDetect)
    ));
    assert!(matches!(
        wm.apply_watermark(&[0.1; 100], 32_000),
        Err(WatermarkError::SignalTooShort { min: 1025, .. })
    ));
    assert!(matches!(
        wm.apply_watermark(&speech_like(500, 4.0), 500),
        Err(WatermarkError::UnsupportedSampleRate { got: 500, .. })
    ));
    Ok(())
}
