//! The decode step of T3's transformer layers (transformers' `LlamaDecoderLayer`,
//! models/llama/modeling_llama.py, and `GPT2Block`, models/gpt2/modeling_gpt2.py) as five CUDA
//! kernels a layer, in bf16 for one or two rows (batch 1, or 2 with CFG), compiled once per
//! process with NVRTC.
//!
//! ncu on the H100 (English, CFG, eager) counted 698 kernels per decode step: per layer the
//! RMSNorms, the projections, head splits, RoPE, the KV scatter, candle's attention (two
//! cuBLAS products, casts, softmax), SiLU, products and residual adds, each a launch of a few
//! microseconds; replayed as a graph the step took 2.4 ms for ~1 GB of weights (~0.35 ms at
//! HBM bandwidth). Here a layer is:
//! 1. `rms_norm(x) · Wqkvᵀ` (the norm computed per block into shared memory; the GEMVs are
//!    persistent, each warp loading its next weight rows while it sums the current ones),
//! 2. RoPE of q and k, the KV-cache write at the step's device-side position, and attention
//!    over the cache (one block per row and head; masked positions are skipped),
//! 3. `x + attn · Woᵀ`,
//! 4. `silu(g) * u` of `[g, u] = rms_norm(x) · Wguᵀ` (each warp computes a gate and its up),
//! 5. `x + h · Wdownᵀ`.
//!
//! GPT-2 (Turbo) is the same with LayerNorms, biases, no RoPE and `gelu_new(x · Wfcᵀ + b)` in
//! step 4 (computed in f32 and rounded once, where candle's bf16 GELU rounds each operation).
//!
//! A batched step of more rows (the continuous-batching decoder: one or two rows a request,
//! each at its own position under its own mask) keeps candle's norms and GEMMs, where the
//! weights are read once for all rows anyway, and runs only kernel 2: it reads each row's
//! valid cache positions only, where candle's attention reads the whole length bucket and
//! writes its scores out several times (H100, 64 requests: English CFG 5.5 -> 4.0 ms a step).
//!
//! Every other value is rounded to bf16 where candle's separate ops round it (norm output,
//! projection outputs, RoPE products and sums, scores, probabilities, SiLU, residual sums), so
//! the fused step differs from the unfused one only in f32 summation order.
use super::attention::StepIndex;
use super::kv_cache::KvCache;
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, CustomOp1, CustomOp2, DType, Layout, Shape, Storage, Tensor};
use chatterbox_cuda::{contiguous_view, Ptx};

/// Most rows a fused step takes.
pub(crate) const MAX_ROWS: usize = 2;
/// Warps (tasks) per GEMV block. This and the limits below mirror the kernels' `WARPS`, `SU`
/// and key-register count in [`SOURCE`]: change them together.
const WARPS: usize = 8;
/// Threads per attention block.
const ATTN_THREADS: usize = 256;
/// Dynamic shared memory a kernel may use without opting in.
const SMEM_LIMIT: usize = 48 * 1024;
/// Most values of `x` (rows x width) a GEMV block stages: 4 loads of 8 per thread (`SU`).
const STAGE_VALUES: usize = 4 * 8 * 32 * WARPS;
/// Largest head size of the attention kernel (16 loads of 8 per key).
const MAX_HEAD_DIM: usize = 128;

const SOURCE: &str = include_str!("cuda_decode.cu");

/// The PTX of [`SOURCE`], compiled on first use.
pub(crate) static PTX: Ptx = Ptx::new(SOURCE, None, "T3 fused decode kernels");

/// Whether the fused kernels compile and load on `device`; the first failure is logged once
/// (the step then runs candle's ops).
pub(crate) fn available(device: &candle_core::Device) -> bool {
    PTX.available(device, |e| {
        tracing::warn!("{e}: T3 decodes with unfused ops")
    })
}

/// The norm a [`gemv`] applies to `x` first.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Norm<'a> {
    /// `RMSNorm(weight, eps)` (Llama).
    Rms(&'a Tensor, f32),
    /// `LayerNorm(weight, bias, eps)` (GPT-2).
    Layer(&'a Tensor, &'a Tensor, f32),
}

/// How a [`gemv`] finishes each output.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Epilogue<'a> {
    /// `y = x Wᵀ`.
    Store,
    /// `y = residual + x Wᵀ` (`residual` `[rows, n]`).
    Residual(&'a Tensor),
    /// `y = silu(g) * u` for `[g, u] = x Wᵀ` (the weight's first half gives `g`).
    SiluMul,
    /// `y = gelu_new(x Wᵀ)` (GPT-2's tanh approximation, computed in f32).
    Gelu,
}

