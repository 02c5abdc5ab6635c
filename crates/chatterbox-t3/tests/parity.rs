//! chatterbox-t3 against fixtures recorded from the Python reference (`parity/recorders/t3.py`).
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_t3::sampling::{
    LogitsProcessor, LogitsProcessorList, MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper, TokenHistory, TopKLogitsWarper, TopPLogitsWarper,
};
use chatterbox_t3::{
    llama3_inv_freq, GenerateOptions, LlamaConfig, RotaryTables, Sampling, T3Cond, T3Config,
    TurboOptions, T3,
};
use chatterbox_testkit::{f32_array, Actual, Array, Error, Fixture, Result, Suite};
use std::collections::BTreeMap;

type Outputs = Vec<(String, Actual)>;

fn e(err: impl std::fmt::Display) -> Error {
    Error::case(err)
}

fn out(name: &str, a: impl Into<Actual>) -> (String, Actual) {
    (name.to_string(), a.into())
}

fn tokens(v: &[u32]) -> Array<i64> {
    Array::vector(v.iter().map(|&t| t as i64).collect())
}

fn tensor(a: &Array<f32>, dev: &Device) -> Result<Tensor> {
    Tensor::from_vec(a.data.clone(), a.shape.clone(), dev).map_err(e)
}

fn ids(a: &Array<i64>) -> Vec<u32> {
    a.data.iter().map(|&v| v as u32).collect()
}

fn wants(fx: &Fixture, name: &str) -> bool {
    fx.meta.tolerances.contains_key(name)
}

/// The tiny model from the fixture's own tensors, or a full-size one from `config.weights`.
fn load(fx: &Fixture, dev: &Device) -> Result<T3> {
    let hp: T3Config = fx.config("hp")?;
    let weights: Option<String> = fx.config_or("weights", None)?;
    let path = weights.map_or_else(|| fx.safetensors_path().to_path_buf(), Into::into);
    // SAFETY: fixture files are not modified while the test runs.
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[path], DType::F32, dev) }.map_err(e)?;
    T3::new(&hp, vb).map_err(e)
}

fn cond(fx: &Fixture, dev: &Device) -> Result<T3Cond> {
    let spk = tensor(&fx.input("speaker_emb")?, dev)?;
    let p = fx.input_i64("prompt_tokens")?;
    let prompt = Tensor::from_vec(ids(&p), p.shape.clone(), dev).map_err(e)?;
    Ok(T3Cond::new(spk)
        .with_prompt(prompt)
        .with_emotion_adv(fx.config_or("emotion_adv", 0.5)?))
}

/// `cond + w · (cond − uncond)` of a `[2, V]` logits tensor, as the reference computes it.
fn cfg_combine(logits: &Tensor, w: f32) -> Result<Tensor> {
    let c = logits.narrow(0, 0, 1).map_err(e)?;
    let u = logits.narrow(0, 1, 1).map_err(e)?;
    let w = Tensor::new(&[[w]], logits.device()).map_err(e)?;
    (&c + (&c - &u).and_then(|d| d.broadcast_mul(&w)).map_err(e)?).map_err(e)
}

fn stack(v: &[Tensor]) -> Result<Tensor> {
    Tensor::cat(v, 0).map_err(e)
}

