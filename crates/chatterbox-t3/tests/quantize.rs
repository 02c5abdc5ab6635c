//! Quantized backbone weights ([`T3::quantize`]): the tiny English fixture loaded from its
//! checkpoint file and a 256-wide Llama (wide enough for 4-bit blocks), against f32.
use candle_core::{DType, Device, Tensor, D};
use candle_nn::VarBuilder;
use chatterbox_t3::{GenerateOptions, Sampling, T3Config, T3Error, WeightFormat, T3};
use std::collections::HashMap;

#[path = "common/fixtures.rs"]
mod fixtures;
#[path = "common/random_weights.rs"]
#[allow(dead_code)]
mod random_weights;

use fixtures::{cond_emb, ids, model};

type R<T> = anyhow::Result<T>;

/// Largest difference over the largest f32 logit.
fn max_rel(a: &Tensor, b: &Tensor) -> R<f32> {
    let d = (a - b)?.abs()?.max_all()?.to_scalar::<f32>()?;
    let m = b.abs()?.max_all()?.to_scalar::<f32>()?;
    Ok(d / m)
}

/// Share of rows whose most likely token is the same.
fn top1(a: &Tensor, b: &Tensor) -> R<f32> {
    let a = a.argmax(D::Minus1)?.flatten_all()?.to_vec1::<u32>()?;
    let b = b.argmax(D::Minus1)?.flatten_all()?.to_vec1::<u32>()?;
    Ok(a.iter().zip(&b).filter(|(x, y)| x == y).count() as f32 / a.len() as f32)
}

/// Teacher-forced speech logits of `[cond | text | speech]` (both CFG rows for Llama).
fn logits(t3: &T3, ce: &Tensor, text: &[u32], speech: &[u32]) -> R<Tensor> {
    let embeds = t3.prepare_input_embeds(ce, text, speech, !t3.config().is_gpt())?;
    let hidden = t3
        .hidden_states(&embeds)?
        .pop()
        .ok_or_else(|| anyhow::anyhow!("none"))?;
    let t = hidden.dim(1)?;
    Ok(t3.speech_logits(&hidden.narrow(1, t - speech.len(), speech.len())?)?)
}

/// The 2-layer Llama T3 256 wide of [`random_weights::wide_llama_weights`].
fn wide_llama() -> R<T3> {
    let (hp, m) = random_weights::wide_llama_weights()?;
    Ok(T3::new(
        &hp,
        VarBuilder::from_tensors(m, DType::F32, &Device::Cpu),
    )?)
}

#[test]
fn q8_logits_of_the_tiny_checkpoint_stay_close_to_f32() -> R<()> {
    let (t3, fx) = model("en")?;
    let ce = cond_emb(&t3, &fx)?;
    let text = ids(&fx, "text_tokens")?;
    let speech = ids(&fx, "tf_tokens")?;
    let want = logits(&t3, &ce, &text, &speech)?;
    let mut q8 = t3.clone();
    let report = q8.quantize(WeightFormat::Q8)?;
    // every projection of the 32-wide model takes 32-value blocks: 2 layers x 4
    assert_eq!((report.quantized, report.kept), (8, 0));
    assert_eq!(q8.weight_format(), WeightFormat::Q8);
    // 34 bytes a block of 32 f32 weights (128 bytes)
    assert_eq!(report.bytes_after * 128, report.bytes_before * 34);
    let got = logits(&q8, &ce, &text, &speech)?;
    let err = max_rel(&got, &want)?;
    // measured 1.4e-4 (weights and activations rounded to 8 bits)
    assert!(err > 0.0 && err < 5e-4, "q8 logits: {err}");
    // the original is untouched
    assert_eq!(t3.weight_format(), WeightFormat::F32);
    assert_eq!(max_rel(&logits(&t3, &ce, &text, &speech)?, &want)?, 0.0);
    Ok(())
}

#[test]
fn the_exact_format_changes_nothing() -> R<()> {
    let (t3, fx) = model("turbo")?;
    let ce = cond_emb(&t3, &fx)?;
    let text = ids(&fx, "text_tokens")?;
    let want = logits(&t3, &ce, &text, &[6561, 5, 9])?;
    let mut same = t3.clone();
    let report = same.quantize(WeightFormat::F32)?;
    assert_eq!((report.quantized, report.kept), (0, 8));
    assert_eq!(report.bytes_before, report.bytes_after);
    let got = logits(&same, &ce, &text, &[6561, 5, 9])?;
    assert_eq!((got - want)?.abs()?.max_all()?.to_scalar::<f32>()?, 0.0);
    // 16 wide: only the MLP's output projections (64 inputs) fit 32-value blocks
    let mut q8 = t3.clone();
    let report = q8.quantize(WeightFormat::Q8)?;
    assert_eq!((report.quantized, report.kept), (2, 6));
    Ok(())
}

