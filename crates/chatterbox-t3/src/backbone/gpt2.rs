//! Port of transformers 5.2 `GPT2Model` (models/gpt2/modeling_gpt2.py) as Chatterbox Turbo uses
//! it: input embeddings plus learned absolute positions (`wpe`) in, `ln_f` hidden states out.
//!
//! `Conv1D` weights are stored `[in, out]`; they are transposed once at load. The token table
//! `wte` is never loaded (the reference deletes it after loading). Decode steps of one or two
//! bf16 rows on CUDA run each block as five kernels (`cuda_decode`); batched steps of more rows
//! run its attention kernel between candle's GEMMs.
use super::attention::{attend, attend_causal, causal_mask, query_scale, split_heads, StepIndex};
use super::kv_cache::KvCache;
use super::linear::{weight, Linear};
use super::projections::{NamedProjection, Preloaded};
use crate::config::GPT2Config;
use crate::Result;
use candle_core::{Tensor, D};
use candle_nn::{Module, VarBuilder};

/// `nn.LayerNorm`.
#[derive(Debug, Clone)]
struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f32,
}

impl LayerNorm {
    fn new(size: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            weight: weight(&vb, &[size], "weight")?,
            bias: weight(&vb, &[size], "bias")?,
            eps: eps as f32,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(candle_nn::ops::layer_norm(
            &x.contiguous()?,
            &self.weight,
            &self.bias,
            self.eps,
        )?)
    }
}

/// `GPT2Attention` (self-attention, `scale_attn_weights`).
#[derive(Debug, Clone)]
struct GPT2Attention {
    c_attn: Linear,
    c_proj: Linear,
    heads: usize,
    head_dim: usize,
    q_scale: Option<f64>,
}

impl GPT2Attention {
    fn new(cfg: &GPT2Config, vb: VarBuilder, pre: &Preloaded) -> Result<Self> {
        let c = cfg.n_embd;
        let head_dim = c / cfg.n_head;
        let (scale, exact) = query_scale(head_dim);
        let stored = pre.take(&vb, "c_attn", 3 * c, c)?;
        let c_attn = match stored {
            // stored with the query scale already folded in
            Some(l) => l,
            None => Linear::load_conv1d(vb.pp("c_attn"), c, 3 * c)?,
        };
        let c_attn = if exact && c_attn.quantized_weight().is_none() {
            // Fold the (power-of-two) query scale into the q rows of the weight and bias.
            let w = c_attn.weight()?;
            let w = Tensor::cat(
                &[
                    w.narrow(0, 0, c)?.affine(scale, 0.0)?,
                    w.narrow(0, c, 2 * c)?,
                ],
                0,
            )?;
            let b = match c_attn.bias() {
                Some(b) => Some(Tensor::cat(
                    &[
                        b.narrow(0, 0, c)?.affine(scale, 0.0)?,
                        b.narrow(0, c, 2 * c)?,
                    ],
                    0,
                )?),
                None => None,
            };
            Linear::new(w, b)?
        } else {
            c_attn
        };
        Ok(Self {
            c_attn,
            c_proj: match pre.take(&vb, "c_proj", c, c)? {
                Some(l) => l,
                None => Linear::load_conv1d(vb.pp("c_proj"), c, c)?,
            },
            heads: cfg.n_head,
            head_dim,
            q_scale: (!exact).then_some(scale),
        })
    }

    fn qkv(&self, x: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let c = self.heads * self.head_dim;
        let qkv = self.c_attn.forward(x)?;
        let q = split_heads(&qkv.narrow(D::Minus1, 0, c)?, self.heads, self.head_dim)?;
        let k = split_heads(&qkv.narrow(D::Minus1, c, c)?, self.heads, self.head_dim)?;
        let v = split_heads(&qkv.narrow(D::Minus1, 2 * c, c)?, self.heads, self.head_dim)?;
        Ok((q, k, v))
    }

