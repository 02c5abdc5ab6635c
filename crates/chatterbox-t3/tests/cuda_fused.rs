//! The fused CUDA decode step (five kernels a layer) against candle's ops, at full size with
//! random weights: English's Llama (CFG batch 2) and Turbo's GPT-2 (batch 1). From the same
//! caches and step inputs, the fused bf16 step stays as close to the f32 step as candle's bf16
//! ops do (they round at the same places and differ in f32 summation order; GPT-2's GELU is
//! rounded once instead of per operation), with exact-length and bucketed (masked) attention.
//! A batched step (more rows than the fused GEMVs take, each row at its own position under its
//! own mask, as the continuous-batching decoder runs them) keeps candle's GEMMs around the
//! fused attention kernel, and is held to the same bound.
//! Needs a GPU and `--features cuda`:
//! `cargo test --release -p chatterbox-t3 --features cuda --test cuda_fused`.
#[path = "common/random_weights.rs"]
#[allow(dead_code)] // only its shapes are used here
mod random_weights;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_t3::{Backbone, KvCache, StepIndex, T3Config, T3};
use std::collections::HashMap;

type R<T> = anyhow::Result<T>;

/// `max |a - b| / max |b|` in f32.
fn rel(a: &Tensor, b: &Tensor) -> R<f32> {
    let (a, b) = (a.to_dtype(DType::F32)?, b.to_dtype(DType::F32)?);
    let scale = b.abs()?.max_all()?.to_scalar::<f32>()?;
    Ok((a - &b)?.abs()?.max_all()?.to_scalar::<f32>()? / scale)
}

fn bits_differ(a: &Tensor, b: &Tensor) -> R<bool> {
    let (a, b) = (a.to_dtype(DType::F32)?, b.to_dtype(DType::F32)?);
    Ok(a.ne(&b)?
        .to_dtype(DType::F32)?
        .sum_all()?
        .to_scalar::<f32>()?
        > 0.0)
}

/// The backbone of `hp` with the same random weights (`random_weights`' recipe, norm weights
/// near 1) in f32 and bf16.
fn backbone_pair(hp: &T3Config, dev: &Device) -> R<(Backbone, Backbone)> {
    let mut f32s = HashMap::new();
    for (k, s) in random_weights::tensor_shapes(hp) {
        let t = if s.len() == 1 && k.ends_with("weight") {
            // not exactly 1, so the norm's products round
            Tensor::randn(1f32, 0.1, s, dev)?
        } else if s.len() == 1 {
            // biases and LayerNorm shifts
            Tensor::randn(0f32, 0.02, s, dev)?
        } else {
            Tensor::randn(0f32, 0.02, s, dev)?
        };
        f32s.insert(k, t);
    }
    let bf16s: HashMap<String, Tensor> = f32s
        .iter()
        .map(|(k, t)| Ok((k.clone(), t.to_dtype(DType::BF16)?)))
        .collect::<R<_>>()?;
    let full = T3::new(hp, VarBuilder::from_tensors(f32s, DType::F32, dev))?;
    let half = T3::new(hp, VarBuilder::from_tensors(bf16s, DType::BF16, dev))?;
    Ok((full.backbone().clone(), half.backbone().clone()))
}

#[test]
#[cfg_attr(not(feature = "cuda"), ignore = "needs --features cuda and a GPU")]
fn fused_llama_step_tracks_candle_ops() -> R<()> {
    tracks_candle_ops(&T3Config::english_only(), 2, 0)
}

#[test]
#[cfg_attr(not(feature = "cuda"), ignore = "needs --features cuda and a GPU")]
fn fused_gpt2_step_tracks_candle_ops() -> R<()> {
    tracks_candle_ops(&T3Config::turbo(), 1, 0)
}

#[test]
#[cfg_attr(not(feature = "cuda"), ignore = "needs --features cuda and a GPU")]
fn batched_llama_step_tracks_candle_ops() -> R<()> {
    tracks_candle_ops(&T3Config::english_only(), 6, 3)
}

#[test]
#[cfg_attr(not(feature = "cuda"), ignore = "needs --features cuda and a GPU")]
fn batched_gpt2_step_tracks_candle_ops() -> R<()> {
    tracks_candle_ops(&T3Config::turbo(), 5, 3)
}

