//! `cargo xtask bench t3_quant --threads 2 --no-reference`: speed and quality of T3's weight
//! formats ([`WeightFormat`]: f32, q8, q4, bf16) on full-size seeded random weights, English
//! (CFG), Turbo and Nano, every format of a variant in the same run against the same f32 model.
//!
//! Per variant and format:
//! - **speed**: decode time per token over 200 tokens with the default sampling (seeded), after
//!   a prefill, as in `cargo xtask bench t3` (records `{variant}_{format}_decode_per_token`,
//!   `_prefill` and `_quantize`, the time the format's conversion takes at load);
//! - **teacher-forced distributions**: for each text, the f32 model's own greedy continuation
//!   (200 tokens) is fed to both models in one prefill, and at every speech position the
//!   next-token distributions (softmax of the raw logits; English's conditional row) are
//!   compared: mean KL(f32 ‖ format) in nats, the largest KL, and how often the most likely
//!   token is the same (top-1 agreement);
//! - **greedy agreement**: greedy decoding of 200 tokens (the variant's default processors,
//!   English with CFG) from each text, and the share of positions where the format's tokens
//!   equal f32's, and the first position where they part.
//!
//! The weights are N(0, 0.02) matrices from a fixed seed (`CHATTERBOX_T3_QUANT_SEED`, 0), unit
//! norm weights and zero biases: random weights have no outliers and flat next-token
//! distributions (mean entropy is reported), so they measure the arithmetic, not a trained
//! model's sensitivity. `CHATTERBOX_T3_QUANT_FORMATS=q8,q4,bf16` picks formats (default q8,q4),
//! `CHATTERBOX_T3_BENCH_ONLY=en|turbo|nano` a variant, `CHATTERBOX_T3_QUANT_TEXTS=N` the number of
//! texts (default 3), `CHATTERBOX_T3_BENCH_TOKENS=N` the tokens (default 200);
//! `CHATTERBOX_T3_QUANT_SPEED_ONLY=1` times the formats listed (f32 only if listed) without
//! the quality runs (for a profiler). The quality
//! figures go to stderr and, as JSON, to `CHATTERBOX_T3_QUANT_OUT` (default
//! `target/bench/t3_quant-quality.json`); the timings are bench records.
#[path = "../tests/common/random_weights.rs"]
#[allow(dead_code)]
mod random_weights;

use candle_core::{DType, Device, Tensor, D};
use candle_nn::VarBuilder;
use chatterbox_t3::{GenerateOptions, Sampling, T3Cond, T3Config, TurboOptions, WeightFormat, T3};
use chatterbox_testkit::{BenchRecord, Timing};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::HashMap;
use std::time::Instant;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// `n` N(0, std) values from `seed` (Box-Muller on 24-bit uniforms).
fn normals(n: usize, std: f32, seed: u64) -> Vec<f32> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut u = || ((rng.next_u32() >> 8) as f32 + 0.5) * (1.0 / 16_777_216.0);
    let mut out = Vec::with_capacity(n + 1);
    while out.len() < n {
        let (a, b) = (u(), u());
        let r = (-2.0 * a.ln()).sqrt() * std;
        let t = std::f32::consts::TAU * b;
        out.push(r * t.cos());
        out.push(r * t.sin());
    }
    out.truncate(n);
    out
}

/// A full-size T3 of `hp` with seeded random weights (the shapes and the N(0, 0.02) / ones /
/// zeros rule of `tests/common/random_weights.rs`, but reproducible).
fn seeded_t3(hp: &T3Config, seed: u64) -> anyhow::Result<T3> {
    let dev = Device::Cpu;
    let shapes = random_weights::tensor_shapes(hp);
    let tensors: Vec<(String, Tensor)> = shapes
        .into_par_iter()
        .enumerate()
        .map(|(i, (k, s))| {
            let t = if s.len() == 1 && k.ends_with("weight") {
                Tensor::ones(s, DType::F32, &dev)?
            } else if s.len() == 1 {
                Tensor::zeros(s, DType::F32, &dev)?
            } else {
                let n = s.iter().product();
                Tensor::from_vec(normals(n, 0.02, seed * 1_000_003 + i as u64), s, &dev)?
            };
            Ok((k, t))
        })
        .collect::<candle_core::Result<_>>()?;
    let m: HashMap<String, Tensor> = tensors.into_iter().collect();
    Ok(T3::new(hp, VarBuilder::from_tensors(m, DType::F32, &dev))?)
}