impl Epilogue<'_> {
    fn mode(&self) -> i32 {
        match self {
            Self::Store => 0,
            Self::Residual(_) => 1,
            Self::SiluMul => 2,
            Self::Gelu => 3,
        }
    }
}

fn bf16_view<'a>(
    s: &'a Storage,
    l: &Layout,
    len: usize,
    what: &str,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, half::bf16>> {
    let Storage::Cuda(c) = s else {
        candle_core::bail!("t3 fused decode: the {what} is not on the CUDA device")
    };
    let v = contiguous_view::<half::bf16>(c, l, what)?;
    if v.len() != len {
        candle_core::bail!(
            "t3 fused decode: the {what} holds {} values, not {len}",
            v.len()
        )
    }
    Ok(v)
}

struct Gemv<'a> {
    norm: Option<Norm<'a>>,
    bias: Option<&'a Tensor>,
    epilogue: Epilogue<'a>,
}

impl CustomOp2 for Gemv<'_> {
    chatterbox_cuda::cuda_only_op!(2, "t3-decode-gemv");

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        xl: &Layout,
        w: &CudaStorage,
        wl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let (rows, k) = xl.shape().dims2()?;
        let (n, k2) = wl.shape().dims2()?;
        let pair = matches!(self.epilogue, Epilogue::SiluMul);
        let outs = if pair { n / 2 } else { n };
        if k != k2
            || rows == 0
            || rows > MAX_ROWS
            || k % 8 != 0
            || (pair && n % 2 != 0)
            || rows * k > STAGE_VALUES
            || n > u32::MAX as usize / 2
        {
            candle_core::bail!("t3-decode-gemv: ({rows}, {k}) x ({n}, {k2})ᵀ")
        }
        // x, the weight and the norm's parameters are read as 16-byte vectors
        let aligned = |l: &Layout| l.start_offset().is_multiple_of(8);
        if !aligned(xl) || !aligned(wl) {
            candle_core::bail!("t3-decode-gemv: x or the weight is not 16-byte aligned")
        }
        let xv = contiguous_view::<half::bf16>(x, xl, "t3-decode-gemv: x")?;
        let wv = contiguous_view::<half::bf16>(w, wl, "t3-decode-gemv: weight")?;
        let (g, nb, eps) = match self.norm {
            Some(Norm::Rms(g, eps)) => (Some(g), None, eps),
            Some(Norm::Layer(g, b, eps)) => (Some(g), Some(b), eps),
            None => (None, None, 0.0f32),
        };
        if [g, nb].iter().flatten().any(|t| !aligned(t.layout())) {
            candle_core::bail!("t3-decode-gemv: the norm's parameters are not 16-byte aligned")
        }
        let guards = [g, nb, self.bias].map(|t| t.map(Tensor::storage_and_layout));
        let views =
            [(0, k, "norm weight"), (1, k, "norm bias"), (2, n, "bias")].map(|(i, len, what)| {
                match &guards[i] {
                    Some((s, l)) => bf16_view(s, l, len, what).map(Some),
                    None => Ok(None),
                }
            });
        let [gv, nbv, bv] = views;
        let (gv, nbv, bv) = (gv?, nbv?, bv?);
        let res = match self.epilogue {
            Epilogue::Residual(r) => Some(r.storage_and_layout()),
            _ => None,
        };
        let rv = match &res {
            Some((s, l)) => Some(bf16_view(s, l, rows * n, "residual")?),
            None => None,
        };
        let dev: &CudaDevice = &x.device;
        let func = PTX.function(dev, "t3_decode_gemv")?;
        // SAFETY: every element is written by the kernel below before it is read.
        let out = unsafe { dev.alloc::<half::bf16>(rows * outs)? };
        let null = 0u64;
        let (rows32, n32, k32, mode) = (rows as u32, n as u32, k as u32, self.epilogue.mode());
        let mut builder = func.builder();
        builder.arg(&xv);
        for v in [&gv, &nbv] {
            match v {
                Some(v) => builder.arg(v),
                None => builder.arg(&null),
            };
        }
        builder.arg(&eps);
        builder.arg(&wv);
        match &bv {
            Some(v) => builder.arg(v),
            None => builder.arg(&null),
        };
        match &rv {
            Some(r) => builder.arg(r),
            None => builder.arg(&null),
        };
        builder.arg(&out);
        builder.arg(&rows32);
        builder.arg(&n32);
        builder.arg(&k32);
        builder.arg(&mode);
        // as many blocks as run at once (two a multiprocessor), each warp taking an equal
        // share of the outputs
        let slots = WARPS * 2 * chatterbox_cuda::multiprocessors(dev)?.max(1);
        let per_warp = outs.div_ceil(slots);
        let cfg = LaunchConfig {
            grid_dim: (outs.div_ceil(WARPS * per_warp) as u32, 1, 1),
            block_dim: (32 * WARPS as u32, 1, 1),
            shared_mem_bytes: (rows * k * 2) as u32,
        };
        // SAFETY: the kernel reads `rows * k` values of x, `n * k` of the weight, `k` of the
        // norm weight and bias, `n` of the bias and `rows * n` of the residual when given (lengths checked above, rows
        // 16-byte aligned as `applies` checks), and writes `rows * outs`.
        unsafe { builder.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev.clone()),
            Shape::from((rows, outs)),
        ))
    }
}

