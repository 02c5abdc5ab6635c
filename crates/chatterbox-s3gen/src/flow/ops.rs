//! The flow's element-wise activations (Mish, exact GELU), the attention core
//! (`softmax(q k^T + bias) v`), 1-D convolutions and the fused bias / residual adds, each with a
//! CPU fast path and a portable fallback.
//!
//! On the CPU, contiguous f32 tensors go through the vectorised, multi-threaded kernels of
//! [`super::kernels`] (custom candle ops, mostly in place); other devices and dtypes use
//! candle's own ops, computing the activations and the softmax in f32 whatever the dtype.
//!
//! The `*_inplace` functions overwrite their argument's storage: call them only on a tensor just
//! produced by the previous op (a GEMM or norm output no other tensor shares).

use super::kernels;
use candle_core::{
    backend::BackendStorage, CpuStorage, DType, InplaceOp1, InplaceOp2, Layout, Result, Tensor, D,
};

fn upcast(x: &Tensor) -> Result<Tensor> {
    match x.dtype() {
        DType::F16 | DType::BF16 => x.to_dtype(DType::F32),
        _ => Ok(x.clone()),
    }
}

fn fast_path(x: &Tensor) -> bool {
    x.device().is_cpu() && x.dtype() == DType::F32 && x.is_contiguous()
}

fn f32_slice_mut<'a>(s: &'a mut CpuStorage, l: &Layout, op: &str) -> Result<&'a mut [f32]> {
    let (start, end) = l
        .contiguous_offsets()
        .ok_or_else(|| candle_core::Error::Msg(format!("{op}: non-contiguous input")))?;
    match s {
        CpuStorage::F32(v) => Ok(&mut v[start..end]),
        other => candle_core::bail!("{op}: expected f32, got {:?}", other.dtype()),
    }
}

struct GeluErf;

impl InplaceOp1 for GeluErf {
    fn name(&self) -> &'static str {
        "flow-gelu-erf"
    }

    fn cpu_fwd(&self, s: &mut CpuStorage, l: &Layout) -> Result<()> {
        kernels::gelu_erf(f32_slice_mut(s, l, self.name())?);
        Ok(())
    }
}

struct Mish;

impl InplaceOp1 for Mish {
    fn name(&self) -> &'static str {
        "flow-mish"
    }

    fn cpu_fwd(&self, s: &mut CpuStorage, l: &Layout) -> Result<()> {
        kernels::mish(f32_slice_mut(s, l, self.name())?);
        Ok(())
    }
}

/// Softmax over the last dimension with an optional bias; `per` rows share one bias row.
struct Softmax {
    per: usize,
}

impl InplaceOp1 for Softmax {
    fn name(&self) -> &'static str {
        "flow-softmax"
    }

    fn cpu_fwd(&self, s: &mut CpuStorage, l: &Layout) -> Result<()> {
        let n = l.dims().last().copied().unwrap_or(0);
        kernels::softmax_rows(f32_slice_mut(s, l, "flow-softmax")?, n, None);
        Ok(())
    }
}

impl InplaceOp2 for Softmax {
    fn name(&self) -> &'static str {
        "flow-softmax-bias"
    }

    fn cpu_fwd(
        &self,
        dst: &mut CpuStorage,
        dst_l: &Layout,
        bias: &CpuStorage,
        bias_l: &Layout,
    ) -> Result<()> {
        let n = dst_l.dims().last().copied().unwrap_or(0);
        let (b0, b1) = bias_l
            .contiguous_offsets()
            .ok_or_else(|| candle_core::Error::Msg("flow-softmax: non-contiguous bias".into()))?;
        let bias = bias.as_slice::<f32>()?;
        kernels::softmax_rows(
            f32_slice_mut(dst, dst_l, "flow-softmax")?,
            n,
            Some((&bias[b0..b1], self.per)),
        );
        Ok(())
    }
}

