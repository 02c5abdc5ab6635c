//! Port of transformers 5.2 `LlamaModel` (models/llama/modeling_llama.py) as T3 uses it:
//! input embeddings in, final-RMSNorm hidden states out, a preallocated KV cache.
//!
//! Fused at load: q/k/v into one projection (with the exact power-of-two query scale folded in)
//! and gate/up into one; numerically the same products as the separate layers. Decode steps of
//! one or two bf16 rows on CUDA run each layer as five kernels (`cuda_decode`); batched steps of
//! more rows run its attention kernel between candle's GEMMs.
use super::attention::{
    attend, attend_causal, causal_mask, head_attention_weights, query_scale, split_heads, StepIndex,
};
use super::kv_cache::KvCache;
use super::linear::{weight, Linear};
use super::projections::{NamedProjection, Preloaded};
use super::rope::RotaryTables;
use crate::config::LlamaConfig;
use crate::Result;
use candle_core::{Tensor, D};
use candle_nn::{Module, VarBuilder};

/// `LlamaRMSNorm`.
#[derive(Debug, Clone)]
struct LlamaRMSNorm {
    weight: Tensor,
    eps: f32,
}

impl LlamaRMSNorm {
    fn new(size: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            weight: weight(&vb, &[size], "weight")?,
            eps: eps as f32,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(candle_nn::ops::rms_norm(
            &x.contiguous()?,
            &self.weight,
            self.eps,
        )?)
    }
}

/// `LlamaAttention` (no GQA: T3 has as many key/value heads as query heads).
#[derive(Debug, Clone)]
struct LlamaAttention {
    qkv: Linear,
    o_proj: Linear,
    heads: usize,
    head_dim: usize,
    /// Score scale applied at run time when it cannot be folded exactly into the weights.
    q_scale: Option<f64>,
}

impl LlamaAttention {
    fn new(cfg: &LlamaConfig, vb: VarBuilder, pre: &Preloaded) -> Result<Self> {
        let (h, d, c) = (cfg.num_attention_heads, cfg.head_dim, cfg.hidden_size);
        let (scale, exact) = query_scale(d);
        let qkv = match pre.take(&vb, "qkv_proj", 3 * h * d, c)? {
            Some(l) => l,
            None => {
                let q = weight(&vb.pp("q_proj"), &[h * d, c], "weight")?;
                let q = if exact { q.affine(scale, 0.0)? } else { q };
                let k = weight(&vb.pp("k_proj"), &[h * d, c], "weight")?;
                let v = weight(&vb.pp("v_proj"), &[h * d, c], "weight")?;
                Linear::new(Tensor::cat(&[q, k, v], 0)?, None)?
            }
        };
        let o_proj = match pre.take(&vb, "o_proj", c, h * d)? {
            Some(l) => l,
            None => Linear::load(vb.pp("o_proj"), h * d, c, false)?,
        };
        Ok(Self {
            qkv,
            o_proj,
            heads: h,
            head_dim: d,
            q_scale: (!exact).then_some(scale),
        })
    }

    /// Projects and rotates: `[B, H, T, D]` q, k, v.
    fn qkv(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let hd = self.heads * self.head_dim;
        let qkv = self.qkv.forward(x)?;
        let q = split_heads(&qkv.narrow(D::Minus1, 0, hd)?, self.heads, self.head_dim)?;
        let k = split_heads(&qkv.narrow(D::Minus1, hd, hd)?, self.heads, self.head_dim)?;
        let v = split_heads(
            &qkv.narrow(D::Minus1, 2 * hd, hd)?,
            self.heads,
            self.head_dim,
        )?;
        let q = candle_nn::rotary_emb::rope(&q, cos, sin)?;
        let k = candle_nn::rotary_emb::rope(&k, cos, sin)?;
        Ok((q, k, v))
    }

    /// With `spy`, also the attention weights of `spy.heads` (batch row 0, query rows
    /// `spy.rows_from..`), pushed onto `spy.out`.
    fn prefill(
        &self,
        x: &Tensor,
        rope: (&Tensor, &Tensor),
        mask: &Tensor,
        cache: &mut KvCache,
        spy: Option<HeadSpy<'_>>,
    ) -> Result<Tensor> {
        let (q, k, v) = self.qkv(x, rope.0, rope.1)?;
        let fresh = cache.is_empty();
        cache.append(&k, &v)?;
        let (k, v) = if fresh {
            (k, v)
        } else {
            cache.written(q.dim(0)?)?
        };
        if let Some(spy) = spy {
            for &h in spy.heads {
                let w = head_attention_weights(&q, &k, h, spy.rows_from, Some(mask), self.q_scale)?;
                spy.out.push(w);
            }
        }
        let y = attend_causal(&q, &k, &v, mask, self.q_scale)?;
        Ok(self.o_proj.forward(&y)?)
    }

