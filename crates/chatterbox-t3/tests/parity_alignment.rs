//! The multilingual alignment-stream analyzer against fixtures recorded with the original
//! Python analyzer (`parity/legacy/alignment_stream_analyzer.py`, hooked into the tiny
//! multilingual T3 by `parity/recorders/t3.py`, component `t3_alignment`).
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_t3::{
    AlignmentAnalyzerConfig, GenerateOptions, Sampling, T3Cond, T3Config, TokenStream, T3,
};
use chatterbox_testkit::{Actual, Array, Error, Fixture, Result, Suite};
use std::collections::BTreeMap;

type Outputs = Vec<(String, Actual)>;

fn e(err: impl std::fmt::Display) -> Error {
    Error::case(err)
}

fn out(name: &str, a: impl Into<Actual>) -> (String, Actual) {
    (name.to_string(), a.into())
}

fn ids(a: &Array<i64>) -> Vec<u32> {
    a.data.iter().map(|&x| x as u32).collect()
}

/// The tiny multilingual model of the `t3/mtl` fixture (`config.weights_case`).
fn load(fx: &Fixture, dev: &Device) -> Result<T3> {
    let hp: T3Config = fx.config("hp")?;
    let case: String = fx.config("weights_case")?;
    let root = fx
        .safetensors_path()
        .parent()
        .and_then(|p| p.parent())
        .ok_or_else(|| e("fixture outside a component folder"))?;
    let path = root.join(format!("{case}.safetensors"));
    // SAFETY: fixture files are not modified while the test runs.
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[path], DType::F32, dev) }.map_err(e)?;
    T3::new(&hp, vb).map_err(e)
}

fn cond(fx: &Fixture, dev: &Device) -> Result<T3Cond> {
    let spk = fx.input("speaker_emb")?;
    let spk = Tensor::from_vec(spk.data.clone(), spk.shape.clone(), dev).map_err(e)?;
    let p = fx.input_i64("prompt_tokens")?;
    let prompt = Tensor::from_vec(ids(&p), p.shape.clone(), dev).map_err(e)?;
    Ok(T3Cond::new(spk)
        .with_prompt(prompt)
        .with_emotion_adv(fx.config("emotion_adv")?))
}

#[derive(serde::Deserialize)]
struct Run {
    rep: f32,
}

/// What one generation gives: tokens, per-step analyzer states and text-span attention rows.
struct Recorded {
    tokens: Vec<i64>,
    states: Vec<i64>,
    attn: Vec<f32>,
    frames: usize,
}

fn state_row(s: &TokenStream<'_>) -> Result<[i64; 5]> {
    let r = s
        .alignment_result()
        .ok_or_else(|| e("no analyzer result"))?;
    Ok([
        r.position as i64,
        i64::from(!r.false_start),
        i64::from(r.complete),
        i64::from(r.eos_suppressed),
        i64::from(r.eos_forced),
    ])
}