/// `torch.nn.Mish` (`x * tanh(ln(1 + e^x))`), out of place.
pub(crate) fn mish(x: &Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if super::cuda_ops::applies(x) {
        return super::cuda_ops::mish_inplace(x.copy()?);
    }
    if fast_path(x) {
        let y = x.copy()?;
        y.inplace_op1(&Mish)?;
        return Ok(y);
    }
    let xf = upcast(x)?;
    let sp = (xf.exp()? + 1.0)?.log()?;
    (xf * sp.tanh()?)?.to_dtype(x.dtype())
}

/// [`mish`] overwriting `x` where possible.
pub(crate) fn mish_inplace(x: Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if super::cuda_ops::applies(&x) {
        return super::cuda_ops::mish_inplace(x);
    }
    if fast_path(&x) {
        x.inplace_op1(&Mish)?;
        return Ok(x);
    }
    mish(&x)
}

/// Exact GELU `x/2 (1 + erf(x / sqrt 2))` (`F.gelu(x, approximate="none")`), overwriting `x`
/// where possible.
pub(crate) fn gelu_erf_inplace(x: Tensor) -> Result<Tensor> {
    if fast_path(&x) {
        x.inplace_op1(&GeluErf)?;
        return Ok(x);
    }
    upcast(&x)?.gelu_erf()?.to_dtype(x.dtype())
}

/// `softmax(scores + bias, dim=-1)`, overwriting `scores` where possible. `scores` is
/// `(b, h, t, s)`, `bias` broadcasts as `(b, 1, 1, s)`.
pub(crate) fn softmax_with_bias_inplace(scores: Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    if fast_path(&scores) {
        match bias {
            None => {
                scores.inplace_op1(&Softmax { per: 1 })?;
                return Ok(scores);
            }
            Some(b) if b.dtype() == DType::F32 && b.is_contiguous() && b.device().is_cpu() => {
                let dims = scores.dims();
                let rows = scores.elem_count() / dims.last().copied().unwrap_or(1).max(1);
                let groups = b.elem_count() / dims.last().copied().unwrap_or(1).max(1);
                if groups > 0
                    && rows.is_multiple_of(groups)
                    && b.dim(candle_core::D::Minus1)? == dims[dims.len() - 1]
                {
                    scores.inplace_op2(b, &Softmax { per: rows / groups })?;
                    return Ok(scores);
                }
            }
            Some(_) => {}
        }
    }
    let s = upcast(&scores)?;
    let s = match bias {
        Some(b) => s.broadcast_add(&upcast(b)?)?,
        None => s,
    };
    candle_nn::ops::softmax_last_dim(&s)?.to_dtype(scores.dtype())
}

/// Self-attention on a fused `(b, t, 3 h d)` projection (see [`kernels::attention`]).
struct FusedAttention<'a> {
    heads: usize,
    dim_head: usize,
    bias: Option<&'a [f32]>,
}

impl candle_core::CustomOp1 for FusedAttention<'_> {
    fn name(&self) -> &'static str {
        "flow-attention"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, candle_core::Shape)> {
        let (b, t, w) = l.shape().dims3()?;
        let (h, d) = (self.heads, self.dim_head);
        if w != 3 * h * d {
            candle_core::bail!("flow-attention: width {w} is not 3 x {h} x {d}");
        }
        let (start, end) = l.contiguous_offsets().ok_or_else(|| {
            candle_core::Error::Msg("flow-attention: non-contiguous input".into())
        })?;
        let qkv = &s.as_slice::<f32>()?[start..end];
        let mut out = vec![0f32; b * t * h * d];
        kernels::attention(qkv, (b, t, h, d), self.bias, &mut out)
            .map_err(candle_core::Error::Msg)?;
        Ok((CpuStorage::F32(out), (b, t, h * d).into()))
    }
}