    /// With `spy`, also the attention weights of `spy.heads` (batch row 0), pushed onto
    /// `spy.out`.
    fn decode(
        &self,
        x: &Tensor,
        rope: (&Tensor, &Tensor),
        step: &StepIndex,
        cache: &mut KvCache,
        spy: Option<HeadSpy<'_>>,
    ) -> Result<Tensor> {
        let (q, k, v) = self.qkv(x, rope.0, rope.1)?;
        cache.write_step(&k, &v, &step.kv_index, step.pos)?;
        let keys = cache.keys(step.attend)?;
        let values = cache.values(step.attend)?;
        if let Some(spy) = spy {
            for &h in spy.heads {
                let w = head_attention_weights(&q, &keys, h, 0, step.mask.as_ref(), self.q_scale)?;
                spy.out.push(w);
            }
        }
        let y = attend(&q, &keys, &values, step.mask.as_ref(), self.q_scale)?;
        Ok(self.o_proj.forward(&y)?)
    }
}

/// The `(layer, head)` pairs to return attention weights for, the first query row, and where
/// to put the weights (layer order).
type Spies<'a> = (&'a [(usize, usize)], usize, &'a mut Vec<Tensor>);

/// Which heads of one layer to return attention weights for, and where to put them.
struct HeadSpy<'a> {
    heads: &'a [usize],
    rows_from: usize,
    out: &'a mut Vec<Tensor>,
}

/// The spy of `layer`: its heads among `pairs` (`None` when it has none).
fn spy_for<'a>(
    layer: usize,
    pairs: &[(usize, usize)],
    heads: &'a mut Vec<usize>,
    rows_from: usize,
    out: &'a mut Vec<Tensor>,
) -> Option<HeadSpy<'a>> {
    heads.clear();
    heads.extend(pairs.iter().filter(|p| p.0 == layer).map(|p| p.1));
    (!heads.is_empty()).then_some(HeadSpy {
        heads,
        rows_from,
        out,
    })
}

/// Puts per-layer captures (layer order) back into the order of `pairs`.
fn in_request_order(pairs: &[(usize, usize)], captured: Vec<Tensor>) -> Vec<Tensor> {
    let mut order: Vec<usize> = (0..pairs.len()).collect();
    order.sort_by_key(|&i| pairs[i].0);
    let mut out: Vec<Option<Tensor>> = vec![None; pairs.len()];
    for (slot, t) in order.into_iter().zip(captured) {
        out[slot] = Some(t);
    }
    out.into_iter().flatten().collect()
}

/// `LlamaMLP`: `down(silu(gate(x)) * up(x))`, gate and up fused.
#[derive(Debug, Clone)]
struct LlamaMLP {
    gate_up: Linear,
    down_proj: Linear,
    intermediate: usize,
}

