//! The alignment analyzer without its logits edits (`AlignmentAnalyzerConfig::tracking`), the
//! source of captions' word timings: it leaves the drawn tokens exactly as with the analyzer
//! off, records one text position per token, and those positions are the reference analyzer's
//! `text_position`s on the recorded `t3_alignment` fixture (the same tokens teacher-forced).
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_t3::{AlignmentAnalyzerConfig, GenerateOptions, Sampling, T3Cond, T3Config, T3};
use chatterbox_testkit::{fixtures_root, Fixture};
use std::collections::BTreeMap;

type R<T> = anyhow::Result<T>;

/// The tiny multilingual model's (layer, head) pairs standing in for `LLAMA_ALIGNED_HEADS`
/// (as `parity/recorders/t3.py` maps them).
const TINY_HEADS: [(usize, usize); 3] = [(1, 1), (1, 0), (0, 1)];

fn ids(v: &[i64]) -> Vec<u32> {
    v.iter().map(|&x| x as u32).collect()
}

/// The tiny multilingual T3 of the `t3_alignment` fixture and its conditioning.
fn model(fx: &Fixture) -> R<(T3, Tensor)> {
    let hp: T3Config = fx.config("hp")?;
    let case: String = fx.config("weights_case")?;
    let path = fixtures_root().join(format!("{case}.safetensors"));
    let dev = Device::Cpu;
    // SAFETY: fixture files are not modified while the tests run.
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[path], DType::F32, &dev)? };
    let t3 = T3::new(&hp, vb)?;
    let spk = fx.input("speaker_emb")?;
    let spk = Tensor::from_vec(spk.data, spk.shape, &dev)?;
    let p = fx.input_i64("prompt_tokens")?;
    let prompt = Tensor::from_vec(ids(&p.data), p.shape, &dev)?;
    let cond = T3Cond::new(spk)
        .with_prompt(prompt)
        .with_emotion_adv(fx.config("emotion_adv")?);
    let cond_emb = t3.prepare_conditioning(&cond)?;
    Ok((t3, cond_emb))
}

fn fixture() -> R<Fixture> {
    Ok(Fixture::load(
        &fixtures_root().join("t3_alignment/mtl_alignment.json"),
    )?)
}

#[test]
fn tracking_is_the_analyzer_without_its_edits() {
    let t = AlignmentAnalyzerConfig::with_heads(TINY_HEADS.to_vec()).tracking();
    assert!(!t.edit_logits);
    assert_eq!(t.aligned_heads, TINY_HEADS.to_vec());
    assert!(AlignmentAnalyzerConfig::default().edit_logits);
    assert_eq!(
        AlignmentAnalyzerConfig::default()
            .tracking()
            .aligned_heads
            .len(),
        3
    );
}

/// Tokens drawn with the tracking analyzer equal those drawn with the analyzer off (greedy and
/// seeded sampling, with and without CFG), and every token has its text position.
#[test]
fn tracking_leaves_the_tokens_unchanged() -> R<()> {
    let fx = fixture()?;
    let (t3, cond) = model(&fx)?;
    let texts: [Vec<u32>; 2] = [
        ids(&fx.input_i64("text_tokens")?.data),
        ids(&fx.input_i64("text_tokens_short")?.data),
    ];
    let mut compared = 0;
    for text in &texts {
        for cfg_weight in [0.5f32, 0.0] {
            for sampling in [Sampling::Greedy, Sampling::Seeded(3), Sampling::Seeded(11)] {
                let mut o = GenerateOptions::multilingual();
                o.sampling = sampling;
                o.cfg_weight = cfg_weight;
                o.max_new_tokens = 40;
                let off: Vec<u32> = t3.inference(&cond, text, &o)?;
                o.alignment =
                    Some(AlignmentAnalyzerConfig::with_heads(TINY_HEADS.to_vec()).tracking());
                let mut stream = t3.generate(&cond, text, &o)?;
                let mut on = Vec::new();
                for t in stream.by_ref() {
                    on.push(t?);
                }
                assert_eq!(on, off, "{sampling:?}, cfg {cfg_weight}: tokens differ");
                let pos = stream
                    .text_positions()
                    .ok_or_else(|| anyhow::anyhow!("no positions"))?;
                assert_eq!(pos.len(), on.len());
                // the analyzer masks text beyond the frame: position k <= k, inside the span
                for (k, &p) in pos.iter().enumerate() {
                    assert!(p <= k && p < text.len(), "step {k}: position {p}");
                }
                compared += on.len();
            }
        }
    }
    assert!(compared > 100, "{compared} tokens compared");
    Ok(())
}

/// The text positions equal the reference analyzer's (`state[:, 0]` of the fixture) when the
/// fixture's tokens are fed: the tracking analyzer sees the same attention rows, and its logits
/// edits (none here) never move the attention.
#[test]
fn positions_equal_the_reference_analyzers() -> R<()> {
    let fx = fixture()?;
    let (t3, cond) = model(&fx)?;
    let runs: BTreeMap<String, serde_json::Value> = fx.config("runs")?;
    let mut checked = 0;
    for name in runs.keys() {
        let suffix = if name == "main" { "" } else { name.as_str() };
        let text = ids(&fx.input_i64(&format!("text_tokens{suffix}"))?.data);
        let tokens = ids(&fx.i64(&format!("out.tokens{suffix}"))?.data);
        let state = fx.i64(&format!("out.state{suffix}"))?;
        assert_eq!(state.shape, vec![tokens.len(), 5]);
        let want: Vec<usize> = state.data.chunks(5).map(|r| r[0] as usize).collect();
        let mut o = GenerateOptions::multilingual();
        o.sampling = Sampling::Greedy;
        o.cfg_weight = fx.config("cfg_weight")?;
        o.stop_on_eos = false;
        o.max_new_tokens = tokens.len();
        o.alignment = Some(AlignmentAnalyzerConfig::with_heads(TINY_HEADS.to_vec()).tracking());
        let mut stream = t3.generate(&cond, &text, &o)?;
        for (i, &tok) in tokens.iter().enumerate() {
            stream
                .next()
                .ok_or_else(|| anyhow::anyhow!("{name}: stream ended at {i}"))??;
            if i + 1 < tokens.len() {
                stream.feed(tok)?;
            }
        }
        let got = stream
            .text_positions()
            .ok_or_else(|| anyhow::anyhow!("no positions"))?;
        assert_eq!(got, want.as_slice(), "run {name}");
        checked += got.len();
        // the reference's positions move: the fixture is not all at the start of the text
        assert!(want.iter().any(|&p| p > 0), "run {name}: {want:?}");
    }
    assert_eq!(checked, 30 + 30 + 4);
    Ok(())
}