#[test]
fn every_format_on_a_wide_llama_against_f32() -> R<()> {
    let t3 = wide_llama()?;
    let ce = t3.prepare_conditioning(
        &chatterbox_t3::T3Cond::new(random_weights::fixed(&[1, 256], 0.1, 99)?)
            .with_prompt(Tensor::new(&[[3u32, 40, 500, 7, 6000, 12]], &Device::Cpu)?),
    )?;
    let text = t3.pad_text_tokens(&[20, 21, 22, 300, 41, 7]);
    let speech: Vec<u32> = (0..24u32).map(|i| (i * 389 + 17) % 6561).collect();
    let want = logits(&t3, &ce, &text, &speech)?;
    // measured (max |diff| / max |logit|, top-1 agreement over 48 rows of near-flat random
    // distributions): q8 0.013, 0.98; q4 0.114, 0.65; bf16 0.004, 1.0
    for (format, bound, agree) in [
        (WeightFormat::Q8, 0.03, 0.9),
        (WeightFormat::Q4, 0.2, 0.5),
        (WeightFormat::Bf16, 0.02, 0.95),
    ] {
        let mut q = t3.clone();
        let report = q.quantize(format)?;
        assert_eq!((report.quantized, report.kept), (8, 0), "{format}");
        let got = logits(&q, &ce, &text, &speech)?;
        let err = max_rel(&got, &want)?;
        let same = top1(&got, &want)?;
        assert!(err > 0.0 && err < bound, "{format}: logits {err}");
        assert!(same >= agree, "{format}: top-1 agreement {same}");
        // decode steps run through the same blocks as the prefill
        let mut opts = GenerateOptions::default();
        opts.sampling = Sampling::Greedy;
        opts.max_new_tokens = 6;
        opts.stop_on_eos = false;
        let tokens = q.inference(&ce, &text, &opts)?;
        assert_eq!(tokens.len(), 6, "{format}");
    }
    Ok(())
}

#[test]
fn quantizing_twice_or_a_half_precision_model_is_a_typed_error() -> R<()> {
    let (t3, _) = model("en")?;
    let mut q8 = t3.clone();
    q8.quantize(WeightFormat::Q8)?;
    assert!(matches!(
        q8.quantize(WeightFormat::Q4),
        Err(T3Error::InvalidConfig(_))
    ));
    // the exact format is always accepted and changes nothing
    assert_eq!(q8.quantize(WeightFormat::F32)?.quantized, 0);
    assert_eq!(q8.weight_format(), WeightFormat::Q8);
    let fx = fixtures::fixture("en")?;
    let hp: T3Config = fx.config("hp")?;
    // SAFETY: fixture files are not modified while the tests run.
    let vb = unsafe {
        VarBuilder::from_mmaped_safetensors(&[fx.safetensors_path()], DType::BF16, &Device::Cpu)?
    };
    let mut half = T3::new(&hp, vb)?;
    let err = half.quantize(WeightFormat::Q8);
    assert!(matches!(err, Err(T3Error::InvalidConfig(_))), "{err:?}");
    Ok(())
}

/// Continuous batching with 8-bit weights: each request draws what it draws alone (the
/// quantized product rounds each activation row by itself, so rows do not mix).
#[test]
fn batched_requests_with_q8_weights_draw_their_solo_tokens() -> R<()> {
    use chatterbox_t3::{BatchDecoder, BatchEvent, BatchOptions};
    let mut t3 = wide_llama()?;
    t3.quantize(WeightFormat::Q8)?;
    let ce = t3.prepare_conditioning(
        &chatterbox_t3::T3Cond::new(random_weights::fixed(&[1, 256], 0.1, 98)?)
            .with_prompt(Tensor::new(&[[3u32, 40, 500, 7]], &Device::Cpu)?),
    )?;
    let texts: Vec<Vec<u32>> = (0..3u32)
        .map(|j| t3.pad_text_tokens(&(0..4 + j).map(|i| 20 + i * 7 + j).collect::<Vec<_>>()))
        .collect();
    let mut opts = GenerateOptions::default();
    opts.max_new_tokens = 10;
    opts.stop_on_eos = false;
    let mut solo = Vec::new();
    for (j, text) in texts.iter().enumerate() {
        opts.sampling = Sampling::Seeded(j as u64);
        solo.push(t3.inference(&ce, text, &opts)?);
    }
    let mut batch = BatchDecoder::new(&t3, BatchOptions::default().with_slots(3))?;
    let (mut ids, mut events) = (Vec::new(), Vec::new());
    for (j, text) in texts.iter().enumerate() {
        opts.sampling = Sampling::Seeded(j as u64);
        let (id, admitted) = batch.admit_generate(&ce, text, &opts)?;
        ids.push(id);
        events.extend(admitted);
    }
    let mut got: HashMap<_, Vec<u32>> = HashMap::new();
    while batch.active() > 0 {
        events.extend(batch.step()?);
    }
    for e in events {
        match e {
            BatchEvent::Token { id, token } => got.entry(id).or_default().push(token),
            BatchEvent::Failed { error, .. } => return Err(error.into()),
            BatchEvent::Finished { .. } => {}
        }
    }
    for (j, id) in ids.iter().enumerate() {
        assert_eq!(got.remove(id).unwrap_or_default(), solo[j], "request {j}");
    }
    Ok(())
}