/// A key-padding bias `(b, 1, 1, t)`, with an f32 copy for the fused attention kernels: on the
/// host for the CPU's, `(b, t)` on the device for CUDA's.
#[derive(Debug, Clone)]
pub(crate) struct KeyBias {
    tensor: Tensor,
    host: Option<Vec<f32>>,
    device_f32: Option<Tensor>,
}

impl KeyBias {
    pub(crate) fn new(tensor: Tensor) -> Result<Self> {
        let (host, device_f32) = if tensor.device().is_cpu() {
            let host = tensor
                .to_dtype(DType::F32)?
                .flatten_all()?
                .to_vec1::<f32>()?;
            (Some(host), None)
        } else {
            let (b, _, _, t) = tensor.dims4()?;
            let dev = tensor.to_dtype(DType::F32)?.reshape((b, t))?.contiguous()?;
            (None, Some(dev))
        };
        Ok(Self {
            tensor,
            host,
            device_f32,
        })
    }

    pub(crate) fn tensor(&self) -> &Tensor {
        &self.tensor
    }

    /// A copy in buffers of its own (a captured graph's input, see `estimator_graphs.rs`).
    #[cfg(feature = "cuda")]
    pub(crate) fn copy(&self) -> Result<Self> {
        use super::estimator_calls::owned;
        Ok(Self {
            tensor: owned(&self.tensor)?,
            host: self.host.clone(),
            device_f32: self.device_f32.as_ref().map(owned).transpose()?,
        })
    }

    /// Writes this bias's values into `dst`'s device buffers (same shape); a bias with a host
    /// copy (the CPU's) cannot be rewritten in place.
    #[cfg(feature = "cuda")]
    pub(crate) fn write_into(&self, dst: &Self) -> Result<()> {
        if dst.host.is_some() {
            candle_core::bail!("a key bias on the host is not rewritten in place");
        }
        dst.tensor.slice_set(&self.tensor.contiguous()?, 0, 0)?;
        match (&self.device_f32, &dst.device_f32) {
            (Some(src), Some(d)) => d.slice_set(&src.contiguous()?, 0, 0),
            (None, None) => Ok(()),
            _ => candle_core::bail!("key biases of different devices"),
        }
    }

    /// The same rows, repeated (the guidance batch).
    pub(crate) fn doubled(&self) -> Result<Self> {
        Ok(Self {
            tensor: Tensor::cat(&[&self.tensor, &self.tensor], 0)?,
            host: self
                .host
                .as_ref()
                .map(|h| [h.as_slice(), h.as_slice()].concat()),
            device_f32: self
                .device_f32
                .as_ref()
                .map(|d| Tensor::cat(&[d, d], 0))
                .transpose()?,
        })
    }
}

/// `softmax(q k^T + bias) v` per head from the fused projection `qkv (b, t, 3 h d)` (q scaled),
/// returning `(b, t, h d)`.
pub(crate) fn self_attention(
    qkv: &Tensor,
    heads: usize,
    dim_head: usize,
    bias: Option<&KeyBias>,
) -> Result<Tensor> {
    let (b, t, _) = qkv.dims3()?;
    let host_bias = match bias {
        Some(kb) => kb.host.as_deref().map(Some),
        None => Some(None),
    };
    if let (true, Some(host_bias)) = (fast_path(qkv), host_bias) {
        return qkv.apply_op1_no_bwd(&FusedAttention {
            heads,
            dim_head,
            bias: host_bias,
        });
    }
    #[cfg(feature = "cuda")]
    if super::cuda_attention::applies(qkv, dim_head)? {
        let bias = bias.and_then(|kb| kb.device_f32.as_ref());
        return super::cuda_attention::attention(qkv, heads, bias);
    }
    let qkv = qkv
        .reshape((b, t, 3, heads, dim_head))?
        .permute((2, 0, 3, 1, 4))?
        .contiguous()?; // (3, b, h, t, d)
    let (q, k, v) = (qkv.get(0)?, qkv.get(1)?, qkv.get(2)?);
    let scores = super::nn::matmul(&q, &k.t()?)?;
    let attn = softmax_with_bias_inplace(scores, bias.map(KeyBias::tensor))?;
    let y = super::nn::matmul(&attn, &v)?;
    y.transpose(1, 2)?.reshape((b, t, heads * dim_head))
}