/// `x (rows, k) · w (n, k)ᵀ (+ bias (n))` in bf16, `x` first normalised by `norm` when given,
/// finished by `epilogue`. `rows <= MAX_ROWS`; see [`applies`].
pub(crate) fn gemv(
    x: &Tensor,
    norm: Option<Norm<'_>>,
    w: &Tensor,
    bias: Option<&Tensor>,
    epilogue: Epilogue<'_>,
) -> candle_core::Result<Tensor> {
    x.apply_op2_no_bwd(
        w,
        &Gemv {
            norm,
            bias,
            epilogue,
        },
    )
}

struct Attention<'a> {
    rope: Option<(&'a Tensor, &'a Tensor)>,
    step: &'a StepIndex,
    keys: &'a Tensor,
    values: &'a Tensor,
    heads: usize,
    head_dim: usize,
    scale: Option<f64>,
}

impl CustomOp1 for Attention<'_> {
    chatterbox_cuda::cuda_only_op!(1, "t3-decode-attention");

    fn cuda_fwd(&self, qkv: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (rows, width) = l.shape().dims2()?;
        let (h, d) = (self.heads, self.head_dim);
        let (cb, ch, cap, cd) = self.keys.dims4()?;
        let attend = self.step.attend;
        let pos_n = self.step.pos_dev.elem_count();
        if width != 3 * h * d
            || (cb, ch, cd) != (rows, h, d)
            || self.values.dims() != self.keys.dims()
            || attend == 0
            || attend > cap
            || (pos_n != 1 && pos_n != rows)
            || !d.is_multiple_of(8)
            || d > MAX_HEAD_DIM
            || attention_smem(d, attend) > SMEM_LIMIT
        {
            candle_core::bail!(
                "t3-decode-attention: qkv {:?}, cache {:?}, attend {attend}, {pos_n} positions",
                l.shape(),
                self.keys.shape()
            )
        }
        let qv = contiguous_view::<half::bf16>(qkv, l, "t3-decode-attention: qkv")?;
        let kg = self.keys.storage_and_layout();
        let vg = self.values.storage_and_layout();
        let kv = bf16_view(&kg.0, kg.1, rows * h * cap * d, "key cache")?;
        let vv = bf16_view(&vg.0, vg.1, rows * h * cap * d, "value cache")?;
        let pg = self.step.pos_dev.storage_and_layout();
        let Storage::Cuda(ps) = &*pg.0 else {
            candle_core::bail!("t3-decode-attention: positions are not on the CUDA device")
        };
        let posv = contiguous_view::<u32>(ps, pg.1, "t3-decode-attention: positions")?;
        let rope = self
            .rope
            .map(|(c, s)| (c.storage_and_layout(), s.storage_and_layout()));
        let ropev = match &rope {
            Some((c, s)) => {
                let len = c.1.shape().elem_count();
                Some((
                    bf16_view(&c.0, c.1, len, "RoPE cos table")?,
                    bf16_view(&s.0, s.1, len, "RoPE sin table")?,
                ))
            }
            None => None,
        };
        let mask = self.step.mask.as_ref().map(Tensor::storage_and_layout);
        let (maskv, mask_rows) = match &mask {
            Some((s, ml)) => {
                let Storage::Cuda(ms) = &**s else {
                    candle_core::bail!("t3-decode-attention: the mask is not on the CUDA device")
                };
                let v = contiguous_view::<f32>(ms, ml, "t3-decode-attention: mask")?;
                let mrows = v.len() / attend;
                if v.len() % attend != 0 || (mrows != 1 && mrows != rows) {
                    candle_core::bail!("t3-decode-attention: mask {:?}", ml.shape())
                }
                (Some(v), mrows as u32)
            }
            None => (None, 0),
        };
        let dev: &CudaDevice = &qkv.device;
        let func = PTX.function(dev, "t3_decode_attention")?;
        // SAFETY: every element is written by the kernel below before it is read.
        let out = unsafe { dev.alloc::<half::bf16>(rows * h * d)? };
        let null = 0u64;
        let mut builder = func.builder();
        builder.arg(&qv);
        match &ropev {
            Some((c, s)) => {
                builder.arg(c);
                builder.arg(s)
            }
            None => {
                builder.arg(&null);
                builder.arg(&null)
            }
        };
        let pos_n32 = pos_n as u32;
        builder.arg(&posv);
        builder.arg(&pos_n32);
        builder.arg(&kv);
        builder.arg(&vv);
        match &maskv {
            Some(m) => builder.arg(m),
            None => builder.arg(&null),
        };
        builder.arg(&mask_rows);
        builder.arg(&out);
        let dims = [h, d, cap, attend].map(|v| v as u32);
        for v in &dims {
            builder.arg(v);
        }
        let scale = self.scale.unwrap_or(1.0) as f32;
        let has_scale = i32::from(self.scale.is_some());
        builder.arg(&scale);
        builder.arg(&has_scale);
        let cfg = LaunchConfig {
            grid_dim: ((rows * h) as u32, 1, 1),
            block_dim: (ATTN_THREADS as u32, 1, 1),
            shared_mem_bytes: attention_smem(d, attend) as u32,
        };
        // SAFETY: one block per (row, head) reads its q, k, v from `qkv` (rows x 3hd), writes
        // k and v at the row's position of the caches (the caller checked it is below `cap`;
        // the caches belong to the `&mut KvCache` of `attention`, so nothing else reads them
        // meanwhile), reads `attend <= cap` cache positions, `attend` mask values of its row,
        // and writes `d` outputs.
        unsafe { builder.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev.clone()),
            Shape::from((rows, h * d)),
        ))
    }
}