impl LlamaMLP {
    fn new(cfg: &LlamaConfig, vb: VarBuilder, pre: &Preloaded) -> Result<Self> {
        let (c, i) = (cfg.hidden_size, cfg.intermediate_size);
        let gate_up = match pre.take(&vb, "gate_up_proj", 2 * i, c)? {
            Some(l) => l,
            None => {
                let gate = weight(&vb.pp("gate_proj"), &[i, c], "weight")?;
                let up = weight(&vb.pp("up_proj"), &[i, c], "weight")?;
                Linear::new(Tensor::cat(&[gate, up], 0)?, None)?
            }
        };
        let down_proj = match pre.take(&vb, "down_proj", c, i)? {
            Some(l) => l,
            None => Linear::load(vb.pp("down_proj"), i, c, false)?,
        };
        Ok(Self {
            gate_up,
            down_proj,
            intermediate: i,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gu = self.gate_up.forward(x)?;
        Ok(self
            .down_proj
            .forward(&super::silu_mul::silu_mul(&gu, self.intermediate)?)?)
    }
}

/// `LlamaDecoderLayer`: pre-norm attention and MLP with residuals.
#[derive(Debug, Clone)]
struct LlamaDecoderLayer {
    input_layernorm: LlamaRMSNorm,
    self_attn: LlamaAttention,
    post_attention_layernorm: LlamaRMSNorm,
    mlp: LlamaMLP,
}

impl LlamaDecoderLayer {
    fn new(cfg: &LlamaConfig, vb: VarBuilder, pre: &Preloaded) -> Result<Self> {
        Ok(Self {
            input_layernorm: LlamaRMSNorm::new(
                cfg.hidden_size,
                cfg.rms_norm_eps,
                vb.pp("input_layernorm"),
            )?,
            self_attn: LlamaAttention::new(cfg, vb.pp("self_attn"), pre)?,
            post_attention_layernorm: LlamaRMSNorm::new(
                cfg.hidden_size,
                cfg.rms_norm_eps,
                vb.pp("post_attention_layernorm"),
            )?,
            mlp: LlamaMLP::new(cfg, vb.pp("mlp"), pre)?,
        })
    }

    fn mlp_residual(&self, x: Tensor) -> Result<Tensor> {
        let h = self
            .mlp
            .forward(&self.post_attention_layernorm.forward(&x)?)?;
        Ok((x + h)?)
    }
}

/// `LlamaModel` without its (unused) token embedding: `tfmr.*` of a T3 checkpoint.
#[derive(Debug, Clone)]
pub struct LlamaModel {
    layers: Vec<LlamaDecoderLayer>,
    norm: LlamaRMSNorm,
    rope: RotaryTables,
    cfg: LlamaConfig,
    fused_decode: bool,
}

impl LlamaModel {
    /// Loads `layers.*` and `norm` under `vb`, with RoPE tables for `positions` positions.
    pub fn new(cfg: &LlamaConfig, positions: usize, vb: VarBuilder) -> Result<Self> {
        Self::build(cfg, positions, vb, &Preloaded::default())
    }

    /// [`LlamaModel::new`] taking the projections `pre` holds instead of their tensors.
    pub(crate) fn build(
        cfg: &LlamaConfig,
        positions: usize,
        vb: VarBuilder,
        pre: &Preloaded,
    ) -> Result<Self> {
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            layers.push(LlamaDecoderLayer::new(cfg, vb.pp("layers").pp(i), pre)?);
        }
        Ok(Self {
            layers,
            norm: LlamaRMSNorm::new(cfg.hidden_size, cfg.rms_norm_eps, vb.pp("norm"))?,
            rope: RotaryTables::new(cfg, positions, vb.dtype(), vb.device())?,
            cfg: cfg.clone(),
            fused_decode: true,
        })
    }

    /// Whether decode steps may run as the fused CUDA kernels (on by default; they apply to
    /// bf16 steps on CUDA: all five kernels a layer for one or two rows, the attention kernel
    /// for more). Off, every step runs candle's ops; the two differ only in f32 summation
    /// order.
    pub fn set_fused_decode(&mut self, on: bool) {
        self.fused_decode = on;
    }

    /// Every projection of every layer (fused q/k/v, output, fused gate/up, down), for
    /// [`super::Backbone::quantize`].
    pub(crate) fn linears_mut(&mut self) -> Vec<&mut Linear> {
        let mut v = Vec::with_capacity(4 * self.layers.len());
        for l in &mut self.layers {
            v.push(&mut l.self_attn.qkv);
            v.push(&mut l.self_attn.o_proj);
            v.push(&mut l.mlp.gate_up);
            v.push(&mut l.mlp.down_proj);
        }
        v
    }

    /// Every projection with its name and checkpoint tensors (under `prefix`, the backbone's),
    /// in the order of [`LlamaModel::linears_mut`].
    pub(crate) fn named_projections(&self, prefix: &str) -> Vec<NamedProjection<'_>> {
        let mut v = Vec::with_capacity(4 * self.layers.len());
        for (i, l) in self.layers.iter().enumerate() {
            let attn = format!("{prefix}.layers.{i}.self_attn");
            let mlp = format!("{prefix}.layers.{i}.mlp");
            let qkv = ["q_proj.weight", "k_proj.weight", "v_proj.weight"];
            v.push(NamedProjection::new(
                &attn,
                "qkv_proj",
                &qkv,
                &l.self_attn.qkv,
            ));
            let o = ["o_proj.weight"];
            v.push(NamedProjection::new(
                &attn,
                "o_proj",
                &o,
                &l.self_attn.o_proj,
            ));
            let gate_up = ["gate_proj.weight", "up_proj.weight"];
            v.push(NamedProjection::new(
                &mlp,
                "gate_up_proj",
                &gate_up,
                &l.mlp.gate_up,
            ));
            let down = ["down_proj.weight"];
            v.push(NamedProjection::new(
                &mlp,
                "down_proj",
                &down,
                &l.mlp.down_proj,
            ));
        }
        v
    }

