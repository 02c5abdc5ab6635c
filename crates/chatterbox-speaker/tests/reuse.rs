//! The crate as another project uses it: each model built from a tiny in-memory state_dict
//! (a plain `HashMap<String, Tensor>` through `VarBuilder::from_tensors`) and run through the
//! public API only.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failing unwrap is a failing test
use approx::assert_abs_diff_eq;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_speaker::{
    CAMPPlus, CAMPPlusConfig, EmbedOptions, SpeakerError, VoiceEncConfig, VoiceEncoder,
};
use chatterbox_testkit::state_dict;
use std::collections::HashMap;

type R<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn from_tensors(sd: &HashMap<String, Tensor>) -> VarBuilder<'static> {
    VarBuilder::from_tensors(sd.clone(), DType::F32, &Device::Cpu)
}

/// A deterministic voiced signal with some noise, `n` samples.
fn clip(n: usize, f: f32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            0.3 * (i as f32 * f).sin()
                + 0.1 * (i as f32 * f * 2.7).sin()
                + 0.05 * ((i * 7919 % 101) as f32 / 101.0 - 0.5)
        })
        .collect()
}

fn ve_config() -> VoiceEncConfig {
    VoiceEncConfig {
        ve_hidden_size: 8,
        speaker_embed_size: 6,
        ..VoiceEncConfig::chatterbox()
    }
}