/// Shared memory of the attention kernel: q, the scores, 8 partial outputs per thread.
fn attention_smem(head_dim: usize, attend: usize) -> usize {
    4 * (head_dim + attend + ATTN_THREADS * 8)
}

/// RoPE (when `rope` holds the `[P, D/2]` cos/sin tables) of the q and k in `qkv`
/// (`[rows, 3 H D]`), the cache write at `step`'s positions, then attention over
/// `step.attend` cache positions under `step.mask`: `[rows, H D]`.
pub(crate) fn attention(
    qkv: &Tensor,
    rope: Option<(&Tensor, &Tensor)>,
    step: &StepIndex,
    cache: &mut KvCache,
    heads: usize,
    head_dim: usize,
    scale: Option<f64>,
) -> crate::Result<Tensor> {
    cache.mark_step(step.pos)?;
    Ok(qkv.apply_op1_no_bwd(&Attention {
        rope,
        step,
        keys: cache.keys_buffer(),
        values: cache.values_buffer(),
        heads,
        head_dim,
        scale,
    })?)
}

/// Whether a decode step of `x` (`[rows, 1, c]`) can run fused: CUDA, bf16, at most
/// [`MAX_ROWS`] rows, widths that fit the kernels (multiples of 8, rows the GEMV can stage),
/// and everything [`attention_applies`] asks.
pub(crate) fn applies(
    x: &Tensor,
    step: &StepIndex,
    caches: &[KvCache],
    widths: &[usize],
    head_dim: usize,
) -> bool {
    let Ok((rows, _, _)) = x.dims3() else {
        return false;
    };
    (1..=MAX_ROWS).contains(&rows)
        && x.is_contiguous()
        && x.layout().start_offset().is_multiple_of(8)
        && widths
            .iter()
            .all(|&w| w.is_multiple_of(8) && w > 0 && rows * w <= STAGE_VALUES)
        && attention_applies(x, step, caches, head_dim)
}