    /// The configuration.
    pub fn config(&self) -> &LlamaConfig {
        &self.cfg
    }

    /// Positions the RoPE tables cover.
    pub fn max_positions(&self) -> usize {
        self.rope.positions()
    }

    /// Runs `[B, T, C]` embeddings at the next `T` positions of the caches (from 0 when they
    /// are empty; `B` may be 1 for a prefix shared by every cache row); returns the final-norm
    /// hidden states. With `hidden`, each layer's output and then the final-norm output are
    /// pushed (transformers' `output_hidden_states` minus the input embeddings).
    pub fn prefill(
        &self,
        embeds: &Tensor,
        caches: &mut [KvCache],
        hidden: Option<&mut Vec<Tensor>>,
    ) -> Result<Tensor> {
        self.prefill_inner(embeds, caches, hidden, None)
    }

    /// [`LlamaModel::prefill`] that also returns the attention weights of the given
    /// `(layer, head)` pairs for batch row 0 and query rows `rows_from..`: one f32
    /// `[T - rows_from, offset + T]` tensor per pair, in request order. Only those heads'
    /// `softmax(q kᵀ / √d)` rows are computed (what the alignment-stream analyzer's hooks read).
    pub fn prefill_with_attention(
        &self,
        embeds: &Tensor,
        caches: &mut [KvCache],
        pairs: &[(usize, usize)],
        rows_from: usize,
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let mut captured = Vec::with_capacity(pairs.len());
        let out = self.prefill_inner(
            embeds,
            caches,
            None,
            Some((pairs, rows_from, &mut captured)),
        )?;
        Ok((out, in_request_order(pairs, captured)))
    }

    fn prefill_inner(
        &self,
        embeds: &Tensor,
        caches: &mut [KvCache],
        mut hidden: Option<&mut Vec<Tensor>>,
        mut spy: Option<Spies<'_>>,
    ) -> Result<Tensor> {
        let mut heads = Vec::new();
        let (_, t, _) = embeds.dims3()?;
        let offset = caches.first().map_or(0, KvCache::len);
        if offset + t > self.rope.positions() {
            return Err(crate::T3Error::SequenceTooLong {
                what: "RoPE table",
                len: offset + t,
                max: self.rope.positions(),
            });
        }
        let (cos, sin) = self.rope.range(offset, t)?;
        let mask = causal_mask(t, offset, embeds.device())?;
        let mut x = embeds.clone();
        for (i, (layer, cache)) in self.layers.iter().zip(caches.iter_mut()).enumerate() {
            let spy = match spy.as_mut() {
                Some((pairs, rows_from, out)) => spy_for(i, pairs, &mut heads, *rows_from, out),
                None => None,
            };
            let a = layer.self_attn.prefill(
                &layer.input_layernorm.forward(&x)?,
                (&cos, &sin),
                &mask,
                cache,
                spy,
            )?;
            x = layer.mlp_residual((x + a)?)?;
            if let Some(h) = hidden.as_deref_mut() {
                h.push(x.clone());
            }
        }
        let out = self.norm.forward(&x)?;
        if let Some(h) = hidden {
            h.push(out.clone());
        }
        Ok(out)
    }

    /// One `[B, 1, C]` step at the device-side position of `step`; returns the final-norm
    /// hidden state. Static shapes and no host offsets: capturable.
    pub fn decode(
        &self,
        embed: &Tensor,
        step: &StepIndex,
        caches: &mut [KvCache],
    ) -> Result<Tensor> {
        self.decode_inner(embed, step, caches, None)
    }

    /// [`LlamaModel::decode`] that also returns the attention weights of the given
    /// `(layer, head)` pairs for batch row 0: one f32 `[1, step.attend]` tensor per pair, in
    /// request order (only those heads' softmax rows are computed).
    pub fn decode_with_attention(
        &self,
        embed: &Tensor,
        step: &StepIndex,
        caches: &mut [KvCache],
        pairs: &[(usize, usize)],
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let mut captured = Vec::with_capacity(pairs.len());
        let out = self.decode_inner(embed, step, caches, Some((pairs, 0, &mut captured)))?;
        Ok((out, in_request_order(pairs, captured)))
    }