/// [`FusedAttention`] from separate `q`, `k`, `v`, each `(b, t, h d)`.
struct SplitAttention<'a> {
    heads: usize,
    dim_head: usize,
    bias: Option<&'a [f32]>,
}

impl candle_core::CustomOp3 for SplitAttention<'_> {
    fn name(&self) -> &'static str {
        "split-attention"
    }

    fn cpu_fwd(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
        vs: &CpuStorage,
        vl: &Layout,
    ) -> Result<(CpuStorage, candle_core::Shape)> {
        let (b, t, w) = ql.shape().dims3()?;
        let (h, d) = (self.heads, self.dim_head);
        if w != h * d || kl.shape() != ql.shape() || vl.shape() != ql.shape() {
            candle_core::bail!(
                "split-attention: q {:?}, k {:?}, v {:?} for {h} heads of {d}",
                ql.shape(),
                kl.shape(),
                vl.shape()
            );
        }
        fn get<'s>(s: &'s CpuStorage, l: &Layout, what: &str) -> Result<&'s [f32]> {
            let (a, z) = l.contiguous_offsets().ok_or_else(|| {
                candle_core::Error::Msg(format!("split-attention: non-contiguous {what}"))
            })?;
            Ok(&s.as_slice::<f32>()?[a..z])
        }
        let mut out = vec![0f32; b * t * h * d];
        kernels::attention_split(
            (get(qs, ql, "q")?, get(ks, kl, "k")?, get(vs, vl, "v")?),
            (b, t, h, d),
            self.bias,
            &mut out,
        )
        .map_err(candle_core::Error::Msg)?;
        Ok((CpuStorage::F32(out), (b, t, h * d).into()))
    }
}

/// `softmax(q k^T + bias) v` per head from separate `q` (scaled), `k` and `v`, each
/// `(b, t, h d)`, with a `(b, t)` key bias given as its host copy: the CPU kernel of
/// [`self_attention`]. `None` when the inputs are not contiguous f32 CPU tensors.
pub(crate) fn self_attention_split(
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    heads: usize,
    dim_head: usize,
    bias: Option<&[f32]>,
) -> Result<Option<Tensor>> {
    if !(fast_path(q) && fast_path(k) && fast_path(v)) {
        return Ok(None);
    }
    let op = SplitAttention {
        heads,
        dim_head,
        bias,
    };
    Ok(Some(q.apply_op3_no_bwd(k, v, &op)?))
}

/// See [`kernels::rel_shift_add`].
struct RelShiftAdd {
    t: usize,
    scale: f32,
}

impl InplaceOp2 for RelShiftAdd {
    fn name(&self) -> &'static str {
        "flow-rel-shift-add"
    }

    fn cpu_fwd(
        &self,
        ac: &mut CpuStorage,
        al: &Layout,
        bd: &CpuStorage,
        bl: &Layout,
    ) -> Result<()> {
        let (b0, b1) = bl.contiguous_offsets().ok_or_else(|| {
            candle_core::Error::Msg("flow-rel-shift-add: non-contiguous bd".into())
        })?;
        let bd = &bd.as_slice::<f32>()?[b0..b1];
        kernels::rel_shift_add(
            f32_slice_mut(ac, al, "flow-rel-shift-add")?,
            bd,
            self.t,
            self.scale,
        )
        .map_err(candle_core::Error::Msg)
    }
}

