//! The alignment-stream analyzer: each rule on synthetic alignment matrices, and the analyzer
//! inside a generation on the tiny multilingual parity model (edits only the stop-token logit,
//! leaves the model's logits untouched, rejects heads the backbone lacks).
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_t3::{
    AlignmentAnalyzerConfig, AlignmentStreamAnalyzer, GenerateOptions, Sampling, T3Cond, T3Config,
    T3Error, LLAMA_ALIGNED_HEADS, T3,
};
use chatterbox_testkit::{fixtures_root, Fixture};

type R<T> = anyhow::Result<T>;

const EOS: u32 = 6562;
const BOS: u32 = 6561;

/// One row over `s` text positions with all mass at `col`.
fn one_hot(s: usize, col: usize) -> Vec<f32> {
    let mut v = vec![0.0; s];
    v[col] = 1.0;
    v
}

/// Feeds `rows` (one step each, one head) after a first chunk of two rows at column 0.
fn analyzer(s: usize) -> AlignmentStreamAnalyzer {
    let mut a = AlignmentStreamAnalyzer::new((10, 10 + s), EOS);
    let first = [one_hot(s, 0), one_hot(s, 0)].concat();
    let r = a.step(&first, 1, 2, Some(BOS));
    assert_eq!(r.position, 0);
    a
}

#[test]
fn heads_are_averaged_and_future_text_is_masked() {
    let s = 8;
    let mut a = AlignmentStreamAnalyzer::new((3, 3 + s), EOS);
    // 3 heads, 2 rows: the mean over heads, then columns > frame 0 zeroed.
    let mut chunk = Vec::new();
    for h in 0..3 {
        for _ in 0..2 {
            chunk.extend((0..s).map(|c| (h + 1) as f32 * 0.1 + c as f32 * 0.01));
        }
    }
    a.step(&chunk, 3, 2, Some(BOS));
    let (m, rows) = a.alignment();
    assert_eq!(rows, 2);
    assert!((m[0] - 0.2).abs() < 1e-6, "mean of 0.1, 0.2, 0.3: {}", m[0]);
    assert!(m[1..s].iter().all(|&v| v == 0.0), "{:?}", &m[..s]);
    // Frame 1: attention at text position 5 is beyond frame + 1 and masked: argmax falls back
    // to the first maximum of the zeroed row (position 0 with all zeros).
    let r = a.step(&one_hot(s, 5), 1, 1, Some(100));
    assert_eq!(r.position, 0);
    // Frame 2 may look at positions <= 2.
    let r = a.step(&one_hot(s, 2), 1, 1, Some(101));
    assert_eq!(r.position, 2);
    assert!(!r.discontinuity);
}

#[test]
fn eos_is_suppressed_until_the_last_three_text_tokens() {
    let s = 10;
    let mut a = analyzer(s);
    let mut positions = Vec::new();
    for f in 1..9 {
        let r = a.step(&one_hot(s, f), 1, 1, Some(1000 + f as u32));
        positions.push((r.position, r.eos_suppressed, r.complete, r.eos_forced));
    }
    // suppressed while the attended position < S - 3 = 7; complete from position 7 on
    for (i, &(p, sup, complete, forced)) in positions.iter().enumerate() {
        assert_eq!(p, i + 1);
        assert_eq!(sup, p < 7, "position {p}");
        assert_eq!(complete, p >= 7, "position {p}");
        assert!(!forced);
    }
    let mut logits = vec![1.5f32; 6563];
    let mut b = analyzer(s);
    let r = b.step(&one_hot(s, 1), 1, 1, Some(5));
    b.apply(&r, &mut logits);
    assert_eq!(logits[EOS as usize], -32768.0);
    assert!(logits
        .iter()
        .enumerate()
        .all(|(i, &v)| i == EOS as usize || v == 1.5));

    // Text of 5 tokens or fewer: never suppressed.
    let mut short = analyzer(5);
    let r = short.step(&one_hot(5, 0), 1, 1, Some(5));
    assert!(!r.eos_suppressed && !r.eos_forced);
}