/// Teacher-forced comparison of one text: `(sum of KL, max KL, top-1 matches, sum of f32
/// entropy, positions)`.
fn compare_distributions(reference: &Tensor, logits: &Tensor) -> anyhow::Result<[f64; 5]> {
    let lp = candle_nn::ops::log_softmax(reference, D::Minus1)?;
    let lq = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    let p = lp.exp()?;
    let kl = (&p * (&lp - &lq)?)?.sum(D::Minus1)?.to_vec1::<f32>()?;
    let entropy = (&p * &lp)?.sum(D::Minus1)?.neg()?.to_vec1::<f32>()?;
    let a = reference.argmax(D::Minus1)?.to_vec1::<u32>()?;
    let b = logits.argmax(D::Minus1)?.to_vec1::<u32>()?;
    let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
    Ok([
        kl.iter().map(|&v| f64::from(v)).sum(),
        kl.iter().fold(0f64, |m, &v| m.max(f64::from(v))),
        same as f64,
        entropy.iter().map(|&v| f64::from(v)).sum(),
        kl.len() as f64,
    ])
}

/// The speech-position logits `[positions, vocab]` of `[cond | text | speech]` in one prefill
/// (the conditional row).
fn teacher_forced_logits(
    t3: &T3,
    cond_emb: &Tensor,
    text: &[u32],
    speech: &[u32],
) -> anyhow::Result<Tensor> {
    let embeds = t3.prepare_input_embeds(cond_emb, text, speech, false)?;
    let hidden = t3.hidden_states(&embeds)?;
    let last = hidden
        .last()
        .ok_or_else(|| anyhow::anyhow!("no hidden states"))?;
    let t = last.dim(1)?;
    let speech_hidden = last.narrow(1, t - speech.len(), speech.len())?;
    Ok(t3.speech_logits(&speech_hidden)?.squeeze(0)?)
}

/// One variant's model and inputs.
struct Variant {
    name: &'static str,
    cond_emb: Tensor,
    texts: Vec<Vec<u32>>,
    start_speech: u32,
}

impl Variant {
    /// `tokens` tokens from `text` (greedy or seeded), with the time of the prefill + first
    /// token and of each later token.
    fn generate(
        &self,
        t3: &T3,
        text: &[u32],
        sampling: Sampling,
        tokens: usize,
    ) -> anyhow::Result<(Vec<u32>, f64, f64)> {
        let t = Instant::now();
        let mut out = Vec::with_capacity(tokens);
        let mut prefill_ms = 0.0;
        let mut push = |stream: &mut dyn Iterator<Item = chatterbox_t3::Result<u32>>| {
            for i in 0..tokens {
                match stream.next() {
                    Some(tok) => out.push(tok?),
                    None => break,
                }
                if i == 0 {
                    prefill_ms = t.elapsed().as_secs_f64() * 1e3;
                }
            }
            anyhow::Ok(())
        };
        if t3.config().is_gpt() {
            let mut opts = TurboOptions::default();
            opts.max_gen_len = tokens;
            opts.stop_on_eos = false;
            opts.sampling = sampling;
            push(&mut t3.generate_turbo(&self.cond_emb, text, &opts)?)?;
        } else {
            let mut opts = GenerateOptions::default();
            opts.max_new_tokens = tokens;
            opts.stop_on_eos = false;
            opts.sampling = sampling;
            push(&mut t3.generate(&self.cond_emb, text, &opts)?)?;
        }
        let total = t.elapsed().as_secs_f64() * 1e3;
        let per_token = (total - prefill_ms) / (out.len().max(2) - 1) as f64;
        Ok((out, prefill_ms, per_token))
    }
}

/// Quality of one format against f32 on one variant.
#[derive(Serialize)]
struct Quality {
    variant: &'static str,
    format: String,
    /// Projection weights, MB.
    weights_mb: f64,
    decode_ms_per_token: f64,
    prefill_ms: f64,
    quantize_ms: f64,
    mean_kl_nats: f64,
    max_kl_nats: f64,
    top1_agreement: f64,
    mean_f32_entropy_nats: f64,
    teacher_forced_positions: usize,
    greedy_agreement: f64,
    /// Per text, the first position where the greedy tokens differ (`None`: never).
    greedy_first_difference: Vec<Option<usize>>,
}