fn campplus_config() -> CAMPPlusConfig {
    CAMPPlusConfig {
        growth_rate: 2,
        bn_size: 2,
        init_channels: 4,
        embedding_size: 8,
        ..CAMPPlusConfig::s3gen()
    }
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

#[test]
fn voice_encoder_from_a_state_dict() -> R<()> {
    let cfg = ve_config();
    let sd = state_dict(|vb| VoiceEncoder::new(&cfg, vb))?;
    assert!(sd.contains_key("lstm.weight_ih_l0") && sd.contains_key("proj.bias"));
    let ve = VoiceEncoder::new(&cfg, from_tensors(&sd))?;
    let wavs = [clip(16_000 * 3, 0.05), clip(16_000 * 2, 0.11)];
    let refs: Vec<&[f32]> = wavs.iter().map(Vec::as_slice).collect();
    let opts = EmbedOptions::default();
    let utt = ve.embeds_from_wavs(&refs, 16_000, &opts)?;
    assert_eq!(utt.dims(), &[2, 6]);
    for row in utt.to_vec2::<f32>()? {
        assert!(row.iter().all(|v| v.is_finite()));
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert_abs_diff_eq!(norm, 1.0, epsilon = 1e-5);
    }
    // deterministic: a second model from the same state_dict gives the same numbers
    let again =
        VoiceEncoder::new(&cfg, from_tensors(&sd))?.embeds_from_wavs(&refs, 16_000, &opts)?;
    assert_eq!(utt.to_vec2::<f32>()?, again.to_vec2::<f32>()?);
    // two different clips give different embeddings
    let rows = utt.to_vec2::<f32>()?;
    assert!(rows[0]
        .iter()
        .zip(&rows[1])
        .any(|(a, b)| (a - b).abs() > 1e-4));
    Ok(())
}

#[test]
fn voice_encoder_partials_are_exposed() -> R<()> {
    let cfg = ve_config();
    let ve = VoiceEncoder::new(
        &cfg,
        from_tensors(&state_dict(|vb| VoiceEncoder::new(&cfg, vb))?),
    )?;
    let opts = EmbedOptions::default().with_batch_size(3);
    let wav = clip(16_000 * 3, 0.05);
    let mel = ve.melspectrogram(&wav, opts.trim_top_db, "wav")?;
    let n_frames = mel.rows();

    // the slicing: a step of 77 frames (rate 1.3), partials of 160 frames
    let ranges = ve.partial_ranges(n_frames, &opts)?;
    assert!(ranges.len() > 1);
    assert!(ranges
        .iter()
        .enumerate()
        .all(|(i, r)| r.start == 77 * i && r.len() == 160));

    // the partials are those frames of the mel, zero past its end
    let partials = ve.partials(&mel, &opts)?;
    assert_eq!(partials.dims(), &[ranges.len(), 160, 40]);
    let last = ranges.last().unwrap();
    let got = partials.get(ranges.len() - 1)?.to_vec2::<f32>()?;
    for (j, frame) in last.clone().enumerate() {
        let want: &[f32] = if frame < n_frames {
            mel.row(frame)
        } else {
            &[0.0; 40]
        };
        assert_eq!(got[j].as_slice(), want, "frame {frame}");
    }

    // per-partial embeddings: forward() of the partials, and their renormalised mean is the
    // utterance embedding
    let pe = ve.partial_embeds_from_wavs(&[&wav], 16_000, &opts)?;
    assert_eq!(pe.counts, vec![ranges.len()]);
    assert_eq!(pe.embeds.dims(), &[ranges.len(), 6]);
    assert!(max_abs_diff(&pe.embeds, &ve.forward(&partials)?) < 1e-6);
    let mean = pe.utterance(0)?.mean(0)?;
    let mean = mean.broadcast_div(&mean.sqr()?.sum_all()?.sqrt()?)?;
    let utt = ve.embeds_from_wavs(&[&wav], 16_000, &opts)?.squeeze(0)?;
    assert!(max_abs_diff(&mean, &utt) < 1e-6);
    assert!(pe.utterance(1).is_err());
    Ok(())
}

#[test]
fn campplus_from_a_state_dict() -> R<()> {
    let cfg = campplus_config();
    let sd = state_dict(|vb| CAMPPlus::new(&cfg, vb.pp("speaker_encoder")))?;
    assert!(sd.keys().all(|k| k.starts_with("speaker_encoder.")));
    let vb = from_tensors(&sd).pp("speaker_encoder");
    let model = CAMPPlus::new(&cfg, vb)?;
    assert_eq!(model.sample_rate(), 16_000);
    let a = clip(16_000 * 2, 0.05);
    let x = model.inference(&a, 16_000)?;
    assert_eq!(x.dims(), &[1, 8]);
    let v = x.flatten_all()?.to_vec1::<f32>()?;
    assert!(v.iter().all(|v| v.is_finite()) && v.iter().any(|&v| v != 0.0));
    // the candle-op path (what CUDA and Metal run) gives the same x-vector
    let ops = model.clone().with_cpu_kernels(false);
    assert!(!ops.cpu_kernels());
    let y = ops.inference(&a, 16_000)?;
    let scale = v.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(max_abs_diff(&x, &y) <= 1e-4 * scale.max(1.0));
    // determinism
    let again = CAMPPlus::new(&cfg, from_tensors(&sd).pp("speaker_encoder"))?;
    assert_eq!(
        again.inference(&a, 16_000)?.to_vec2::<f32>()?,
        x.to_vec2::<f32>()?
    );
    Ok(())
}

#[test]
fn campplus_batches_clips_as_the_reference_does() -> R<()> {
    let cfg = campplus_config();
    let sd = state_dict(|vb| CAMPPlus::new(&cfg, vb))?;
    let model = CAMPPlus::new(&cfg, from_tensors(&sd))?;
    let long = clip(16_000 * 2, 0.05);
    let short = clip(12_000, 0.09);
    let alone_long = model.inference(&long, 16_000)?;
    let alone_short = model.inference(&short, 16_000)?;

    for m in [model.clone(), model.clone().with_cpu_kernels(false)] {
        // one clip: inference()
        let one = m.inference_batch(&[&short], 16_000)?;
        assert!(max_abs_diff(&one, &alone_short) < 1e-5);
        // clips of one length: each as alone
        let same = m.inference_batch(&[&long, &long], 16_000)?;
        assert!(max_abs_diff(&same.get(1)?, &alone_long.squeeze(0)?) < 1e-5);
        // different lengths: features zero-padded to the longest (pad_list), no mask
        let xs = m.inference_batch(&[&short, &long], 16_000)?;
        assert_eq!(xs.dims(), &[2, 8]);
        assert!(max_abs_diff(&xs.get(1)?, &alone_long.squeeze(0)?) < 1e-5);
        let f_long = m.extract_feature(&long)?.rows();
        let f_short = m.extract_feature(&short)?;
        let mut padded = f_short.as_slice().to_vec();
        padded.resize(f_long * 80, 0.0);
        let padded = Tensor::from_vec(padded, (1, f_long, 80), &Device::Cpu)?;
        assert!(max_abs_diff(&xs.get(0)?, &m.forward(&padded)?.squeeze(0)?) < 1e-5);
        // which is not the x-vector of the short clip alone
        assert!(max_abs_diff(&xs.get(0)?, &alone_short.squeeze(0)?) > 1e-4);
    }
    // errors name the clip
    let silent = vec![0f32; 16_000];
    match model.inference_batch(&[&long, &silent], 16_000) {
        Err(SpeakerError::SilentAudio { what, .. }) => assert_eq!(what, "CAMPPlus input 1"),
        other => panic!("expected SilentAudio, got {other:?}"),
    }
    assert!(matches!(
        model.inference_batch(&[], 16_000),
        Err(SpeakerError::InvalidInput { .. })
    ));
    Ok(())
}

#[test]
fn missing_keys_are_named_with_their_prefix() -> R<()> {
    let cfg = campplus_config();
    let mut sd = state_dict(|vb| CAMPPlus::new(&cfg, vb.pp("speaker_encoder")))?;
    sd.remove("speaker_encoder.xvector.dense.linear.weight");
    match CAMPPlus::new(&cfg, from_tensors(&sd).pp("speaker_encoder")) {
        Err(SpeakerError::MissingWeight { key }) => {
            assert_eq!(key, "speaker_encoder.xvector.dense.linear.weight")
        }
        other => panic!("expected MissingWeight, got {:?}", other.err()),
    }
    let vcfg = ve_config();
    let mut sd = state_dict(|vb| VoiceEncoder::new(&vcfg, vb.pp("ve")))?;
    sd.remove("ve.proj.weight");
    match VoiceEncoder::new(&vcfg, from_tensors(&sd).pp("ve")) {
        Err(SpeakerError::MissingWeight { key }) => assert_eq!(key, "ve.proj.weight"),
        other => panic!("expected MissingWeight, got {:?}", other.err()),
    }
    Ok(())
}

#[test]
fn configs_have_presets_and_read_json() -> R<()> {
    let ve: VoiceEncConfig = serde_json::from_str(r#"{"ve_hidden_size": 8}"#)?;
    assert_eq!(
        ve,
        VoiceEncConfig {
            ve_hidden_size: 8,
            ..VoiceEncConfig::chatterbox()
        }
    );
    assert_eq!(VoiceEncConfig::chatterbox().speaker_embed_size, 256);
    let cp: CAMPPlusConfig = serde_json::from_str(r#"{"memory_efficient": false}"#)?;
    assert_eq!(cp, CAMPPlusConfig::s3gen());
    assert_eq!(CAMPPlusConfig::s3gen().embedding_size, 192);
    // what serde writes reads back
    let json = serde_json::to_string(&campplus_config())?;
    assert_eq!(
        serde_json::from_str::<CAMPPlusConfig>(&json)?,
        campplus_config()
    );
    let opts = EmbedOptions::default()
        .with_rate(None)
        .with_overlap(0.25)
        .with_min_coverage(0.5)
        .with_batch_size(0)
        .with_trim_top_db(None);
    assert_eq!(
        (
            opts.rate,
            opts.overlap,
            opts.min_coverage,
            opts.batch_size,
            opts.trim_top_db
        ),
        (None, 0.25, 0.5, 0, None)
    );
    Ok(())
}