/// English / multilingual (Llama backbone).
fn t3_llama(fx: &Fixture) -> Result<Outputs> {
    let dev = Device::Cpu;
    let t3 = load(fx, &dev)?;
    let hp = t3.config().clone();
    let mut outs = Vec::new();
    let cond_emb = t3.prepare_conditioning(&cond(fx, &dev)?).map_err(e)?;
    outs.push(out("cond_emb", f32_array(&cond_emb)?));
    let perceiver = t3.cond_enc().perceiver().ok_or_else(|| e("no perceiver"))?;
    let p = perceiver
        .forward(&tensor(&fx.input("perceiver_input")?, &dev)?)
        .map_err(e)?;
    outs.push(out("perceiver", f32_array(&p)?));

    let text = ids(&fx.input_i64("text_tokens")?);
    let start = hp.start_speech_token;
    let embeds = t3
        .prepare_input_embeds(&cond_emb, &text, &[start], true)
        .map_err(e)?;
    outs.push(out("input_embeds", f32_array(&embeds)?));
    let bos = t3
        .speech_step_embed(
            &Tensor::new(&[start], &dev).map_err(e)?,
            &Tensor::new(&[0u32], &dev).map_err(e)?,
        )
        .and_then(|b| Ok(b.broadcast_as((2, 1, hp.n_channels()))?))
        .map_err(e)?;
    let full = Tensor::cat(&[&embeds, &bos], 1).map_err(e)?;
    let hidden: Vec<Tensor> = t3.hidden_states(&full).map_err(e)?;
    let hidden = Tensor::stack(&hidden, 0).map_err(e)?;
    outs.push(out("hidden_states", f32_array(&hidden)?));

    let cfg_weight: f32 = fx.config("cfg_weight")?;
    let mut opts = GenerateOptions::default();
    opts.sampling = Sampling::Greedy;
    opts.temperature = fx.config("temperature")?;
    opts.min_p = fx.config("min_p")?;
    opts.top_p = fx.config("top_p")?;
    opts.repetition_penalty = fx.config("repetition_penalty")?;
    opts.cfg_weight = cfg_weight;
    opts.stop_on_eos = fx.config("stop_on_eos")?;

    // Teacher forcing: step i draws from the logits after feeding tf_tokens[..i].
    let tf = ids(&fx.input_i64("tf_tokens")?);
    let n_logits: usize = fx.config("tf_logit_steps")?;
    let n_proc: usize = fx.config("processed_steps")?;
    opts.max_new_tokens = tf.len() + 1;
    let mut stream = t3.generate(&cond_emb, &text, &opts).map_err(e)?;
    outs.push(out("prefill_logits", f32_array(stream.logits())?));
    let (mut logits, mut processed) = (Vec::new(), Vec::new());
    for &t in &tf {
        stream.next().ok_or_else(|| e("stream ended"))?.map_err(e)?;
        if logits.len() < n_logits {
            logits.push(cfg_combine(stream.logits(), cfg_weight)?);
        }
        if processed.len() < n_proc {
            processed.push(stream.processed_logits().copy().map_err(e)?);
        }
        stream.feed(t).map_err(e)?;
    }
    outs.push(out("tf_logits", f32_array(&stack(&logits)?)?));
    outs.push(out("tf_processed", f32_array(&stack(&processed)?)?));

    opts.max_new_tokens = fx.config("n_greedy")?;
    let greedy: Vec<u32> = t3.inference(&cond_emb, &text, &opts).map_err(e)?;
    outs.push(out("greedy_tokens", tokens(&greedy)));
    if wants(fx, "greedy_tokens_nocfg") {
        opts.cfg_weight = 0.0;
        let g = t3.inference(&cond_emb, &text, &opts).map_err(e)?;
        outs.push(out("greedy_tokens_nocfg", tokens(&g)));
    }
    Ok(outs)
}

/// Turbo / Nano (GPT-2 backbone).
fn t3_gpt2(fx: &Fixture) -> Result<Outputs> {
    let dev = Device::Cpu;
    let t3 = load(fx, &dev)?;
    let mut outs = Vec::new();
    let cond_emb = t3.prepare_conditioning(&cond(fx, &dev)?).map_err(e)?;
    outs.push(out("cond_emb", f32_array(&cond_emb)?));
    let text = ids(&fx.input_i64("text_tokens")?);
    let start = t3.config().start_speech_token;
    let embeds = t3
        .prepare_input_embeds(&cond_emb, &text, &[start], false)
        .map_err(e)?;
    outs.push(out("input_embeds", f32_array(&embeds)?));
    let hidden = Tensor::stack(&t3.hidden_states(&embeds).map_err(e)?, 0).map_err(e)?;
    outs.push(out("hidden_states", f32_array(&hidden)?));

    let mut opts = TurboOptions::default();
    opts.sampling = Sampling::Greedy;
    opts.temperature = fx.config("temperature")?;
    opts.top_k = fx.config("top_k")?;
    opts.top_p = fx.config("top_p")?;
    opts.repetition_penalty = fx.config("repetition_penalty")?;
    opts.stop_on_eos = fx.config("stop_on_eos")?;

    let tf = ids(&fx.input_i64("tf_tokens")?);
    let n_logits: usize = fx.config("tf_logit_steps")?;
    let n_proc: usize = fx.config("processed_steps")?;
    opts.max_gen_len = tf.len();
    let mut stream = t3.generate_turbo(&cond_emb, &text, &opts).map_err(e)?;
    let (mut logits, mut processed) = (Vec::new(), Vec::new());
    for &t in &tf {
        stream.next().ok_or_else(|| e("stream ended"))?.map_err(e)?;
        if logits.len() < n_logits {
            logits.push(stream.logits().copy().map_err(e)?);
        }
        if processed.len() < n_proc {
            processed.push(stream.processed_logits().copy().map_err(e)?);
        }
        stream.feed(t).map_err(e)?;
    }
    outs.push(out("tf_logits", f32_array(&stack(&logits)?)?));
    outs.push(out("tf_processed", f32_array(&stack(&processed)?)?));

    let n_greedy: usize = fx.config("n_greedy")?;
    opts.max_gen_len = n_greedy - 1;
    let greedy: Vec<u32> = t3
        .generate_turbo(&cond_emb, &text, &opts)
        .map_err(e)?
        .collect::<chatterbox_t3::Result<_>>()
        .map_err(e)?;
    outs.push(out("greedy_tokens", tokens(&greedy)));
    Ok(outs)
}