    fn decode_inner(
        &self,
        embed: &Tensor,
        step: &StepIndex,
        caches: &mut [KvCache],
        mut spy: Option<Spies<'_>>,
    ) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if spy.is_none() && self.fused_decode {
            let c = &self.cfg;
            let widths = [c.hidden_size, c.intermediate_size];
            if super::cuda_decode::applies(embed, step, caches, &widths, c.head_dim) {
                return self.decode_fused(embed, step, caches);
            }
            if super::cuda_decode::attention_applies(embed, step, caches, c.head_dim) {
                return self.decode_batched(embed, step, caches);
            }
        }
        let (cos, sin) = self.rope.at(&step.pos_dev)?;
        let (cos, sin) = match step.pos_dev.elem_count() {
            1 => (cos, sin),
            // one position per row: `[B, 1, D / 2]` tables (candle's batched RoPE)
            n => {
                let half = cos.dim(1)?;
                (cos.reshape((n, 1, half))?, sin.reshape((n, 1, half))?)
            }
        };
        let mut x = embed.clone();
        let mut heads = Vec::new();
        for (i, (layer, cache)) in self.layers.iter().zip(caches.iter_mut()).enumerate() {
            let spy = match spy.as_mut() {
                Some((pairs, rows_from, out)) => spy_for(i, pairs, &mut heads, *rows_from, out),
                None => None,
            };
            let a = layer.self_attn.decode(
                &layer.input_layernorm.forward(&x)?,
                (&cos, &sin),
                step,
                cache,
                spy,
            )?;
            x = layer.mlp_residual((x + a)?)?;
        }
        self.norm.forward(&x)
    }

    /// [`LlamaModel::decode`] of a batch (more rows than the fused GEMVs take): candle's norms
    /// and GEMMs around the fused attention kernel, which reads only each row's valid cache
    /// positions (RoPE, the cache write and the attention in one launch a layer).
    #[cfg(feature = "cuda")]
    fn decode_batched(
        &self,
        embed: &Tensor,
        step: &StepIndex,
        caches: &mut [KvCache],
    ) -> Result<Tensor> {
        let (b, t, c) = embed.dims3()?;
        let mut x = embed.reshape((b * t, c))?;
        for (layer, cache) in self.layers.iter().zip(caches.iter_mut()) {
            let attn = &layer.self_attn;
            let qkv = attn.qkv.forward(&layer.input_layernorm.forward(&x)?)?;
            let a = super::cuda_decode::attention(
                &qkv,
                Some((&self.rope.cos, &self.rope.sin)),
                step,
                cache,
                attn.heads,
                attn.head_dim,
                attn.q_scale,
            )?;
            x = layer.mlp_residual((x + attn.o_proj.forward(&a)?)?)?;
        }
        self.norm.forward(&x.reshape((b, t, c))?)
    }

    /// [`LlamaModel::decode`] as five kernels a layer (see `cuda_decode`).
    #[cfg(feature = "cuda")]
    fn decode_fused(
        &self,
        embed: &Tensor,
        step: &StepIndex,
        caches: &mut [KvCache],
    ) -> Result<Tensor> {
        use super::cuda_decode::{attention, gemv, Epilogue, Norm};
        let (b, t, c) = embed.dims3()?;
        let mut x = embed.reshape((b * t, c))?;
        for (layer, cache) in self.layers.iter().zip(caches.iter_mut()) {
            let attn = &layer.self_attn;
            let norm = &layer.input_layernorm;
            let qkv = gemv(
                &x,
                Some(Norm::Rms(&norm.weight, norm.eps)),
                &attn.qkv.weight()?,
                None,
                Epilogue::Store,
            )?;
            let rope = (&self.rope.cos, &self.rope.sin);
            let a = attention(
                &qkv,
                Some(rope),
                step,
                cache,
                attn.heads,
                attn.head_dim,
                attn.q_scale,
            )?;
            x = gemv(
                &a,
                None,
                &attn.o_proj.weight()?,
                None,
                Epilogue::Residual(&x),
            )?;
            let norm = &layer.post_attention_layernorm;
            let h = gemv(
                &x,
                Some(Norm::Rms(&norm.weight, norm.eps)),
                &layer.mlp.gate_up.weight()?,
                None,
                Epilogue::SiluMul,
            )?;
            x = gemv(
                &h,
                None,
                &layer.mlp.down_proj.weight()?,
                None,
                Epilogue::Residual(&x),
            )?;
        }
        self.norm.forward(&x.reshape((b, t, c))?)
    }
}