#[test]
fn long_tail_forces_eos() {
    let s = 8;
    let mut a = analyzer(s);
    // walk to position 5 = S - 3: complete at frame 5 (completed_at = its row count, 6)
    for f in 1..=5 {
        let r = a.step(&one_hot(s, f), 1, 1, Some(f as u32));
        assert_eq!(r.complete, f == 5);
        assert!(!r.eos_forced);
    }
    // stay on the second-to-last text token (frame 6 may not see the last one yet): the column
    // sum over A[completed_at:, -3:] reaches 5 on the 5th row
    for k in 1..=5 {
        let r = a.step(&one_hot(s, s - 2), 1, 1, Some(100 + k));
        assert_eq!(r.long_tail, k == 5, "row {k}");
        assert_eq!(r.eos_forced, k == 5);
        assert!(!r.repetition && !r.token_repetition);
        if r.eos_forced {
            let mut logits = vec![3.0f32; 6563];
            a.apply(&r, &mut logits);
            assert_eq!(logits[EOS as usize], 32768.0);
            assert!(logits
                .iter()
                .enumerate()
                .all(|(i, &v)| i == EOS as usize || v == -32768.0));
        }
    }
}

#[test]
fn alignment_repetition_forces_eos() {
    let s = 10;
    let mut a = analyzer(s);
    for f in 1..=7 {
        let r = a.step(&one_hot(s, f), 1, 1, Some(f as u32));
        assert_eq!(r.complete, f == 7);
    }
    // back to the first text token after completion: a jump of -7 (discontinuity, position
    // kept), one unit of mass in A[completed_at:, :-5] per row; the sum must exceed 5.
    for k in 1..=6 {
        let r = a.step(&one_hot(s, 0), 1, 1, Some(100 + k));
        assert!(r.discontinuity);
        assert_eq!(r.position, 7);
        assert_eq!(r.repetition, k == 6, "row {k}");
        assert_eq!(r.eos_forced, k == 6);
        assert!(!r.long_tail);
    }
    // the same attention before completion is not a repetition
    let mut b = analyzer(s);
    for k in 1..=10 {
        let r = b.step(&one_hot(s, 0), 1, 1, Some(200 + k));
        assert!(!r.complete && !r.repetition && !r.eos_forced);
        assert!(r.eos_suppressed);
    }
}

#[test]
fn the_same_token_twice_in_a_row_forces_eos() {
    let s = 10;
    // ids seen: BOS (first step), then the tokens fed back
    let mut a = analyzer(s);
    let r = a.step(&one_hot(s, 1), 1, 1, Some(7));
    assert!(!r.token_repetition, "[BOS, 7]");
    let r = a.step(&one_hot(s, 2), 1, 1, Some(8));
    assert!(!r.token_repetition, "[BOS, 7, 8]");
    let r = a.step(&one_hot(s, 3), 1, 1, Some(8));
    assert!(r.token_repetition && r.eos_forced, "[BOS, 7, 8, 8]");
    assert!(!r.eos_suppressed, "forcing overrides the suppression");
    // only two ids tracked: no decision yet, even if equal
    let mut b = AlignmentStreamAnalyzer::new((0, s), EOS);
    let r = b.step(&[one_hot(s, 0), one_hot(s, 0)].concat(), 1, 2, Some(BOS));
    assert!(!r.token_repetition);
    let r = b.step(&one_hot(s, 1), 1, 1, Some(BOS));
    assert!(!r.token_repetition, "[BOS, BOS]: fewer than 3 ids");
    let r = b.step(&one_hot(s, 1), 1, 1, Some(BOS));
    assert!(r.token_repetition, "[BOS, BOS, BOS]");
}

#[test]
fn defaults_are_off_and_the_reference_heads() {
    assert!(GenerateOptions::default().alignment.is_none());
    assert!(GenerateOptions::multilingual().alignment.is_none());
    assert_eq!(
        AlignmentAnalyzerConfig::default().aligned_heads,
        vec![(12, 15), (13, 11), (9, 2)]
    );
    assert_eq!(LLAMA_ALIGNED_HEADS.len(), 3);
}