/// `softmax((ac + rel_shift(bd)) * scale + key_bias)` of the relative-position attention
/// ([`rel_shift_scores`], then [`softmax_with_bias_inplace`]); on CUDA the scores are one
/// kernel in place over `ac`.
pub(crate) fn rel_attention_probs(
    ac: Tensor,
    bd: &Tensor,
    scale: f64,
    key_bias: Option<&Tensor>,
) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    let ac = match super::cuda_ops::rel_scores(ac, bd, scale as f32, key_bias)? {
        Ok(scores) => return softmax_with_bias_inplace(scores, None),
        Err(ac) => ac,
    };
    let scores = rel_shift_scores(ac, bd, scale)?;
    softmax_with_bias_inplace(scores, key_bias)
}

/// `(ac + rel_shift(bd)) * scale` for the relative-position attention: `ac (b, h, t, t)` (the
/// content scores, overwritten on the CPU), `bd (b, h, t, 2t - 1)` (the position scores).
pub(crate) fn rel_shift_scores(ac: Tensor, bd: &Tensor, scale: f64) -> Result<Tensor> {
    let (b, h, t, _) = ac.dims4()?;
    if fast_path(&ac) && fast_path(bd) && bd.dims() == [b, h, t, (2 * t).saturating_sub(1)] {
        ac.inplace_op2(
            bd,
            &RelShiftAdd {
                t,
                scale: scale as f32,
            },
        )?;
        return Ok(ac);
    }
    let p = bd.dim(3)?;
    let shifted = if p != t {
        let padded = bd.pad_with_zeros(D::Minus1, 1, 0)?; // (b, h, t, p + 1)
        padded
            .reshape((b, h, p + 1, t))?
            .narrow(2, 1, p)?
            .contiguous()?
            .reshape((b, h, t, p))?
            .narrow(3, 0, p / 2 + 1)?
    } else {
        bd.clone()
    };
    (ac + shifted)?.affine(scale, 0.0)
}

struct BiasGelu;

impl InplaceOp2 for BiasGelu {
    fn name(&self) -> &'static str {
        "flow-bias-gelu"
    }

    fn cpu_fwd(&self, y: &mut CpuStorage, yl: &Layout, b: &CpuStorage, bl: &Layout) -> Result<()> {
        let n = yl.dims().last().copied().unwrap_or(0);
        let (b0, b1) = bl
            .contiguous_offsets()
            .ok_or_else(|| candle_core::Error::Msg("flow-bias-gelu: non-contiguous bias".into()))?;
        let bias = &b.as_slice::<f32>()?[b0..b1];
        if bias.len() != n {
            candle_core::bail!("flow-bias-gelu: bias of {} for rows of {n}", bias.len());
        }
        kernels::bias_gelu_erf(f32_slice_mut(y, yl, "flow-bias-gelu")?, bias);
        Ok(())
    }
}

/// `gelu_erf(y + bias)` over the last dimension, overwriting `y` where possible.
pub(crate) fn bias_gelu_inplace(y: Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if let Some(b) = bias.filter(|_| super::cuda_ops::applies(&y)) {
        return super::cuda_ops::bias_gelu_inplace(y, b);
    }
    match bias {
        Some(b) if fast_path(&y) && fast_path(b) => {
            y.inplace_op2(b, &BiasGelu)?;
            Ok(y)
        }
        Some(b) => gelu_erf_inplace(y.broadcast_add(b)?),
        None => gelu_erf_inplace(y),
    }
}

struct BiasResidual;

impl candle_core::InplaceOp3 for BiasResidual {
    fn name(&self) -> &'static str {
        "flow-bias-residual"
    }

    fn cpu_fwd(
        &self,
        y: &mut CpuStorage,
        yl: &Layout,
        b: &CpuStorage,
        bl: &Layout,
        r: &CpuStorage,
        rl: &Layout,
    ) -> Result<()> {
        let n = yl.dims().last().copied().unwrap_or(0);
        let off = |l: &Layout| {
            l.contiguous_offsets()
                .ok_or_else(|| candle_core::Error::Msg("flow-bias-residual: non-contiguous".into()))
        };
        let (b0, b1) = off(bl)?;
        let (r0, r1) = off(rl)?;
        let bias = &b.as_slice::<f32>()?[b0..b1];
        let res = &r.as_slice::<f32>()?[r0..r1];
        let y = f32_slice_mut(y, yl, "flow-bias-residual")?;
        if bias.len() != n || res.len() != y.len() {
            candle_core::bail!("flow-bias-residual: shapes differ");
        }
        kernels::add_bias_residual(y, bias, res);
        Ok(())
    }
}