/// transformers' logits processors, alone and in each variant's chain, on recorded scores.
fn logits_processors(fx: &Fixture) -> Result<Outputs> {
    let dev = Device::Cpu;
    let scores = tensor(&fx.input("scores")?, &dev)?;
    let vocab = scores.dims()[1];
    let history = TokenHistory::from_ids(&ids(&fx.input_i64("ids")?), vocab, &dev).map_err(e)?;
    let chains: BTreeMap<String, Vec<(String, f64)>> = fx.config("chains")?;
    let mut outs = Vec::new();
    for (name, chain) in chains {
        let mut list = Vec::new();
        for (kind, p) in chain {
            let v = p as f32;
            list.push(match kind.as_str() {
                "repetition_penalty" => LogitsProcessor::RepetitionPenalty(
                    RepetitionPenaltyLogitsProcessor::new(v, &dev).map_err(e)?,
                ),
                "temperature" => {
                    LogitsProcessor::Temperature(TemperatureLogitsWarper::new(v, &dev).map_err(e)?)
                }
                "min_p" => LogitsProcessor::MinP(MinPLogitsWarper::new(v, &dev).map_err(e)?),
                "top_p" => LogitsProcessor::TopP(TopPLogitsWarper::new(v, vocab, &dev).map_err(e)?),
                "top_k" => LogitsProcessor::TopK(
                    TopKLogitsWarper::new(p as usize, vocab, &dev).map_err(e)?,
                ),
                other => return Err(e(format!("unknown processor {other}"))),
            });
        }
        let y = LogitsProcessorList(list)
            .process(&history, &scores)
            .map_err(e)?;
        outs.push(out(&name, f32_array(&y)?));
    }
    Ok(outs)
}

/// Llama_520M's llama3-scaled rotary tables (head_dim 64).
fn rope(fx: &Fixture) -> Result<Outputs> {
    let dev = Device::Cpu;
    let cfg = LlamaConfig::llama_520m();
    let pos = ids(&fx.input_i64("positions")?);
    let max = pos.iter().max().map_or(1, |&p| p as usize + 1);
    let tables = RotaryTables::new(&cfg, max, DType::F32, &dev).map_err(e)?;
    let (cos, sin) = tables
        .at(&Tensor::new(pos.as_slice(), &dev).map_err(e)?)
        .map_err(e)?;
    Ok(vec![
        out("inv_freq", Array::vector(llama3_inv_freq(&cfg))),
        out("cos", f32_array(&cos)?),
        out("sin", f32_array(&sin)?),
    ])
}

fn suite() -> Suite {
    Suite::new("t3")
        .case("rope", rope)
        .case("t3_llama", t3_llama)
        .case("t3_gpt2", t3_gpt2)
        .case("logits_processors", logits_processors)
}

#[test]
fn t3_parity() {
    suite().run_and_assert();
}

/// Full-size cases (random weights, 30 / 24 layers): record them with
/// `parity/.venv/bin/python parity/record.py --only t3 --full --out /tmp/full`, then run
/// `CHATTERBOX_FIXTURES=/tmp/full cargo test -p chatterbox-t3 --release --test parity -- --ignored`.
#[test]
#[ignore = "needs full-size fixtures recorded with --full (several GB)"]
fn t3_parity_full() {
    assert!(
        std::env::var_os("CHATTERBOX_FIXTURES").is_some(),
        "set CHATTERBOX_FIXTURES to the --full output directory"
    );
    suite().run_and_assert();
}