fn main() -> anyhow::Result<()> {
    let threads = env_usize("CHATTERBOX_BENCH_THREADS", 1);
    let seed = env_usize("CHATTERBOX_T3_QUANT_SEED", 0) as u64;
    let tokens = env_usize("CHATTERBOX_T3_BENCH_TOKENS", 200);
    let n_texts = env_usize("CHATTERBOX_T3_QUANT_TEXTS", 3).max(1);
    let formats: Vec<WeightFormat> = match std::env::var("CHATTERBOX_T3_QUANT_FORMATS") {
        Ok(s) if !s.is_empty() => s
            .split(',')
            .map(|f| f.trim().parse())
            .collect::<Result<_, _>>()?,
        // bf16 only when asked: its prefill takes minutes on 2 cores (no fast CPU kernel)
        _ => vec![WeightFormat::Q8, WeightFormat::Q4],
    };
    let only = std::env::var("CHATTERBOX_T3_BENCH_ONLY").unwrap_or_default();
    let speed_only = std::env::var("CHATTERBOX_T3_QUANT_SPEED_ONLY").as_deref() == Ok("1");
    let dev = Device::Cpu;
    let mut records = Vec::new();
    let mut qualities = Vec::new();
    let mut record = |stage: String, shape: String, ms: f64| {
        records.push(BenchRecord {
            group: "t3_quant".into(),
            stage,
            implementation: "rust".into(),
            device: "cpu".into(),
            threads,
            timing: Timing::from_samples(&mut [ms]),
            shape,
        });
    };

    for (name, hp) in [
        ("en", T3Config::english_only()),
        ("turbo", T3Config::turbo()),
        ("nano", T3Config::nano()),
    ] {
        if !only.is_empty() && only != name {
            continue;
        }
        let t0 = Instant::now();
        let f32_model = seeded_t3(&hp, seed)?;
        eprintln!(
            "{name}: seeded weights in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        // the voice and texts of `cargo xtask bench t3`, plus texts of other lengths
        let speaker = Tensor::from_vec(normals(256, 0.06, seed + 7), (1, 256), &dev)?;
        let (prompt_len, prompt_mul, prompt_add) = if hp.is_gpt() {
            (375u32, 53, 5)
        } else {
            (150, 37, 11)
        };
        let prompt: Vec<u32> = (0..prompt_len)
            .map(|i| (i * prompt_mul + prompt_add) % 6561)
            .collect();
        let cond =
            T3Cond::new(speaker).with_prompt(Tensor::new(prompt.as_slice(), &dev)?.unsqueeze(0)?);
        let cond_emb = f32_model.prepare_conditioning(&cond)?;
        let texts: Vec<Vec<u32>> = (0..n_texts as u32)
            .map(|j| {
                let len = 60 - 20 * (j % 3);
                let ids: Vec<u32> = if hp.is_gpt() {
                    (0..len)
                        .map(|i| 1000 + (i * 13 + j * 101) % 40000)
                        .collect()
                } else {
                    (0..len).map(|i| 20 + (i * 7 + j * 31) % 600).collect()
                };
                if hp.is_gpt() {
                    ids
                } else {
                    f32_model.pad_text_tokens(&ids)
                }
            })
            .collect();
        let variant = Variant {
            name,
            cond_emb,
            texts,
            start_speech: hp.start_speech_token,
        };

        // f32: greedy continuations (the teacher tokens) and their distributions
        let mut reference = Vec::new();
        for text in variant.texts.iter().filter(|_| !speed_only) {
            let (greedy, _, _) = variant.generate(&f32_model, text, Sampling::Greedy, tokens)?;
            let mut speech = vec![variant.start_speech];
            speech.extend_from_slice(&greedy[..greedy.len().saturating_sub(1)]);
            let logits = teacher_forced_logits(&f32_model, &variant.cond_emb, text, &speech)?;
            reference.push((greedy, speech, logits));
        }

        let listed = formats.iter().copied();
        let all: Vec<WeightFormat> = if speed_only {
            listed.collect()
        } else {
            std::iter::once(WeightFormat::F32).chain(listed).collect()
        };
        for format in all {
            let t = Instant::now();
            let mut model = f32_model.clone();
            let report = model.quantize(format)?;
            let quantize_ms = t.elapsed().as_secs_f64() * 1e3;
            // speed: seeded sampling as `cargo xtask bench t3` (one warm-up run first)
            variant.generate(&model, &variant.texts[0], Sampling::Seeded(0), 8)?;
            let (_, prefill_ms, per_token) =
                variant.generate(&model, &variant.texts[0], Sampling::Seeded(0), tokens)?;
            if speed_only {
                eprintln!("{name:<6} {format:<5} decode {per_token:>6.2} ms/token  prefill {prefill_ms:>7.1} ms");
                record(
                    format!("{name}_{format}_decode_per_token"),
                    format!("{tokens} tokens"),
                    per_token,
                );
                continue;
            }
            let mut sums = [0f64; 5];
            let (mut same, mut total, mut first_diff) = (0usize, 0usize, Vec::new());
            for (text, (greedy_ref, speech, ref_logits)) in variant.texts.iter().zip(&reference) {
                let logits = teacher_forced_logits(&model, &variant.cond_emb, text, speech)?;
                let [kl, max_kl, top1, entropy, positions] =
                    compare_distributions(ref_logits, &logits)?;
                sums[0] += kl;
                sums[1] = sums[1].max(max_kl);
                sums[2] += top1;
                sums[3] += entropy;
                sums[4] += positions;
                let (greedy, _, _) = variant.generate(&model, text, Sampling::Greedy, tokens)?;
                same += greedy
                    .iter()
                    .zip(greedy_ref)
                    .filter(|(a, b)| a == b)
                    .count();
                total += greedy_ref.len();
                first_diff.push(greedy.iter().zip(greedy_ref).position(|(a, b)| a != b));
            }
            let q = Quality {
                variant: variant.name,
                format: format.to_string(),
                weights_mb: report.bytes_after as f64 / 1e6,
                decode_ms_per_token: per_token,
                prefill_ms,
                quantize_ms,
                mean_kl_nats: sums[0] / sums[4],
                max_kl_nats: sums[1],
                top1_agreement: sums[2] / sums[4],
                mean_f32_entropy_nats: sums[3] / sums[4],
                teacher_forced_positions: sums[4] as usize,
                greedy_agreement: same as f64 / total.max(1) as f64,
                greedy_first_difference: first_diff,
            };
            eprintln!(
                "{name:<6} {format:<5} {:>7.1} MB  decode {:>6.2} ms/token  prefill {:>7.1} ms  \
                 quantize {:>6.0} ms  KL {:.2e} (max {:.2e})  top-1 {:.4}  greedy {:.4} {:?}  \
                 (f32 entropy {:.2})",
                q.weights_mb,
                q.decode_ms_per_token,
                q.prefill_ms,
                q.quantize_ms,
                q.mean_kl_nats,
                q.max_kl_nats,
                q.top1_agreement,
                q.greedy_agreement,
                q.greedy_first_difference,
                q.mean_f32_entropy_nats,
            );
            let shape = format!("{tokens} tokens; {:.0} MB of projections", q.weights_mb);
            record(
                format!("{name}_{format}_decode_per_token"),
                shape.clone(),
                per_token,
            );
            record(
                format!("{name}_{format}_prefill"),
                shape.clone(),
                prefill_ms,
            );
            record(format!("{name}_{format}_quantize"), shape, quantize_ms);
            qualities.push(q);
        }
    }

    let out = std::env::var("CHATTERBOX_T3_QUANT_OUT")
        .unwrap_or_else(|_| "target/bench/t3_quant-quality.json".into());
    let out = std::path::Path::new(&out);
    let out = if out.is_relative() {
        // benches run in the crate's directory; the default is the workspace's target/
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(out)
    } else {
        out.to_path_buf()
    };
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, serde_json::to_string_pretty(&qualities)?)?;
    eprintln!("quality figures written to {}", out.display());
    chatterbox_testkit::emit_records(&records)?;
    Ok(())
}