    fn prefill(&self, x: &Tensor, mask: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let (q, k, v) = self.qkv(x)?;
        let fresh = cache.is_empty();
        cache.append(&k, &v)?;
        let (k, v) = if fresh {
            (k, v)
        } else {
            cache.written(q.dim(0)?)?
        };
        Ok(self
            .c_proj
            .forward(&attend_causal(&q, &k, &v, mask, self.q_scale)?)?)
    }

    fn decode(&self, x: &Tensor, step: &StepIndex, cache: &mut KvCache) -> Result<Tensor> {
        let (q, k, v) = self.qkv(x)?;
        cache.write_step(&k, &v, &step.kv_index, step.pos)?;
        let keys = cache.keys(step.attend)?;
        let values = cache.values(step.attend)?;
        Ok(self.c_proj.forward(&attend(
            &q,
            &keys,
            &values,
            step.mask.as_ref(),
            self.q_scale,
        )?)?)
    }
}

/// `GPT2MLP`: `c_proj(gelu_new(c_fc(x)))`.
#[derive(Debug, Clone)]
struct GPT2MLP {
    c_fc: Linear,
    c_proj: Linear,
}

impl GPT2MLP {
    fn new(cfg: &GPT2Config, vb: VarBuilder, pre: &Preloaded) -> Result<Self> {
        let c = cfg.n_embd;
        Ok(Self {
            c_fc: match pre.take(&vb, "c_fc", 4 * c, c)? {
                Some(l) => l,
                None => Linear::load_conv1d(vb.pp("c_fc"), c, 4 * c)?,
            },
            c_proj: match pre.take(&vb, "c_proj", c, 4 * c)? {
                Some(l) => l,
                None => Linear::load_conv1d(vb.pp("c_proj"), 4 * c, c)?,
            },
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = super::gelu::gelu_new(&self.c_fc.forward(x)?)?;
        Ok(self.c_proj.forward(&h)?)
    }
}

/// `GPT2Block`: pre-norm attention and MLP with residuals.
#[derive(Debug, Clone)]
struct GPT2Block {
    ln_1: LayerNorm,
    attn: GPT2Attention,
    ln_2: LayerNorm,
    mlp: GPT2MLP,
}

impl GPT2Block {
    fn new(cfg: &GPT2Config, vb: VarBuilder, pre: &Preloaded) -> Result<Self> {
        let (c, eps) = (cfg.n_embd, cfg.layer_norm_epsilon);
        Ok(Self {
            ln_1: LayerNorm::new(c, eps, vb.pp("ln_1"))?,
            attn: GPT2Attention::new(cfg, vb.pp("attn"), pre)?,
            ln_2: LayerNorm::new(c, eps, vb.pp("ln_2"))?,
            mlp: GPT2MLP::new(cfg, vb.pp("mlp"), pre)?,
        })
    }

    fn mlp_residual(&self, x: Tensor) -> Result<Tensor> {
        let h = self.mlp.forward(&self.ln_2.forward(&x)?)?;
        Ok((x + h)?)
    }
}

/// `GPT2Model` without `wte`: `tfmr.*` of a Turbo/Nano checkpoint.
#[derive(Debug, Clone)]
pub struct GPT2Model {
    wpe: Tensor,
    h: Vec<GPT2Block>,
    ln_f: LayerNorm,
    cfg: GPT2Config,
    fused_decode: bool,
}

impl GPT2Model {
    /// Loads `wpe`, `h.*` and `ln_f` under `vb`.
    pub fn new(cfg: &GPT2Config, vb: VarBuilder) -> Result<Self> {
        Self::build(cfg, vb, &Preloaded::default())
    }

    /// [`GPT2Model::new`] taking the projections `pre` holds instead of their tensors.
    pub(crate) fn build(cfg: &GPT2Config, vb: VarBuilder, pre: &Preloaded) -> Result<Self> {
        let mut h = Vec::with_capacity(cfg.n_layer);
        for i in 0..cfg.n_layer {
            h.push(GPT2Block::new(cfg, vb.pp("h").pp(i), pre)?);
        }
        Ok(Self {
            wpe: weight(&vb.pp("wpe"), &[cfg.n_positions, cfg.n_embd], "weight")?,
            h,
            ln_f: LayerNorm::new(cfg.n_embd, cfg.layer_norm_epsilon, vb.pp("ln_f"))?,
            cfg: cfg.clone(),
            fused_decode: true,
        })
    }

    /// Whether decode steps may run as the fused CUDA kernels (on by default; they apply to
    /// bf16 steps on CUDA: all five kernels a block for one or two rows, the attention kernel
    /// for more). Off, every step runs candle's ops.
    pub fn set_fused_decode(&mut self, on: bool) {
        self.fused_decode = on;
    }

    /// Every projection of every block (`c_attn`, `c_proj`, `c_fc`, the MLP's `c_proj`), for
    /// [`super::Backbone::quantize`].
    pub(crate) fn linears_mut(&mut self) -> Vec<&mut Linear> {
        let mut v = Vec::with_capacity(4 * self.h.len());
        for b in &mut self.h {
            v.push(&mut b.attn.c_attn);
            v.push(&mut b.attn.c_proj);
            v.push(&mut b.mlp.c_fc);
            v.push(&mut b.mlp.c_proj);
        }
        v
    }

    /// Every projection with its name and checkpoint tensors (under `prefix`, the backbone's),
    /// in the order of [`GPT2Model::linears_mut`].
    pub(crate) fn named_projections(&self, prefix: &str) -> Vec<NamedProjection<'_>> {
        let mut v = Vec::with_capacity(4 * self.h.len());
        for (i, b) in self.h.iter().enumerate() {
            let attn = format!("{prefix}.h.{i}.attn");
            let mlp = format!("{prefix}.h.{i}.mlp");
            for (scope, name, linear) in [
                (&attn, "c_attn", &b.attn.c_attn),
                (&attn, "c_proj", &b.attn.c_proj),
                (&mlp, "c_fc", &b.mlp.c_fc),
                (&mlp, "c_proj", &b.mlp.c_proj),
            ] {
                // a Conv1D's weight and bias (the stored layer carries its own bias)
                let (w, bias) = (format!("{name}.weight"), format!("{name}.bias"));
                v.push(NamedProjection::new(scope, name, &[&w, &bias], linear));
            }
        }
        v
    }

    /// The configuration.
    pub fn config(&self) -> &GPT2Config {
        &self.cfg
    }

    /// Positions `wpe` covers.
    pub fn max_positions(&self) -> usize {
        self.cfg.n_positions
    }

    /// Runs `[B, T, C]` embeddings at the next `T` positions of the caches; see
    /// [`super::llama::LlamaModel::prefill`] for `hidden`.
    pub fn prefill(
        &self,
        embeds: &Tensor,
        caches: &mut [KvCache],
        mut hidden: Option<&mut Vec<Tensor>>,
    ) -> Result<Tensor> {
        let (_, t, _) = embeds.dims3()?;
        let offset = caches.first().map_or(0, KvCache::len);
        if offset + t > self.cfg.n_positions {
            return Err(crate::T3Error::SequenceTooLong {
                what: "GPT-2 position table (wpe)",
                len: offset + t,
                max: self.cfg.n_positions,
            });
        }
        let mask = causal_mask(t, offset, embeds.device())?;
        let mut x = embeds.broadcast_add(&self.wpe.narrow(0, offset, t)?)?;
        for (block, cache) in self.h.iter().zip(caches.iter_mut()) {
            let a = block.attn.prefill(&block.ln_1.forward(&x)?, &mask, cache)?;
            x = block.mlp_residual((x + a)?)?;
            if let Some(h) = hidden.as_deref_mut() {
                h.push(x.clone());
            }
        }
        let out = self.ln_f.forward(&x)?;
        if let Some(h) = hidden {
            h.push(out.clone());
        }
        Ok(out)
    }

    /// One `[B, 1, C]` step at the device-side position of `step` (capturable).
    pub fn decode(
        &self,
        embed: &Tensor,
        step: &StepIndex,
        caches: &mut [KvCache],
    ) -> Result<Tensor> {
        let pos_emb = self.wpe.index_select(&step.pos_dev, 0)?;
        // `[n, 1, C]`: one row for every batch row, or one per row
        let pos_emb = pos_emb.unsqueeze(1)?;
        let mut x = embed.broadcast_add(&pos_emb)?;
        #[cfg(feature = "cuda")]
        if self.fused_decode {
            let c = &self.cfg;
            let widths = [c.n_embd, 4 * c.n_embd];
            let head_dim = c.n_embd / c.n_head;
            if super::cuda_decode::applies(&x, step, caches, &widths, head_dim) {
                return self.decode_fused(&x, step, caches);
            }
            if super::cuda_decode::attention_applies(&x, step, caches, head_dim) {
                return self.decode_batched(&x, step, caches);
            }
        }
        for (block, cache) in self.h.iter().zip(caches.iter_mut()) {
            let a = block.attn.decode(&block.ln_1.forward(&x)?, step, cache)?;
            x = block.mlp_residual((x + a)?)?;
        }
        self.ln_f.forward(&x)
    }

    /// The blocks of [`GPT2Model::decode`] for a batch (more rows than the fused GEMVs take):
    /// candle's LayerNorms and GEMMs around the fused attention kernel (see
    /// `LlamaModel::decode_batched`).
    #[cfg(feature = "cuda")]
    fn decode_batched(
        &self,
        x: &Tensor,
        step: &StepIndex,
        caches: &mut [KvCache],
    ) -> Result<Tensor> {
        let (b, t, c) = x.dims3()?;
        let mut x = x.reshape((b * t, c))?;
        for (block, cache) in self.h.iter().zip(caches.iter_mut()) {
            let attn = &block.attn;
            let qkv = attn.c_attn.forward(&block.ln_1.forward(&x)?)?;
            let a = super::cuda_decode::attention(
                &qkv,
                None,
                step,
                cache,
                attn.heads,
                attn.head_dim,
                attn.q_scale,
            )?;
            x = block.mlp_residual((x + attn.c_proj.forward(&a)?)?)?;
        }
        self.ln_f.forward(&x.reshape((b, t, c))?)
    }

    /// The blocks of [`GPT2Model::decode`] as five kernels each (see `cuda_decode`), from the
    /// position-embedded input `x`.
    #[cfg(feature = "cuda")]
    fn decode_fused(&self, x: &Tensor, step: &StepIndex, caches: &mut [KvCache]) -> Result<Tensor> {
        use super::cuda_decode::{attention, gemv, Epilogue, Norm};
        let (b, t, c) = x.dims3()?;
        let mut x = x.reshape((b * t, c))?;
        for (block, cache) in self.h.iter().zip(caches.iter_mut()) {
            let (attn, ln) = (&block.attn, &block.ln_1);
            let qkv = gemv(
                &x,
                Some(Norm::Layer(&ln.weight, &ln.bias, ln.eps)),
                &attn.c_attn.weight()?,
                attn.c_attn.bias(),
                Epilogue::Store,
            )?;
            let a = attention(
                &qkv,
                None,
                step,
                cache,
                attn.heads,
                attn.head_dim,
                attn.q_scale,
            )?;
            x = gemv(
                &a,
                None,
                &attn.c_proj.weight()?,
                attn.c_proj.bias(),
                Epilogue::Residual(&x),
            )?;
            let (mlp, ln) = (&block.mlp, &block.ln_2);
            let h = gemv(
                &x,
                Some(Norm::Layer(&ln.weight, &ln.bias, ln.eps)),
                &mlp.c_fc.weight()?,
                mlp.c_fc.bias(),
                Epilogue::Gelu,
            )?;
            x = gemv(
                &h,
                None,
                &mlp.c_proj.weight()?,
                mlp.c_proj.bias(),
                Epilogue::Residual(&x),
            )?;
        }
        self.ln_f.forward(&x.reshape((b, t, c))?)
    }
}