fn t3_alignment(fx: &Fixture) -> Result<Outputs> {
    let dev = Device::Cpu;
    let t3 = load(fx, &dev)?;
    let cond_emb = t3.prepare_conditioning(&cond(fx, &dev)?).map_err(e)?;
    let heads: Vec<(usize, usize)> = fx.config("aligned_heads")?;
    let runs: BTreeMap<String, Run> = fx.config("runs")?;
    let mut outs = Vec::new();
    for (name, run) in &runs {
        let suffix = if name == "main" { "" } else { name.as_str() };
        let text = ids(&fx.input_i64(&format!("text_tokens{suffix}"))?);
        let forced = match fx.input_i64(&format!("forced_tokens{suffix}")) {
            Ok(f) => ids(&f),
            Err(_) => Vec::new(),
        };
        let mut opts = GenerateOptions::multilingual();
        opts.sampling = Sampling::Greedy;
        opts.temperature = fx.config("temperature")?;
        opts.min_p = fx.config("min_p")?;
        opts.top_p = fx.config("top_p")?;
        opts.cfg_weight = fx.config("cfg_weight")?;
        opts.repetition_penalty = run.rep;
        opts.max_new_tokens = fx.config("max_new_tokens")?;
        opts.alignment = Some(AlignmentAnalyzerConfig::with_heads(heads.clone()));
        let rec = generate(&t3, &cond_emb, &text, &opts, &forced)?;
        let s = text.len();
        outs.push(out(
            &format!("tokens{suffix}"),
            Array::vector(rec.tokens.clone()),
        ));
        outs.push(out(
            &format!("state{suffix}"),
            Array::new(vec![rec.states.len() / 5, 5], rec.states),
        ));
        outs.push(out(
            &format!("attn_text{suffix}"),
            Array::new(vec![rec.frames, heads.len(), s], rec.attn),
        ));
    }
    // The prefill rows over all keys: the weights the first step's chunk is cut from.
    let text = ids(&fx.input_i64("text_tokens")?);
    let embeds = t3
        .prepare_input_embeds(&cond_emb, &text, &[t3.config().start_speech_token], true)
        .map_err(e)?;
    let dev = t3.device().clone();
    let start = t3.config().start_speech_token;
    let bos = t3
        .speech_step_embed(
            &Tensor::new(&[start], &dev).map_err(e)?,
            &Tensor::new(&[0u32], &dev).map_err(e)?,
        )
        .and_then(|b| Ok(b.broadcast_as((2, 1, t3.config().n_channels()))?))
        .map_err(e)?;
    let full = Tensor::cat(&[&embeds, &bos], 1).map_err(e)?;
    let chatterbox_t3::Backbone::Llama(m) = t3.backbone() else {
        return Err(e("not a Llama T3"));
    };
    let mut caches = t3
        .backbone()
        .new_caches(2, full.dim(1).map_err(e)?, DType::F32, &dev)
        .map_err(e)?;
    let j = cond_emb.dim(1).map_err(e)? + text.len();
    let (_, weights) = m
        .prefill_with_attention(&full, &mut caches, &heads, j)
        .map_err(e)?;
    let w = Tensor::stack(&weights, 0).map_err(e)?;
    let data = w
        .flatten_all()
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(e)?;
    outs.push(out("prefill_attn", Array::new(w.dims().to_vec(), data)));
    Ok(outs)
}

/// Greedy generation with the analyzer on; the first draws replaced by `forced` (teacher
/// forcing, as the recorder's multinomial does). Per step: the analyzer's state and the aligned
/// heads' text-span rows it read, as `[rows, heads, S]`.
fn generate(
    t3: &T3,
    cond_emb: &Tensor,
    text: &[u32],
    opts: &GenerateOptions,
    forced: &[u32],
) -> Result<Recorded> {
    let mut stream = t3.generate(cond_emb, text, opts).map_err(e)?;
    let mut rec = Recorded {
        tokens: Vec::new(),
        states: Vec::new(),
        attn: Vec::new(),
        frames: 0,
    };
    let mut i = 0;
    while let Some(t) = stream.next() {
        let mut t = t.map_err(e)?;
        rec.states.extend(state_row(&stream)?);
        let an = stream
            .alignment_analyzer()
            .ok_or_else(|| e("analyzer off"))?;
        let (chunk, heads, rows) = an.last_aligned_attns();
        let s = an.text_len();
        for r in 0..rows {
            for h in 0..heads {
                let at = (h * rows + r) * s;
                rec.attn.extend_from_slice(&chunk[at..at + s]);
            }
        }
        rec.frames += rows;
        if let Some(&f) = forced.get(i) {
            stream.feed(f).map_err(e)?;
            t = f;
        }
        rec.tokens.push(i64::from(t));
        i += 1;
    }
    Ok(rec)
}

#[test]
fn t3_alignment_parity() {
    Suite::new("t3_alignment")
        .case("t3_alignment", t3_alignment)
        .run_and_assert();
}