/// `y + bias + residual` (bias over the last dimension), overwriting `y` where possible.
pub(crate) fn bias_residual_inplace(
    y: Tensor,
    bias: Option<&Tensor>,
    residual: &Tensor,
) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if let Some(b) = bias.filter(|_| super::cuda_ops::applies(&y)) {
        return super::cuda_ops::bias_residual_inplace(y, b, residual);
    }
    match bias {
        Some(b)
            if fast_path(&y)
                && fast_path(b)
                && fast_path(residual)
                && residual.dims() == y.dims() =>
        {
            y.inplace_op3(b, residual, &BiasResidual)?;
            Ok(y)
        }
        Some(b) => y.broadcast_add(b)? + residual,
        None => y + residual,
    }
}

/// A convolution on time-major data (see [`kernels::conv1d`]); the weight is `(k c_in, c_out)`
/// with tap-major rows.
struct Conv1dOp<'a> {
    weight: &'a [f32],
    bias: &'a [f32],
    c_out: usize,
    kernel: usize,
    pad_left: usize,
    pad_right: usize,
}

impl candle_core::CustomOp1 for Conv1dOp<'_> {
    fn name(&self) -> &'static str {
        "flow-conv1d"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, candle_core::Shape)> {
        let (batch, t_in, c_in) = l.shape().dims3()?;
        let (start, end) = l
            .contiguous_offsets()
            .ok_or_else(|| candle_core::Error::Msg("flow-conv1d: non-contiguous input".into()))?;
        let shape = kernels::ConvShape {
            batch,
            t_in,
            c_in,
            c_out: self.c_out,
            kernel: self.kernel,
            pad_left: self.pad_left,
            pad_right: self.pad_right,
        };
        let mut y = vec![0f32; batch * shape.t_out() * self.c_out];
        kernels::conv1d(
            &s.as_slice::<f32>()?[start..end],
            self.weight,
            self.bias,
            shape,
            &mut y,
        )
        .map_err(candle_core::Error::Msg)?;
        Ok((
            CpuStorage::F32(y),
            (batch, shape.t_out(), self.c_out).into(),
        ))
    }
}

/// The CPU convolution when `x`, `weight (k c_in, c_out)` and `bias` are contiguous f32 CPU
/// tensors; `None` otherwise (the caller falls back to im2col).
pub(crate) fn conv1d_cpu(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    kernel: usize,
    pad_left: usize,
    pad_right: usize,
) -> Result<Option<Tensor>> {
    if !(fast_path(x) && fast_path(weight) && fast_path(bias)) {
        return Ok(None);
    }
    let c_out = weight.dim(1)?;
    let (w_st, _) = weight.storage_and_layout();
    let (b_st, _) = bias.storage_and_layout();
    let (candle_core::Storage::Cpu(w_cpu), candle_core::Storage::Cpu(b_cpu)) = (&*w_st, &*b_st)
    else {
        return Ok(None);
    };
    let (w0, w1) = weight.layout().contiguous_offsets().unwrap_or((0, 0));
    let (b0, b1) = bias.layout().contiguous_offsets().unwrap_or((0, 0));
    let op = Conv1dOp {
        weight: &w_cpu.as_slice::<f32>()?[w0..w1],
        bias: &b_cpu.as_slice::<f32>()?[b0..b1],
        c_out,
        kernel,
        pad_left,
        pad_right,
    };
    Ok(Some(x.apply_op1_no_bwd(&op)?))
}