/// `batch` rows decoded from a shared prefix; with `spread > 0` row `r` runs `spread * r`
/// positions ahead (the positions it skips stay zero in every cache alike), each row with its
/// own position and mask.
fn tracks_candle_ops(hp: &T3Config, batch: usize, spread: usize) -> R<()> {
    let dev = chatterbox_cuda::open(0)?;
    let (exact, fused) = backbone_pair(hp, &dev)?;
    let mut plain = fused.clone();
    plain.set_fused_decode(false);
    let (prefix, capacity, steps) = (200usize, 512usize, 24usize);
    let (_, heads, head_dim) = fused.cache_shape();
    let c = heads * head_dim;
    let embeds = Tensor::randn(0f32, 0.5, (batch, prefix, c), &dev)?;
    let mut ce = exact.new_caches(batch, capacity, DType::F32, &dev)?;
    let mut cf = fused.new_caches(batch, capacity, DType::BF16, &dev)?;
    let mut cp = plain.new_caches(batch, capacity, DType::BF16, &dev)?;
    exact.prefill(&embeds, &mut ce, None)?;
    let embeds = embeds.to_dtype(DType::BF16)?;
    fused.prefill(&embeds, &mut cf, None)?;
    plain.prefill(&embeds, &mut cp, None)?;
    // worst relative distance to the f32 step: [fused, candle's ops] x [output, written k/v]
    let mut worst = [[0f32; 2]; 2];
    let mut differ = false;
    for i in 0..steps {
        let pos = prefix + i;
        let x = Tensor::randn(0f32, 0.5, (batch, 1, c), &dev)?;
        let rows: Vec<usize> = (0..batch).map(|r| pos + spread * r).collect();
        let last = rows[batch - 1];
        let pos_dev = if spread == 0 {
            Tensor::new(&[pos as u32], &dev)?
        } else {
            Tensor::new(rows.iter().map(|&p| p as u32).collect::<Vec<_>>(), &dev)?
        };
        // every other step attends over the whole capacity with the tail masked (a graph's
        // bucket), the others over exactly the written positions (masked per row when the
        // rows' positions differ)
        let bucket = i % 2 == 1;
        let attend = if bucket { capacity } else { last + 1 };
        let mask = if bucket || spread > 0 {
            let mrows = if spread == 0 { &rows[..1] } else { &rows[..] };
            let m: Vec<f32> = mrows
                .iter()
                .flat_map(|&p| {
                    (0..attend).map(move |j| if j <= p { 0.0 } else { f32::NEG_INFINITY })
                })
                .collect();
            Some(Tensor::from_vec(m, (mrows.len(), 1, 1, attend), &dev)?)
        } else {
            None
        };
        let step = StepIndex::new(last, &pos_dev, (batch, heads, head_dim), attend, mask)?;
        let ye = exact.decode(&x, &step, &mut ce)?;
        let x = x.to_dtype(DType::BF16)?;
        let yf = fused.decode(&x, &step, &mut cf)?;
        let yp = plain.decode(&x, &step, &mut cp)?;
        assert_eq!(yf.dims(), &[batch, 1, c]);
        differ |= bits_differ(&yf, &yp)?;
        // each row's newly written key and value
        let written = |k: &KvCache, keys: bool, r: usize| -> R<Tensor> {
            let t = if keys {
                k.keys_buffer()
            } else {
                k.values_buffer()
            };
            Ok(t.narrow(0, r, 1)?.narrow(2, rows[r], 1)?)
        };
        for (w, (y, caches)) in worst.iter_mut().zip([(&yf, &cf), (&yp, &cp)]) {
            w[0] = w[0].max(rel(y, &ye)?);
            for (a, e) in caches.iter().zip(&ce) {
                assert_eq!(a.len(), last + 1);
                for keys in [true, false] {
                    for r in 0..batch {
                        w[1] = w[1].max(rel(&written(a, keys, r)?, &written(e, keys, r)?)?);
                    }
                }
            }
        }
    }
    let [[fo, fkv], [po, pkv]] = worst;
    eprintln!(
        "{} x {batch} rows: distance to the f32 step over {steps} steps (max rel): fused \
         output {fo:.2e}, k/v {fkv:.2e}; candle's bf16 ops output {po:.2e}, k/v {pkv:.2e}",
        if hp.is_gpt() { "GPT-2" } else { "Llama" }
    );
    // bf16 rounding at the same places: as close to f32 as candle's ops, up to the spread
    // of which roundings flip
    assert!(
        fo < 1.5 * po,
        "fused output {fo:.2e} against candle's {po:.2e}"
    );
    assert!(
        fkv < 1.5 * pkv,
        "fused keys/values {fkv:.2e} against candle's {pkv:.2e}"
    );
    // ...and not identical to candle's ops: other kernels really computed the sums
    assert!(differ, "the fused path did not run");
    Ok(())
}