fn mtl() -> R<(T3, Tensor, Vec<u32>)> {
    let fx = Fixture::load(&fixtures_root().join("t3/mtl.json"))?;
    let hp: T3Config = fx.config("hp")?;
    let dev = Device::Cpu;
    // SAFETY: fixture files are not modified while the tests run.
    let vb =
        unsafe { VarBuilder::from_mmaped_safetensors(&[fx.safetensors_path()], DType::F32, &dev)? };
    let t3 = T3::new(&hp, vb)?;
    let spk = fx.input("speaker_emb")?;
    let spk = Tensor::from_vec(spk.data, spk.shape, &dev)?;
    let prompt: Vec<u32> = fx
        .input_i64("prompt_tokens")?
        .data
        .iter()
        .map(|&v| v as u32)
        .collect();
    let prompt = Tensor::new(prompt.as_slice(), &dev)?.unsqueeze(0)?;
    let cond = t3.prepare_conditioning(&T3Cond::new(spk).with_prompt(prompt))?;
    Ok((t3, cond, vec![255, 9, 2453, 700, 1200, 5, 41, 88, 0]))
}

fn opts(alignment: Option<AlignmentAnalyzerConfig>) -> GenerateOptions {
    let mut o = GenerateOptions::multilingual();
    o.sampling = Sampling::Greedy;
    o.max_new_tokens = 12;
    o.stop_on_eos = false;
    o.alignment = alignment;
    o
}

#[test]
fn analyzer_edits_only_the_stop_logit_and_not_the_model() -> R<()> {
    let (t3, cond, text) = mtl()?;
    let heads = AlignmentAnalyzerConfig::with_heads(vec![(1, 1), (1, 0), (0, 1)]);
    // with CFG (batch 2, shared conditioning prefix) and without (batch 1)
    for cfg_weight in [0.5f32, 0.0] {
        let (mut o_off, mut o_on) = (opts(None), opts(Some(heads.clone())));
        o_off.cfg_weight = cfg_weight;
        o_on.cfg_weight = cfg_weight;
        let mut off = t3.generate(&cond, &text, &o_off)?;
        let mut on = t3.generate(&cond, &text, &o_on)?;
        let mut suppressed = 0;
        for tok in [11u32, 12, 13, 14, 15, 16] {
            off.next().transpose()?;
            on.next().transpose()?;
            // same raw logits: the analyzer's forward is the same computation
            let d = (off.logits() - on.logits())?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?;
            assert_eq!(d, 0.0, "cfg {cfg_weight}: raw logits differ by {d}");
            let r = *on
                .alignment_result()
                .ok_or_else(|| anyhow::anyhow!("no result"))?;
            assert!(!r.eos_forced);
            let a = off.processed_logits().flatten_all()?.to_vec1::<f32>()?;
            let b = on.processed_logits().flatten_all()?.to_vec1::<f32>()?;
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                if i != EOS as usize {
                    assert_eq!(x, y, "token {i}");
                }
            }
            if r.eos_suppressed {
                suppressed += 1;
                assert!(
                    b[EOS as usize] < -1e4,
                    "suppressed EOS scored {}",
                    b[EOS as usize]
                );
            } else {
                assert_eq!(a[EOS as usize], b[EOS as usize]);
            }
            off.feed(tok)?;
            on.feed(tok)?;
        }
        assert!(
            suppressed > 0,
            "cfg {cfg_weight}: the text was never short of its end"
        );
        assert!(off.alignment_result().is_none());
    }
    Ok(())
}

#[test]
fn heads_outside_the_backbone_are_typed_errors() -> R<()> {
    let (t3, cond, text) = mtl()?;
    // the reference heads need 14 layers of 16 heads; the tiny model has 2 x 2
    let err = t3
        .generate(
            &cond,
            &text,
            &opts(Some(AlignmentAnalyzerConfig::default())),
        )
        .err()
        .ok_or_else(|| anyhow::anyhow!("accepted heads the model lacks"))?;
    assert!(matches!(err, T3Error::InvalidInput { .. }), "{err}");
    assert!(err.to_string().contains("(12, 15)"), "{err}");
    let empty = AlignmentAnalyzerConfig::with_heads(Vec::new());
    assert!(t3.generate(&cond, &text, &opts(Some(empty))).is_err());
    Ok(())
}