/// Whether the attention kernel can run a decode step of `x` (`[rows, 1, c]`, any number of
/// rows: a batched step's projections then stay candle's GEMMs): CUDA, bf16, heads of at most
/// [`MAX_HEAD_DIM`] (a multiple of 8), scores that fit shared memory, caches of `rows`
/// contiguous bf16 rows, and the kernels compiled.
pub(crate) fn attention_applies(
    x: &Tensor,
    step: &StepIndex,
    caches: &[KvCache],
    head_dim: usize,
) -> bool {
    let Ok((rows, _, _)) = x.dims3() else {
        return false;
    };
    x.device().is_cuda()
        && x.dtype() == DType::BF16
        && rows > 0
        && head_dim.is_multiple_of(8)
        && head_dim > 0
        && head_dim <= MAX_HEAD_DIM
        && attention_smem(head_dim, step.attend) <= SMEM_LIMIT
        && step.pos_dev.dtype() == DType::U32
        && step.mask.as_ref().is_none_or(|m| m.dtype() == DType::F32)
        && caches.iter().all(|c| {
            let k = c.keys_buffer();
            k.dtype() == DType::BF16
                && k.dims().first() == Some(&rows)
                && k.is_contiguous()
                && c.values_buffer().is_contiguous()
                && k.layout().start_offset().is_multiple_of(8)
        })
        && available(x.device())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::D;

    fn bf16(t: Tensor) -> candle_core::Result<Tensor> {
        t.to_dtype(DType::BF16)
    }

    fn max_rel(got: &Tensor, want: &Tensor) -> candle_core::Result<f32> {
        let (g, w) = (got.to_dtype(DType::F32)?, want.to_dtype(DType::F32)?);
        let scale = w.abs()?.max_all()?.to_scalar::<f32>()?;
        Ok((g - w)?.abs()?.max_all()?.to_scalar::<f32>()? / scale)
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn cuda_gemv_epilogues_match_candle_ops() -> candle_core::Result<()> {
        let dev = chatterbox_cuda::open(0)?;
        for (rows, k, n) in [
            (1usize, 1024usize, 3072usize),
            (2, 1024, 8192),
            (2, 4096, 1024),
        ] {
            let x = bf16(Tensor::randn(0f32, 1.0, (rows, k), &dev)?)?;
            let w = bf16(Tensor::randn(0f32, 0.05, (n, k), &dev)?)?;
            let g = bf16(Tensor::randn(1f32, 0.1, k, &dev)?)?;
            let normed = candle_nn::ops::rms_norm(&x, &g, 1e-5)?;
            let plain = normed.matmul(&w.t()?)?;
            // one bf16 rounding of the output plus summation order
            let got = gemv(&x, Some(Norm::Rms(&g, 1e-5)), &w, None, Epilogue::Store)?;
            assert!(max_rel(&got, &plain)? < 8e-3, "{rows}x{k}x{n} store");
            let res = bf16(Tensor::randn(0f32, 1.0, (rows, n), &dev)?)?;
            let got = gemv(&x, None, &w, None, Epilogue::Residual(&res))?;
            let want = (&res + x.matmul(&w.t()?)?)?;
            assert!(max_rel(&got, &want)? < 8e-3, "{rows}x{k}x{n} residual");
            // GPT-2: LayerNorm, bias, residual and tanh GELU
            let nb = bf16(Tensor::randn(0f32, 0.1, k, &dev)?)?;
            let b = bf16(Tensor::randn(0f32, 0.5, n, &dev)?)?;
            let ln = candle_nn::ops::layer_norm(&x, &g, &nb, 1e-5)?;
            let lin = ln.matmul(&w.t()?)?.broadcast_add(&b)?;
            let got = gemv(
                &x,
                Some(Norm::Layer(&g, &nb, 1e-5)),
                &w,
                Some(&b),
                Epilogue::Store,
            )?;
            assert!(
                max_rel(&got, &lin)? < 8e-3,
                "{rows}x{k}x{n} layer norm + bias"
            );
            let got = gemv(&x, None, &w, Some(&b), Epilogue::Residual(&res))?;
            let want = (&res + x.matmul(&w.t()?)?.broadcast_add(&b)?)?;
            assert!(
                max_rel(&got, &want)? < 8e-3,
                "{rows}x{k}x{n} bias + residual"
            );
            let got = gemv(
                &x,
                Some(Norm::Layer(&g, &nb, 1e-5)),
                &w,
                Some(&b),
                Epilogue::Gelu,
            )?;
            let want = lin.to_dtype(DType::F32)?.gelu()?;
            assert!(max_rel(&got, &want)? < 8e-3, "{rows}x{k}x{n} gelu_new");
            let got = gemv(&x, Some(Norm::Rms(&g, 1e-5)), &w, None, Epilogue::SiluMul)?;
            let gate = plain.narrow(D::Minus1, 0, n / 2)?;
            let up = plain.narrow(D::Minus1, n / 2, n / 2)?;
            let want = (candle_nn::ops::silu(&gate)? * up)?;
            assert_eq!(got.dims(), &[rows, n / 2]);
            assert!(max_rel(&got, &want)? < 1.6e-2, "{rows}x{k}x{n} silu-mul");
        }
        // bad shapes are errors, not launches
        let x = bf16(Tensor::zeros((3, 64), DType::F32, &dev)?)?;
        let w = bf16(Tensor::zeros((8, 64), DType::F32, &dev)?)?;
        assert!(gemv(&x, None, &w, None, Epilogue::Store).is_err());
        Ok(())
    }
}
