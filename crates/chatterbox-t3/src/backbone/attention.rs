//! Scaled dot-product attention over a preallocated KV cache, shared by both backbones.
use super::cpu_attention::causal_attention;
use crate::Result;
use candle_core::{DType, Device, Tensor};

/// The device-side indices of one decode step, shared by every layer. All of them are tensors
/// computed from the step's input buffer, so a captured graph replays them unchanged.
#[derive(Debug, Clone)]
pub struct StepIndex {
    /// Host copy of the sequence position (bookkeeping; the eager attention length).
    pub pos: usize,
    /// The sequence position(s), u32 `[1]` or `[batch]` on the device (RoPE rows, GPT-2 `wpe`
    /// rows).
    pub pos_dev: Tensor,
    /// The position broadcast to `[batch, heads, 1, head_dim]` (u32): where the KV write goes.
    pub kv_index: Tensor,
    /// Cache positions the attention reads: `pos + 1` when run eagerly, a fixed bucket size
    /// when replayed as a graph.
    pub attend: usize,
    /// Additive f32 mask `[1 or batch, 1, 1, attend]` (0 up to each row's position, `-inf`
    /// after) when `attend` is a bucket larger than `pos + 1`; `None` when every attended
    /// position is valid.
    pub mask: Option<Tensor>,
}

impl StepIndex {
    /// Builds the indices for device positions `pos_dev` (u32 `[1]`, one position for every
    /// row, or `[batch]`, one per row: a batch of requests at different positions), reading
    /// `attend` cache positions with an optional additive `mask` (`[1 or batch, 1, 1,
    /// attend]`). `pos` is the host copy of the (largest) position.
    pub fn new(
        pos: usize,
        pos_dev: &Tensor,
        shape: (usize, usize, usize),
        attend: usize,
        mask: Option<Tensor>,
    ) -> Result<Self> {
        let (batch, heads, head_dim) = shape;
        let n = pos_dev.elem_count();
        if n != 1 && n != batch {
            return Err(crate::error::invalid(
                "step positions",
                format!("{n} positions for {batch} rows"),
            ));
        }
        let kv_index = pos_dev
            .reshape((n, 1, 1, 1))?
            .broadcast_as((batch, heads, 1, head_dim))?
            .contiguous()?;
        Ok(Self {
            pos,
            pos_dev: pos_dev.clone(),
            kv_index,
            attend,
            mask,
        })
    }
}

/// `[B, T, H * D]` -> contiguous `[B, H, T, D]`.
pub(crate) fn split_heads(x: &Tensor, heads: usize, head_dim: usize) -> Result<Tensor> {
    let (b, t, _) = x.dims3()?;
    Ok(x.reshape((b, t, heads, head_dim))?
        .transpose(1, 2)?
        .contiguous()?)
}

/// `softmax(scale · q kᵀ + mask) v`, scores and softmax in f32. `scale: None` means it is
/// already folded into `q` (exact for power-of-two scales). Returns `[B, T, H * D]`.
pub(crate) fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: Option<f64>,
) -> Result<Tensor> {
    let dtype = q.dtype();
    if q.device().is_cpu() && dtype == DType::F32 && mask.is_none() && q.dim(2)? == 1 {
        return cpu_causal(q, k, v, scale);
    }
    let att = q.matmul(&k.t()?)?.to_dtype(DType::F32)?;
    let att = match scale {
        Some(s) => att.affine(s, 0.0)?,
        None => att,
    };
    let att = match mask {
        Some(m) => att.broadcast_add(m)?,
        None => att,
    };
    let att = candle_nn::ops::softmax_last_dim(&att)?.to_dtype(dtype)?;
    let out = att.matmul(v)?;
    let (b, h, t, d) = out.dims4()?;
    Ok(out.transpose(1, 2)?.reshape((b, t, h * d))?)
}

/// [`attend`] for the last `T` positions of the cache (`q [B, H, T, D]`) under the causal
/// `mask` of [`causal_mask`]`(T, L - T)`: the CPU kernel in f32 (it applies the same mask
/// without reading it), else [`attend`] with the mask.
pub(crate) fn attend_causal(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: &Tensor,
    scale: Option<f64>,
) -> Result<Tensor> {
    if q.device().is_cpu() && q.dtype() == DType::F32 {
        return cpu_causal(q, k, v, scale);
    }
    #[cfg(feature = "cuda")]
    if q.device().is_cuda() && q.dtype() == DType::BF16 {
        // the causal mask applied inside one softmax kernel (bf16 prefills)
        let offset = k.dim(2)? - q.dim(2)?;
        let att = q.matmul(&k.t()?)?;
        let scale = scale.unwrap_or(1.0) as f32;
        if let Some(p) = super::cuda_prefill::causal_softmax(&att, offset, scale)? {
            let out = p.matmul(v)?;
            let (b, h, t, d) = out.dims4()?;
            return Ok(out.transpose(1, 2)?.reshape((b, t, h * d))?);
        }
    }
    attend(q, k, v, Some(mask), scale)
}

fn cpu_causal(q: &Tensor, k: &Tensor, v: &Tensor, scale: Option<f64>) -> Result<Tensor> {
    let out = causal_attention(q, k, v, scale.unwrap_or(1.0) as f32)?;
    let (b, h, t, d) = out.dims4()?;
    Ok(out.transpose(1, 2)?.reshape((b, t, h * d))?)
}

/// The additive causal mask `[1, 1, T, offset + T]` of a prefill chunk at positions
/// `offset..offset + T` (eager).
pub(crate) fn causal_mask(t: usize, offset: usize, dev: &Device) -> Result<Tensor> {
    let n = offset + t;
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| {
            (0..n).map(move |j| {
                if j > offset + i {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Ok(Tensor::from_vec(mask, (1, 1, t, n), dev)?)
}

/// `1 / sqrt(head_dim)`, and whether multiplying weights by it is exact (a power of two), so
/// it can be folded into the query projection without changing any bit.
pub(crate) fn query_scale(head_dim: usize) -> (f64, bool) {
    let s = (head_dim as f64).sqrt();
    let exact = s.fract() == 0.0 && (s as usize).is_power_of_two();
    (1.0 / s, exact)
}

/// `softmax(scale · q kᵀ + mask)` of one head for batch row 0 (the conditional CFG row) and
/// query rows `rows_from..`: the attention weights transformers' eager attention returns, for
/// one (layer, head) only. `q` `[B, H, T, D]`, `k` `[B, H, S, D]`, `mask` `[1, 1, T, S]`;
/// returns f32 `[T - rows_from, S]`. Used by the alignment-stream analyzer.
pub(crate) fn head_attention_weights(
    q: &Tensor,
    k: &Tensor,
    head: usize,
    rows_from: usize,
    mask: Option<&Tensor>,
    scale: Option<f64>,
) -> Result<Tensor> {
    let rows = q.dim(2)?.saturating_sub(rows_from);
    let q = q
        .narrow(0, 0, 1)?
        .narrow(1, head, 1)?
        .narrow(2, rows_from, rows)?;
    let k = k.narrow(0, 0, 1)?.narrow(1, head, 1)?;
    let att = q.contiguous()?.matmul(&k.t()?)?.to_dtype(DType::F32)?;
    let att = match scale {
        Some(s) => att.affine(s, 0.0)?,
        None => att,
    };
    let att = match mask {
        Some(m) => att.broadcast_add(&m.narrow(2, rows_from, rows)?)?,
        None => att,
    };
    let s = att.dim(3)?;
    Ok(candle_nn::ops::softmax_last_dim(&att)?.reshape((rows, s))?)
}
