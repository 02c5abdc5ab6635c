//! The crate as another audio project uses it: public API only, a tiny HiFT built from a plain
//! state dict held in memory, no files. The reference's numbers are `tests/parity.rs`'s job.
use candle_core::{DType, Device, Tensor};
use chatterbox_vocoder::{F0PredictorConfig, HiFTConfig, HiFTGenerator, TrimFade, VocoderError};
use rand::SeedableRng;
use std::collections::HashMap;

type R = anyhow::Result<()>;

/// S3Gen's vocoder narrowed to 16 channels.
fn tiny() -> HiFTConfig {
    HiFTConfig::s3gen()
        .with_base_channels(16)
        .with_f0_predictor(F0PredictorConfig::default().with_cond_channels(16))
}

/// Small deterministic weights under every key the model reads.
fn state_dict(cfg: &HiFTConfig) -> anyhow::Result<HashMap<String, Tensor>> {
    let mut out = HashMap::new();
    for (k, (key, shape)) in HiFTGenerator::weight_shapes(cfg)?.into_iter().enumerate() {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|i| 0.1 * ((i * 7 + k * 13) as f32 * 0.618).sin())
            .collect();
        out.insert(key, Tensor::from_vec(values, shape, &Device::Cpu)?);
    }
    Ok(out)
}

fn mel(frames: usize) -> anyhow::Result<Tensor> {
    let values: Vec<f32> = (0..80 * frames)
        .map(|i| -6.0 + 2.0 * ((i % 80) as f32 / 80.0) + 0.5 * (i as f32 * 0.37).cos())
        .collect();
    Ok(Tensor::from_vec(values, (1, 80, frames), &Device::Cpu)?)
}

#[test]
fn weight_shapes_list_the_state_dict() -> R {
    let cfg = tiny();
    let shapes: HashMap<String, Vec<usize>> =
        HiFTGenerator::weight_shapes(&cfg)?.into_iter().collect();
    assert_eq!(shapes["conv_pre.weight"], [16, 80, 7]);
    // three upsampling stages halve 16 channels to 2; conv_post predicts n_fft + 2 = 18
    assert_eq!(shapes["ups.0.weight"], [16, 8, 16]);
    assert_eq!(shapes["conv_post.weight"], [18, 2, 7]);
    assert_eq!(shapes["f0_predictor.classifier.weight"], [1, 16]);
    // 3 resblocks per stage
    assert!(shapes.contains_key("resblocks.8.convs1.0.weight"));
    assert!(!shapes.contains_key("resblocks.9.convs1.0.weight"));
    Ok(())
}

#[test]
fn a_generator_from_a_state_dict_vocodes_deterministically() -> R {
    let cfg = tiny();
    assert_eq!(cfg.sample_rate(), 24_000);
    assert_eq!(cfg.samples_per_frame(), 480);
    let dev = Device::Cpu;
    let weights = state_dict(&cfg)?;
    let a = HiFTGenerator::from_state_dict(&cfg, weights.clone(), &dev)?;
    // half precision in, f32 out: the same weights after rounding to f16 and back
    let half: HashMap<String, Tensor> = weights
        .iter()
        .map(|(k, v)| Ok((k.clone(), v.to_dtype(DType::F16)?)))
        .collect::<candle_core::Result<_>>()?;
    let b = HiFTGenerator::from_state_dict(&cfg, half, &dev)?;

    let mel = mel(6)?;
    let run = |g: &HiFTGenerator| -> anyhow::Result<(Vec<f32>, Vec<f32>)> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let (wav, source) = g.inference(&mel, None, &mut rng)?;
        assert_eq!(wav.dims(), [1, 6 * 480]);
        assert_eq!(source.dims(), [1, 1, 6 * 480]);
        Ok((
            wav.flatten_all()?.to_vec1()?,
            source.flatten_all()?.to_vec1()?,
        ))
    };
    let (wav, source) = run(&a)?;
    assert!(wav.iter().all(|v| v.is_finite() && v.abs() <= 0.99));
    assert!(wav.iter().any(|&v| v != 0.0));
    assert!(source.iter().all(|v| v.is_finite()));
    // same weights, same seed: the same samples
    assert_eq!(run(&a)?, (wav.clone(), source.clone()));
    let (wav_half, _) = run(&b)?;
    assert_eq!(wav_half.len(), wav.len());
    assert!(wav_half.iter().all(|v| v.is_finite()));
    // another seed draws another excitation
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    let (_, other) = a.inference(&mel, None, &mut rng)?;
    assert_ne!(other.flatten_all()?.to_vec1::<f32>()?, source);

    // S3Gen's fade: 20 ms of silence, then 20 ms of ramp
    let fade = TrimFade::from_sample_rate(cfg.sample_rate(), &dev)?;
    assert_eq!(fade.len(), TrimFade::new(cfg.sampling_rate, &dev)?.len());
    let faded = fade
        .forward(&Tensor::from_vec(wav.clone(), (1, wav.len()), &dev)?)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    assert!(faded[..480].iter().all(|&v| v == 0.0));
    assert_eq!(faded[960..], wav[960..]);
    Ok(())
}

#[test]
fn bad_state_dicts_and_inputs_are_typed_errors() -> R {
    let cfg = tiny();
    let dev = Device::Cpu;
    let mut weights = state_dict(&cfg)?;
    weights.remove("conv_pre.weight");
    match HiFTGenerator::from_state_dict(&cfg, weights, &dev) {
        Err(VocoderError::MissingWeight { key, .. }) => assert_eq!(key, "conv_pre"),
        other => anyhow::bail!("expected MissingWeight, got {other:?}"),
    }
    let mut weights = state_dict(&cfg)?;
    weights.insert(
        "conv_post.weight".into(),
        Tensor::zeros((18, 3, 7), DType::F32, &dev)?,
    );
    match HiFTGenerator::from_state_dict(&cfg, weights, &dev) {
        Err(VocoderError::ShapeMismatch { key, actual, .. }) => {
            assert_eq!((key.as_str(), actual), ("conv_post.weight", vec![18, 3, 7]));
        }
        other => anyhow::bail!("expected ShapeMismatch, got {other:?}"),
    }
    let bad = tiny().with_upsample_rates(vec![8, 5]);
    assert!(matches!(
        HiFTGenerator::weight_shapes(&bad),
        Err(VocoderError::InvalidConfig(_))
    ));
    let hift = HiFTGenerator::from_state_dict(&cfg, state_dict(&cfg)?, &dev)?;
    let wrong_bins = Tensor::zeros((1, 40, 5), DType::F32, &dev)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    assert!(matches!(
        hift.inference(&wrong_bins, None, &mut rng),
        Err(VocoderError::InvalidInput { what: "mel", .. })
    ));
    Ok(())
}
