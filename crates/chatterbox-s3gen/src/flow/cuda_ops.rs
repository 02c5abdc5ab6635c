//! The flow's element-wise work around its GEMMs as single CUDA kernels (f32, bf16, f16;
//! computed in f32, rounded where the reference's ops round): `gelu_erf(y + bias)` of
//! matcha/transformer.py's `FeedForward`, `y + bias + residual` of its residual adds, a
//! convolution's bias, decoder.py's `Mish`, and for decoder.py's `CausalBlock1D` /
//! `CausalResnetBlock1D` (upstream 5de7a54) the convolution's input columns (im2col of
//! `(x + time embedding) * mask`) and the block's tail `mish(LayerNorm(y + bias)) * mask`; for
//! the encoder's relative-position attention (transformer/attention.py) the score sum
//! `(ac + rel_shift(bd)) * scale + key bias` in place, instead of candle's pad, reshape,
//! copy, strided add, affine and broadcast add over the `(b, h, t, 2t - 1)` position scores.
//! candle runs each as 2-10 kernels (pad, narrow, cat, broadcast add and multiply, upcast, the
//! activation, downcast), each a pass over the tensor: ncu on the H100 put a ResNet block of
//! 16 x 1000 frames at ~1.2 ms, of which its two GEMMs took 30 us.
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, DType, InplaceOp1, InplaceOp2, InplaceOp3, Layout, Tensor};
use chatterbox_cuda::{contiguous_view, Elem, Ptx};

const SOURCE: &str = r#"
// 16-bit values as raw bits (no CUDA headers at run time); bf16 rounds to nearest even.
__device__ __forceinline__ float ld(const float* p, unsigned long long i) { return p[i]; }
__device__ __forceinline__ void st(float* p, unsigned long long i, float v) { p[i] = v; }
struct bf16 { unsigned short b; };
struct f16 { unsigned short b; };
__device__ __forceinline__ float ld(const bf16* p, unsigned long long i) {
    return __uint_as_float(((unsigned int)p[i].b) << 16);
}
__device__ __forceinline__ void st(bf16* p, unsigned long long i, float v) {
    unsigned int u = __float_as_uint(v);
    unsigned short r = (u & 0x7fffffffu) > 0x7f800000u
        ? (unsigned short)((u >> 16) | 0x40u)
        : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    p[i].b = r;
}
__device__ __forceinline__ float ld(const f16* p, unsigned long long i) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p[i].b));
    return f;
}
__device__ __forceinline__ void st(f16* p, unsigned long long i, float v) {
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(v));
    p[i].b = r;
}

// `v` rounded to T's precision (what storing it and reading it back gives).
__device__ __forceinline__ float rnd(float v, const float*) { return v; }
__device__ __forceinline__ float rnd(float v, const bf16*) { bf16 t; st(&t, 0, v); return ld(&t, 0); }
__device__ __forceinline__ float rnd(float v, const f16*) { f16 t; st(&t, 0, v); return ld(&t, 0); }

// V consecutive values (16 bytes when V > 1: the caller checks the alignment).
template <typename T, int V>
__device__ __forceinline__ void load(const T* p, unsigned long long i, float* v) {
    if (V == 1) {
        v[0] = ld(p, i);
    } else {
        union { uint4 u; T e[V]; } w;
        w.u = *reinterpret_cast<const uint4*>(p + i);
        for (int q = 0; q < V; q++) v[q] = ld(w.e, q);
    }
}
template <typename T, int V>
__device__ __forceinline__ void store(T* p, unsigned long long i, const float* v) {
    if (V == 1) {
        st(p, i, v[0]);
    } else {
        union { uint4 u; T e[V]; } w;
        for (int q = 0; q < V; q++) st(w.e, q, v[q]);
        *reinterpret_cast<uint4*>(p + i) = w.u;
    }
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The column of `i` in rows of `cols` (32-bit arithmetic whenever the index fits).
__device__ __forceinline__ unsigned int col_of(unsigned long long i, unsigned int cols,
                                               unsigned long long n) {
    return n <= 0xffffffffull ? (unsigned int)i % cols : (unsigned int)(i % cols);
}

#define GRID_LOOP(i, n) \
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         i < (n); i += (unsigned long long)blockDim.x * gridDim.x)

// The bias kernels take V values per step (16-byte vectors when V > 1: the caller checks
// that rows of `cols` hold whole vectors and that the operands start aligned).

// y = gelu_erf(y + bias[col]) (exact GELU, as F.gelu(approximate="none"))
template <typename T, int V>
__device__ void bias_gelu(T* y, const T* bias, unsigned int cols, unsigned long long n) {
    GRID_LOOP(i, n / V) {
        unsigned long long e = i * V;
        unsigned int col = col_of(e, cols, n);
        float v[V];
        load<T, V>(y, e, v);
        for (int q = 0; q < V; q++) {
            float x = v[q] + ld(bias, col + q);
            v[q] = 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
        }
        store<T, V>(y, e, v);
    }
}

// y = y + bias[col] + residual
template <typename T, int V>
__device__ void bias_residual(T* y, const T* bias, const T* res, unsigned int cols,
                              unsigned long long n) {
    GRID_LOOP(i, n / V) {
        unsigned long long e = i * V;
        unsigned int col = col_of(e, cols, n);
        float v[V], r[V];
        load<T, V>(y, e, v);
        load<T, V>(res, e, r);
        for (int q = 0; q < V; q++) v[q] = (v[q] + ld(bias, col + q)) + r[q];
        store<T, V>(y, e, v);
    }
}

// y = y + bias[col]
template <typename T, int V>
__device__ void bias_add(T* y, const T* bias, unsigned int cols, unsigned long long n) {
    GRID_LOOP(i, n / V) {
        unsigned long long e = i * V;
        unsigned int col = col_of(e, cols, n);
        float v[V];
        load<T, V>(y, e, v);
        for (int q = 0; q < V; q++) v[q] += ld(bias, col + q);
        store<T, V>(y, e, v);
    }
}

// The convolution columns of x (n, t, c): out (n, t_out, k c), where tap j of output frame s
// holds (x[s - pad_left + j] + add[row]) * mask[s - pad_left + j], zeros outside 0..t; `add`
// is (1 or n, c) (add_rows), `add` and `mask` may be null. One block per output frame, V
// channels per thread.
template <typename T, int V>
__device__ void columns(T* out, const T* x, const T* add, const T* mask, unsigned int t,
                        unsigned int t_out, unsigned int c, unsigned int k, unsigned int pad_left,
                        unsigned int add_rows) {
    unsigned int row = blockIdx.x;
    unsigned int b = row / t_out, s = row - b * t_out;
    unsigned int kc = k * c;
    const T* a = add ? add + (unsigned long long)(add_rows == 1 ? 0 : b) * c : add;
    for (unsigned int col = threadIdx.x * V; col < kc; col += blockDim.x * V) {
        unsigned int j = col / c, ch = col - j * c;
        int src = (int)s + (int)j - (int)pad_left;
        float v[V];
        if (src >= 0 && src < (int)t) {
            unsigned long long f = (unsigned long long)b * t + (unsigned int)src;
            load<T, V>(x, f * c + ch, v);
            float m = mask ? ld(mask, f) : 1.0f;
            for (int q = 0; q < V; q++) v[q] = (a ? v[q] + ld(a, ch + q) : v[q]) * m;
        } else {
            for (int q = 0; q < V; q++) v[q] = 0.0f;
        }
        store<T, V>(out, (unsigned long long)row * kc + col, v);
    }
}

// y = mish(LayerNorm(y + bias)) * mask over rows of c, in place (`mask` (rows,) or null);
// y + bias and the norm are rounded to T as the separate ops round. One warp per row.
template <typename T>
__device__ void block_tail(T* y, const T* bias, const T* w, const T* nb, const T* mask,
                           unsigned int rows, unsigned int c, float eps) {
    unsigned int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    unsigned int lane = threadIdx.x & 31;
    if (row >= rows) return;
    T* r = y + (unsigned long long)row * c;
    float sum = 0.0f;
    for (unsigned int i = lane; i < c; i += 32) sum += rnd(ld(r, i) + ld(bias, i), r);
    float mean = warp_sum(sum) / (float)c;
    float sq = 0.0f;
    for (unsigned int i = lane; i < c; i += 32) {
        float d = rnd(ld(r, i) + ld(bias, i), r) - mean;
        sq += d * d;
    }
    float inv = rsqrtf(warp_sum(sq) / (float)c + eps);
    float m = mask ? ld(mask, row) : 1.0f;
    for (unsigned int i = lane; i < c; i += 32) {
        float v = rnd(ld(r, i) + ld(bias, i), r);
        float z = rnd((v - mean) * inv * ld(w, i) + ld(nb, i), r);
        st(r, i, rnd(z * tanhf(log1pf(expf(z))), r) * m);
    }
}

// y = y * tanh(log1p(exp(y))) (torch.nn.Mish)
template <typename T>
__device__ void mish(T* y, unsigned long long n) {
    GRID_LOOP(i, n) {
        float v = ld(y, i);
        st(y, i, v * tanhf(log1pf(expf(v))));
    }
}

// Relative-position attention scores, in place over ac (rows of t; row r is query i = r % t of
// its (batch, head), h heads a batch): ac = (ac + bd[r][t - 1 - i + j]) * scale, each step
// rounded to T as candle's add and affine round, then + key_bias[batch][j] when key_bias
// (batch, t) is given (0 or -inf: exact in T).
template <typename T>
__device__ void rel_scores(T* ac, const T* bd, const T* key_bias, unsigned int t, unsigned int h,
                           float scale, unsigned long long n) {
    unsigned long long p = 2ull * t - 1;
    GRID_LOOP(k, n) {
        unsigned long long r = k / t;
        unsigned int j = (unsigned int)(k - r * t), i = (unsigned int)(r % t);
        float v = rnd(ld(ac, k) + ld(bd, r * p + (t - 1 - i + j)), ac);
        v = rnd(v * scale, ac);
        if (key_bias) v += ld(key_bias, (r / ((unsigned long long)h * t)) * t + j);
        st(ac, k, v);
    }
}

#define BIAS_KERNELS(T, S, V, VS) \
extern "C" __global__ void flow_bias_gelu##VS##_##S(T* y, const T* b, unsigned int cols, \
        unsigned long long n) { bias_gelu<T, V>(y, b, cols, n); } \
extern "C" __global__ void flow_bias_residual##VS##_##S(T* y, const T* b, const T* r, \
        unsigned int cols, unsigned long long n) { bias_residual<T, V>(y, b, r, cols, n); } \
extern "C" __global__ void flow_bias_add##VS##_##S(T* y, const T* b, unsigned int cols, \
        unsigned long long n) { bias_add<T, V>(y, b, cols, n); }

#define KERNELS(T, S) \
BIAS_KERNELS(T, S, 1, ) \
BIAS_KERNELS(T, S, 16 / sizeof(T), 16) \
extern "C" __global__ void flow_mish_##S(T* y, unsigned long long n) { mish(y, n); } \
extern "C" __global__ void flow_columns_##S(T* o, const T* x, const T* a, const T* m, \
        unsigned int t, unsigned int t_out, unsigned int c, unsigned int k, unsigned int pl, \
        unsigned int ar) { columns<T, 1>(o, x, a, m, t, t_out, c, k, pl, ar); } \
extern "C" __global__ void flow_columns16_##S(T* o, const T* x, const T* a, const T* m, \
        unsigned int t, unsigned int t_out, unsigned int c, unsigned int k, unsigned int pl, \
        unsigned int ar) { columns<T, 16 / sizeof(T)>(o, x, a, m, t, t_out, c, k, pl, ar); } \
extern "C" __global__ void flow_block_tail_##S(T* y, const T* b, const T* w, const T* nb, \
        const T* m, unsigned int rows, unsigned int c, float eps) { \
    block_tail(y, b, w, nb, m, rows, c, eps); } \
extern "C" __global__ void flow_rel_scores_##S(T* ac, const T* bd, const T* kb, unsigned int t, \
        unsigned int h, float scale, unsigned long long n) { \
    rel_scores(ac, bd, kb, t, h, scale, n); }

KERNELS(float, f32)
KERNELS(bf16, bf16)
KERNELS(f16, f16)
"#;

pub(crate) static PTX: Ptx = Ptx::new(SOURCE, None, "flow element-wise kernels");

/// Whether the kernels take `x`: contiguous f32, bf16 or f16 on CUDA.
pub(crate) fn applies(x: &Tensor) -> bool {
    x.device().is_cuda()
        && matches!(x.dtype(), DType::F32 | DType::BF16 | DType::F16)
        && x.is_contiguous()
}

fn suffix(dtype: DType) -> candle_core::Result<&'static str> {
    Ok(match dtype {
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        d => candle_core::bail!("flow element-wise CUDA kernels: dtype {d:?}"),
    })
}

fn launch_config(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256).clamp(1, 132 * 16) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A contiguous operand's view, of the expected length.
fn view<'a, T: Elem>(
    s: &'a CudaStorage,
    l: &Layout,
    len: usize,
    what: &str,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, T>> {
    let v = contiguous_view::<T>(s, l, what)?;
    if v.len() != len {
        candle_core::bail!("flow element-wise CUDA kernels: {what} {:?}", l.shape())
    }
    Ok(v)
}

/// The in-place kernels; `cols` is the length of the last dimension (the bias's).
enum Op {
    BiasGelu,
    BiasResidual,
    BiasAdd,
    Mish,
}

impl Op {
    fn name(&self) -> &'static str {
        match self {
            Op::BiasGelu => "flow_bias_gelu",
            Op::BiasResidual => "flow_bias_residual",
            Op::BiasAdd => "flow_bias_add",
            Op::Mish => "flow_mish",
        }
    }

    fn launch<T: Elem>(
        &self,
        y: &mut CudaStorage,
        yl: &Layout,
        bias: Option<(&CudaStorage, &Layout)>,
        res: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<()> {
        let n = yl.shape().elem_count();
        let cols = yl.dims().last().copied().unwrap_or(1);
        if cols == 0 || n == 0 {
            return Ok(());
        }
        let dev: CudaDevice = y.device.clone();
        // 16-byte vectors when rows hold whole vectors and every operand starts aligned
        let size = T::DTYPE.size_in_bytes();
        let per = 16 / size;
        let aligned = |l: &Layout| (l.start_offset() * size).is_multiple_of(16);
        let vec = !matches!(self, Op::Mish)
            && cols.is_multiple_of(per)
            && aligned(yl)
            && res.is_none_or(|(_, l)| aligned(l));
        let name = format!(
            "{}{}_{}",
            self.name(),
            if vec { "16" } else { "" },
            suffix(T::DTYPE)?
        );
        let func = PTX.function(&dev, &name)?;
        let bias = bias
            .map(|(s, l)| view::<T>(s, l, cols, "bias"))
            .transpose()?;
        let res = res
            .map(|(s, l)| view::<T>(s, l, n, "residual"))
            .transpose()?;
        let (cols32, n64) = (cols as u32, n as u64);
        let Some((a, z)) = yl.contiguous_offsets() else {
            candle_core::bail!("flow element-wise CUDA kernels: non-contiguous input")
        };
        let mut yv = y.as_cuda_slice_mut::<T>()?.slice_mut(a..z);
        let mut builder = func.builder();
        builder.arg(&mut yv);
        if let Some(b) = &bias {
            builder.arg(b);
        }
        if let Some(r) = &res {
            builder.arg(r);
        }
        if bias.is_some() {
            builder.arg(&cols32);
        }
        builder.arg(&n64);
        // SAFETY: the kernel reads and writes the `n` values of `y`, reads `cols` bias values
        // and `n` residual values (lengths checked above).
        unsafe { builder.launch(launch_config(if vec { n / per } else { n })) }.w()?;
        Ok(())
    }

    fn dispatch(
        &self,
        y: &mut CudaStorage,
        yl: &Layout,
        bias: Option<(&CudaStorage, &Layout)>,
        res: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<()> {
        match y.dtype() {
            DType::F32 => self.launch::<f32>(y, yl, bias, res),
            DType::BF16 => self.launch::<half::bf16>(y, yl, bias, res),
            DType::F16 => self.launch::<half::f16>(y, yl, bias, res),
            d => candle_core::bail!("flow element-wise CUDA kernels: dtype {d:?}"),
        }
    }
}

impl InplaceOp1 for Op {
    fn name(&self) -> &'static str {
        Op::name(self)
    }

    fn cpu_fwd(&self, _: &mut candle_core::CpuStorage, _: &Layout) -> candle_core::Result<()> {
        candle_core::bail!("{}: CUDA only", Op::name(self))
    }

    fn cuda_fwd(&self, y: &mut CudaStorage, yl: &Layout) -> candle_core::Result<()> {
        self.dispatch(y, yl, None, None)
    }
}

impl InplaceOp2 for Op {
    fn name(&self) -> &'static str {
        Op::name(self)
    }

    fn cpu_fwd(
        &self,
        _: &mut candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<()> {
        candle_core::bail!("{}: CUDA only", Op::name(self))
    }

    fn cuda_fwd(
        &self,
        y: &mut CudaStorage,
        yl: &Layout,
        b: &CudaStorage,
        bl: &Layout,
    ) -> candle_core::Result<()> {
        self.dispatch(y, yl, Some((b, bl)), None)
    }
}

impl InplaceOp3 for Op {
    fn name(&self) -> &'static str {
        Op::name(self)
    }

    fn cpu_fwd(
        &self,
        _: &mut candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<()> {
        candle_core::bail!("{}: CUDA only", Op::name(self))
    }

    fn cuda_fwd(
        &self,
        y: &mut CudaStorage,
        yl: &Layout,
        b: &CudaStorage,
        bl: &Layout,
        r: &CudaStorage,
        rl: &Layout,
    ) -> candle_core::Result<()> {
        self.dispatch(y, yl, Some((b, bl)), Some((r, rl)))
    }
}

/// Checks that `y` and its operands share a dtype and `bias` is one row of `y`'s last
/// dimension.
fn check(y: &Tensor, bias: &Tensor, res: Option<&Tensor>) -> candle_core::Result<()> {
    let cols = y.dims().last().copied().unwrap_or(0);
    let bad_res = res.is_some_and(|r| r.dims() != y.dims() || r.dtype() != y.dtype());
    if bias.elem_count() != cols || bias.dtype() != y.dtype() || bad_res {
        candle_core::bail!(
            "flow element-wise CUDA kernels: y {:?}, bias {:?}, residual {:?}",
            y.shape(),
            bias.shape(),
            res.map(Tensor::shape)
        )
    }
    Ok(())
}

/// `y = gelu_erf(y + bias)`, overwriting `y` (see [`applies`]).
pub(crate) fn bias_gelu_inplace(y: Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
    check(&y, bias, None)?;
    y.inplace_op2(&bias.contiguous()?, &Op::BiasGelu)?;
    Ok(y)
}

/// `y = y + bias + residual`, overwriting `y` (see [`applies`]).
pub(crate) fn bias_residual_inplace(
    y: Tensor,
    bias: &Tensor,
    residual: &Tensor,
) -> candle_core::Result<Tensor> {
    check(&y, bias, Some(residual))?;
    y.inplace_op3(
        &bias.contiguous()?,
        &residual.contiguous()?,
        &Op::BiasResidual,
    )?;
    Ok(y)
}

/// `y = y + bias`, overwriting `y` (see [`applies`]).
pub(crate) fn bias_add_inplace(y: Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
    check(&y, bias, None)?;
    y.inplace_op2(&bias.contiguous()?, &Op::BiasAdd)?;
    Ok(y)
}

/// The CUDA operand `t` of `what` as a contiguous view of `len` values of `T`.
fn operand<'a, T: Elem>(
    s: &'a candle_core::Storage,
    l: &Layout,
    len: usize,
    what: &str,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, T>> {
    match s {
        candle_core::Storage::Cuda(c) => view::<T>(c, l, len, what),
        _ => candle_core::bail!("flow CUDA kernels: the {what} is not on the CUDA device"),
    }
}

/// The convolution columns of `x (n, t, c)` (see [`columns`]).
struct Columns<'a> {
    mask: Option<&'a Tensor>,
    add: Option<&'a Tensor>,
    kernel: usize,
    pad_left: usize,
    t_out: usize,
}

impl Columns<'_> {
    fn launch<T: Elem>(
        &self,
        x: &CudaStorage,
        xl: &Layout,
    ) -> candle_core::Result<(CudaStorage, candle_core::Shape)> {
        let (n, t, c) = xl.shape().dims3()?;
        let (k, t_out) = (self.kernel, self.t_out);
        let (rows, kc) = (n * t_out, k * c);
        if rows > i32::MAX as usize || kc > i32::MAX as usize || n * t > u32::MAX as usize {
            candle_core::bail!("flow columns: input {:?} is too large", xl.shape())
        }
        let xv = view::<T>(x, xl, n * t * c, "columns input")?;
        let mask = self.mask.map(|m| m.storage_and_layout());
        let add = self.add.map(|a| a.storage_and_layout());
        let add_rows = self.add.map_or(1, |a| a.elem_count() / c.max(1));
        let mv = match &mask {
            Some((s, l)) => Some(operand::<T>(s, l, n * t, "mask")?),
            None => None,
        };
        let av = match &add {
            Some((s, l)) => Some(operand::<T>(s, l, add_rows * c, "time embedding")?),
            None => None,
        };
        let dev: CudaDevice = x.device.clone();
        // 16-byte vectors when every vector starts aligned: rows of c values and the input's
        // start (allocations themselves are 256-byte aligned).
        let size = T::DTYPE.size_in_bytes();
        let per = 16 / size;
        let vec = c.is_multiple_of(per) && (xl.start_offset() * size).is_multiple_of(16);
        let name = format!(
            "flow_columns{}_{}",
            if vec { "16" } else { "" },
            suffix(T::DTYPE)?
        );
        let func = PTX.function(&dev, &name)?;
        // SAFETY: the kernel writes every one of the rows * kc values.
        let out = unsafe { dev.alloc::<T>(rows * kc)? };
        if rows > 0 && kc > 0 {
            let items = kc.div_ceil(if vec { per } else { 1 });
            let threads = items.next_multiple_of(32).min(256) as u32;
            let (t32, t_out32, c32, k32, pl32, ar32) = (
                t as u32,
                t_out as u32,
                c as u32,
                k as u32,
                self.pad_left as u32,
                add_rows as u32,
            );
            let mut builder = func.builder();
            builder.arg(&out);
            builder.arg(&xv);
            // absent operands: a null pointer (the kernel tests for it)
            let null = 0u64;
            match &av {
                Some(a) => builder.arg(a),
                None => builder.arg(&null),
            };
            match &mv {
                Some(m) => builder.arg(m),
                None => builder.arg(&null),
            };
            builder.arg(&t32);
            builder.arg(&t_out32);
            builder.arg(&c32);
            builder.arg(&k32);
            builder.arg(&pl32);
            builder.arg(&ar32);
            let cfg = LaunchConfig {
                grid_dim: (rows as u32, 1, 1),
                block_dim: (threads, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: reads `x` (n t c values), `mask` (n t) and `add` (add_rows c) inside
            // their lengths (checked above); each block writes its own output row.
            unsafe { builder.launch(cfg) }.w()?;
        }
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev),
            candle_core::Shape::from((n, t_out, kc)),
        ))
    }
}

impl candle_core::CustomOp1 for Columns<'_> {
    fn name(&self) -> &'static str {
        "flow-columns-cuda"
    }

    fn cpu_fwd(
        &self,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        candle_core::bail!("flow-columns-cuda: CUDA only")
    }

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        xl: &Layout,
    ) -> candle_core::Result<(CudaStorage, candle_core::Shape)> {
        match x.dtype() {
            DType::F32 => self.launch::<f32>(x, xl),
            DType::BF16 => self.launch::<half::bf16>(x, xl),
            DType::F16 => self.launch::<half::f16>(x, xl),
            d => candle_core::bail!("flow columns: dtype {d:?}"),
        }
    }
}

/// The input columns of a convolution over `x (n, t, c)` (see [`applies`]) with `kernel` taps
/// and `pad_left` / `pad_right` zero frames: `(n, t_out, kernel * c)`, tap-major, where tap
/// `j` of output frame `s` is input frame `s - pad_left + j`, taken as `(x + add) * mask`:
/// `add (1 or n, 1, c)` (a time embedding), `mask (n, t, 1)` (1 valid, 0 padding).
pub(crate) fn columns(
    x: &Tensor,
    mask: Option<&Tensor>,
    add: Option<&Tensor>,
    kernel: usize,
    pad_left: usize,
    pad_right: usize,
) -> candle_core::Result<Tensor> {
    let (n, t, c) = x.dims3()?;
    let bad_mask = mask.is_some_and(|m| m.elem_count() != n * t || m.dtype() != x.dtype());
    let bad_add = add.is_some_and(|a| {
        (a.elem_count() != c && a.elem_count() != n * c) || a.dtype() != x.dtype()
    });
    if kernel == 0 || t + pad_left + pad_right < kernel || bad_mask || bad_add {
        candle_core::bail!(
            "flow columns: x {:?}, mask {:?}, add {:?}, kernel {kernel}, padding {pad_left} + \
             {pad_right}",
            x.shape(),
            mask.map(Tensor::shape),
            add.map(Tensor::shape)
        )
    }
    let mask = mask.map(Tensor::contiguous).transpose()?;
    let add = add.map(Tensor::contiguous).transpose()?;
    x.contiguous()?.apply_op1_no_bwd(&Columns {
        mask: mask.as_ref(),
        add: add.as_ref(),
        kernel,
        pad_left,
        t_out: t + pad_left + pad_right + 1 - kernel,
    })
}

/// `mish(LayerNorm(y + bias)) * mask` in place (decoder.py `CausalBlock1D` after its
/// convolution).
struct BlockTail<'a> {
    bias: &'a Tensor,
    weight: &'a Tensor,
    norm_bias: &'a Tensor,
    mask: Option<&'a Tensor>,
    eps: f32,
}

impl BlockTail<'_> {
    fn launch<T: Elem>(&self, y: &mut CudaStorage, yl: &Layout) -> candle_core::Result<()> {
        let c = yl.dims().last().copied().unwrap_or(0);
        let rows = yl.shape().elem_count() / c.max(1);
        if rows == 0 || c == 0 {
            return Ok(());
        }
        if rows.div_ceil(8) > i32::MAX as usize {
            candle_core::bail!("flow block tail: input {:?} is too large", yl.shape())
        }
        let guards = [self.bias, self.weight, self.norm_bias].map(|t| t.storage_and_layout());
        let [bv, wv, nv] = [(0, "bias"), (1, "norm weight"), (2, "norm bias")]
            .map(|(i, what)| operand::<T>(&guards[i].0, guards[i].1, c, what));
        let (bv, wv, nv) = (bv?, wv?, nv?);
        let mask = self.mask.map(|m| m.storage_and_layout());
        let mv = match &mask {
            Some((s, l)) => Some(operand::<T>(s, l, rows, "mask")?),
            None => None,
        };
        let dev: CudaDevice = y.device.clone();
        let name = format!("flow_block_tail_{}", suffix(T::DTYPE)?);
        let func = PTX.function(&dev, &name)?;
        let Some((a, z)) = yl.contiguous_offsets() else {
            candle_core::bail!("flow block tail: non-contiguous input")
        };
        let mut yv = y.as_cuda_slice_mut::<T>()?.slice_mut(a..z);
        let (rows32, c32) = (rows as u32, c as u32);
        let null = 0u64;
        let mut builder = func.builder();
        builder.arg(&mut yv);
        builder.arg(&bv);
        builder.arg(&wv);
        builder.arg(&nv);
        match &mv {
            Some(m) => builder.arg(m),
            None => builder.arg(&null),
        };
        builder.arg(&rows32);
        builder.arg(&c32);
        builder.arg(&self.eps);
        let cfg = LaunchConfig {
            grid_dim: (rows.div_ceil(8) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: one warp per row of `y` (rows * c values); the parameters hold c values and
        // the mask `rows` (checked above).
        unsafe { builder.launch(cfg) }.w()?;
        Ok(())
    }
}

impl InplaceOp1 for BlockTail<'_> {
    fn name(&self) -> &'static str {
        "flow-block-tail-cuda"
    }

    fn cpu_fwd(&self, _: &mut candle_core::CpuStorage, _: &Layout) -> candle_core::Result<()> {
        candle_core::bail!("flow-block-tail-cuda: CUDA only")
    }

    fn cuda_fwd(&self, y: &mut CudaStorage, yl: &Layout) -> candle_core::Result<()> {
        match y.dtype() {
            DType::F32 => self.launch::<f32>(y, yl),
            DType::BF16 => self.launch::<half::bf16>(y, yl),
            DType::F16 => self.launch::<half::f16>(y, yl),
            d => candle_core::bail!("flow block tail: dtype {d:?}"),
        }
    }
}

/// `y = mish(norm(y + bias)) * mask` in place for a contiguous `y (n, t, c)` (see [`applies`]),
/// `norm` a LayerNorm with a bias, `mask (n, t, 1)` or none.
pub(crate) fn block_tail(
    y: Tensor,
    bias: &Tensor,
    norm: &candle_nn::LayerNorm,
    mask: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let rows = y.elem_count() / y.dims().last().copied().unwrap_or(1).max(1);
    let Some(norm_bias) = norm.bias() else {
        candle_core::bail!("flow block tail: the LayerNorm has no bias")
    };
    check(&y, bias, None)?;
    check(&y, norm.weight(), None)?;
    check(&y, norm_bias, None)?;
    if mask.is_some_and(|m| m.elem_count() != rows || m.dtype() != y.dtype()) || !norm.remove_mean()
    {
        candle_core::bail!(
            "flow block tail: y {:?}, mask {:?}",
            y.shape(),
            mask.map(Tensor::shape)
        )
    }
    let (bias, weight, norm_bias) = (
        bias.contiguous()?,
        norm.weight().contiguous()?,
        norm_bias.contiguous()?,
    );
    let mask = mask.map(Tensor::contiguous).transpose()?;
    y.inplace_op1(&BlockTail {
        bias: &bias,
        weight: &weight,
        norm_bias: &norm_bias,
        mask: mask.as_ref(),
        eps: norm.eps() as f32,
    })?;
    Ok(y)
}

/// `y = mish(y)`, overwriting `y` (see [`applies`]).
pub(crate) fn mish_inplace(y: Tensor) -> candle_core::Result<Tensor> {
    y.inplace_op1(&Op::Mish)?;
    Ok(y)
}

/// `(ac + rel_shift(bd)) * scale (+ key_bias)` in place over `ac` (see the kernel).
struct RelScores {
    t: usize,
    heads: usize,
    scale: f32,
}

impl RelScores {
    fn launch<T: Elem>(
        &self,
        ac: &mut CudaStorage,
        al: &Layout,
        bd: (&CudaStorage, &Layout),
        key_bias: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<()> {
        let n = al.shape().elem_count();
        let rows = n / self.t.max(1);
        let batches = rows / (self.heads * self.t).max(1);
        if n == 0 {
            return Ok(());
        }
        let dev: CudaDevice = ac.device.clone();
        let name = format!("flow_rel_scores_{}", suffix(T::DTYPE)?);
        let func = PTX.function(&dev, &name)?;
        let bd = view::<T>(bd.0, bd.1, rows * (2 * self.t - 1), "position scores")?;
        let kb = key_bias
            .map(|(s, l)| view::<T>(s, l, batches * self.t, "key bias"))
            .transpose()?;
        let Some((a, z)) = al.contiguous_offsets() else {
            candle_core::bail!("flow-rel-scores: non-contiguous scores")
        };
        let mut acv = ac.as_cuda_slice_mut::<T>()?.slice_mut(a..z);
        let null = 0u64;
        let (t32, h32, n64) = (self.t as u32, self.heads as u32, n as u64);
        let mut builder = func.builder();
        builder.arg(&mut acv);
        builder.arg(&bd);
        match &kb {
            Some(k) => builder.arg(k),
            None => builder.arg(&null),
        };
        builder.arg(&t32);
        builder.arg(&h32);
        builder.arg(&self.scale);
        builder.arg(&n64);
        // SAFETY: the kernel writes the `n` scores in place and reads `rows (2t - 1)` position
        // scores and `batches t` key-bias values (lengths checked above).
        unsafe { builder.launch(launch_config(n)) }.w()?;
        Ok(())
    }

    fn dispatch(
        &self,
        ac: &mut CudaStorage,
        al: &Layout,
        bd: (&CudaStorage, &Layout),
        key_bias: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<()> {
        match ac.dtype() {
            DType::F32 => self.launch::<f32>(ac, al, bd, key_bias),
            DType::BF16 => self.launch::<half::bf16>(ac, al, bd, key_bias),
            DType::F16 => self.launch::<half::f16>(ac, al, bd, key_bias),
            d => candle_core::bail!("flow-rel-scores: dtype {d:?}"),
        }
    }
}

impl InplaceOp3 for RelScores {
    fn name(&self) -> &'static str {
        "flow-rel-scores"
    }

    fn cpu_fwd(
        &self,
        _: &mut candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<()> {
        candle_core::bail!("flow-rel-scores: CUDA only")
    }

    fn cuda_fwd(
        &self,
        ac: &mut CudaStorage,
        al: &Layout,
        bd: &CudaStorage,
        bl: &Layout,
        kb: &CudaStorage,
        kl: &Layout,
    ) -> candle_core::Result<()> {
        self.dispatch(ac, al, (bd, bl), Some((kb, kl)))
    }
}

/// `(ac + rel_shift(bd)) * scale + key_bias` for `ac (b, h, t, t)` (overwritten), `bd (b, h, t,
/// 2t - 1)` and `key_bias (b, 1, 1, t)` of `ac`'s dtype; `None` (nothing done) where the
/// kernel does not take the operands.
pub(crate) fn rel_scores(
    ac: Tensor,
    bd: &Tensor,
    scale: f32,
    key_bias: Option<&Tensor>,
) -> candle_core::Result<Result<Tensor, Tensor>> {
    let Ok((b, h, t, t2)) = ac.dims4() else {
        return Ok(Err(ac));
    };
    let fits = applies(&ac)
        && t2 == t
        && t > 0
        && bd.dims() == [b, h, t, 2 * t - 1]
        && bd.dtype() == ac.dtype()
        && bd.is_contiguous()
        && key_bias.is_none_or(|k| {
            k.dims() == [b, 1, 1, t] && k.dtype() == ac.dtype() && k.is_contiguous()
        });
    if !fits
        || !PTX.available(ac.device(), |e| {
            tracing::warn!("{e}: the encoder's attention runs candle's ops")
        })
    {
        return Ok(Err(ac));
    }
    let op = RelScores { t, heads: h, scale };
    // no key bias: zeros (adding 0 leaves every score as it is)
    let zeros;
    let kb = match key_bias {
        Some(k) => k,
        None => {
            zeros = Tensor::zeros((b, 1, 1, t), ac.dtype(), ac.device())?;
            &zeros
        }
    };
    ac.inplace_op3(bd, kb, &op)?;
    Ok(Ok(ac))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn max_rel(a: &Tensor, b: &Tensor) -> candle_core::Result<f32> {
        let (a, b) = (a.to_dtype(DType::F32)?, b.to_dtype(DType::F32)?);
        let scale = b.abs()?.max_all()?.to_scalar::<f32>()?.max(1e-30);
        Ok((a - b)?.abs()?.max_all()?.to_scalar::<f32>()? / scale)
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn match_the_candle_ops() -> candle_core::Result<()> {
        let dev = chatterbox_cuda::open(0)?;
        for (dtype, tol) in [(DType::F32, 1e-6), (DType::BF16, 8e-3), (DType::F16, 1e-3)] {
            let y = (Tensor::randn(0f32, 1.0, (2, 37, 96), &dev)? * 3.0)?;
            let b = Tensor::randn(0f32, 1.0, 96, &dev)?;
            let r = Tensor::randn(0f32, 1.0, (2, 37, 96), &dev)?;
            let (yd, bd, rd) = (y.to_dtype(dtype)?, b.to_dtype(dtype)?, r.to_dtype(dtype)?);
            // the f32 candle ops on the same rounded inputs
            let (yf, bf, rf) = (
                yd.to_dtype(DType::F32)?,
                bd.to_dtype(DType::F32)?,
                rd.to_dtype(DType::F32)?,
            );
            let want = yf.broadcast_add(&bf)?.gelu_erf()?;
            let got = bias_gelu_inplace(yd.copy()?, &bd)?;
            assert!(max_rel(&got, &want)? <= tol, "{dtype:?} gelu");
            let want = (yf.broadcast_add(&bf)? + &rf)?;
            let got = bias_residual_inplace(yd.copy()?, &bd, &rd)?;
            assert!(max_rel(&got, &want)? <= tol, "{dtype:?} residual");
            let want = (&yf * (yf.exp()? + 1.0)?.log()?.tanh()?)?;
            let got = mish_inplace(yd.copy()?)?;
            assert!(max_rel(&got, &want)? <= tol, "{dtype:?} mish");
            assert!(bias_gelu_inplace(yd.copy()?, &bd.narrow(0, 0, 95)?).is_err());
            let want = yf.broadcast_add(&bf)?;
            let got = bias_add_inplace(yd.copy()?, &bd)?;
            assert!(max_rel(&got, &want)? <= tol, "{dtype:?} bias");
        }
        Ok(())
    }

    /// The candle ops the fused kernels replace: `(x + add) * mask` padded, shifted and
    /// stacked tap-major.
    fn columns_by_ops(
        x: &Tensor,
        mask: Option<&Tensor>,
        add: Option<&Tensor>,
        k: usize,
        pl: usize,
        pr: usize,
    ) -> candle_core::Result<Tensor> {
        let x = match add {
            Some(a) => x.broadcast_add(a)?,
            None => x.clone(),
        };
        let x = match mask {
            Some(m) => x.broadcast_mul(m)?,
            None => x,
        };
        let xp = x.pad_with_zeros(1, pl, pr)?;
        let t_out = xp.dim(1)? + 1 - k;
        let taps = (0..k)
            .map(|j| xp.narrow(1, j, t_out))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Tensor::cat(&taps, 2)
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn columns_equal_the_candle_ops() -> candle_core::Result<()> {
        let dev = chatterbox_cuda::open(0)?;
        // (n, t, c, k, pad_left, pad_right): vectorised (c % 8 == 0) and scalar rows, causal,
        // pointwise and look-ahead padding
        for (n, t, c, k, pl, pr) in [
            (3usize, 37usize, 256usize, 3usize, 2usize, 0usize),
            (2, 5, 320, 3, 2, 0),
            (2, 9, 80, 1, 0, 0),
            (1, 7, 12, 4, 0, 3),
            (2, 6, 5, 3, 1, 1),
        ] {
            for dtype in [DType::F32, DType::BF16, DType::F16] {
                let x = Tensor::randn(0f32, 1.0, (n, t, c), &dev)?.to_dtype(dtype)?;
                let add = Tensor::randn(0f32, 1.0, (n, 1, c), &dev)?.to_dtype(dtype)?;
                let add1 = add.narrow(0, 0, 1)?;
                let lens: Vec<f32> = (0..n * t)
                    .map(|i| f32::from(u8::from(i % t < t - i / t)))
                    .collect();
                let mask = Tensor::from_vec(lens, (n, t, 1), &dev)?.to_dtype(dtype)?;
                for (m, a) in [
                    (None, None),
                    (Some(&mask), None),
                    (Some(&mask), Some(&add)),
                    (None, Some(&add1)),
                ] {
                    let want = columns_by_ops(&x, m, a, k, pl, pr)?.to_dtype(DType::F32)?;
                    let got = columns(&x, m, a, k, pl, pr)?.to_dtype(DType::F32)?;
                    assert_eq!(got.dims(), want.dims());
                    // the same roundings: equal to the bit
                    let err = (got - want)?.abs()?.max_all()?.to_scalar::<f32>()?;
                    assert_eq!(err, 0.0, "{dtype:?} ({n}, {t}, {c}) k {k}");
                }
            }
        }
        // an unaligned start (a view one value in) takes the scalar kernel
        let x = Tensor::randn(0f32, 1.0, 2 * 4 * 16 + 1, &dev)?;
        let x = x.narrow(0, 1, 2 * 4 * 16)?.reshape((2, 4, 16))?;
        let err = (columns(&x, None, None, 3, 2, 0)? - columns_by_ops(&x, None, None, 3, 2, 0)?)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        assert_eq!(err, 0.0);
        assert!(columns(&x, None, None, 9, 2, 0).is_err());
        Ok(())
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn block_tail_equals_the_candle_ops() -> candle_core::Result<()> {
        use candle_core::Module;
        let dev = chatterbox_cuda::open(0)?;
        for (dtype, tol) in [
            (DType::F32, 2e-6),
            (DType::BF16, 1.6e-2),
            (DType::F16, 2e-3),
        ] {
            let (n, t, c) = (3, 29, 256);
            let y = (Tensor::randn(0f32, 1.0, (n, t, c), &dev)? * 2.0)?.to_dtype(dtype)?;
            let bias = Tensor::randn(0f32, 1.0, c, &dev)?.to_dtype(dtype)?;
            let w = (Tensor::randn(0f32, 0.3, c, &dev)? + 1.0)?.to_dtype(dtype)?;
            let b = Tensor::randn(0f32, 0.3, c, &dev)?.to_dtype(dtype)?;
            let norm = candle_nn::LayerNorm::new(w, b, 1e-5);
            let flags: Vec<f32> = (0..n * t)
                .map(|i| f32::from(u8::from(i % 7 != 3)))
                .collect();
            let mask = Tensor::from_vec(flags, (n, t, 1), &dev)?.to_dtype(dtype)?;
            for m in [None, Some(&mask)] {
                let h = norm.forward(&y.broadcast_add(&bias)?)?;
                let h = mish_inplace(h)?;
                let want = match m {
                    Some(m) => h.broadcast_mul(m)?,
                    None => h,
                };
                let got = block_tail(y.copy()?, &bias, &norm, m)?;
                // the norm's sums in another order: within one rounding of the output
                let err = max_rel(&got, &want)?;
                assert!(err <= tol, "{dtype:?}: {err}");
                if let Some(m) = m {
                    let masked = (got.to_dtype(DType::F32)?
                        * (1.0 - m.to_dtype(DType::F32)?)?.broadcast_as((n, t, c))?)?;
                    let leak = masked.abs()?.max_all()?.to_scalar::<f32>()?;
                    assert_eq!(leak, 0.0, "padding frames must be zero");
                }
            }
        }
        Ok(())
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn rel_scores_equal_the_candle_ops() -> candle_core::Result<()> {
        let dev = chatterbox_cuda::open(0)?;
        let (b, h, t) = (3usize, 2usize, 23usize);
        let scale = 0.125f64;
        for dtype in [DType::F32, DType::BF16] {
            let ac = (Tensor::randn(0f32, 1.0, (b, h, t, t), &dev)? * 3.0)?.to_dtype(dtype)?;
            let bd =
                (Tensor::randn(0f32, 1.0, (b, h, t, 2 * t - 1), &dev)? * 3.0)?.to_dtype(dtype)?;
            // row 1 pads its last 5 keys, row 2 none, row 0 its last one
            let mut kb = vec![0f32; b * t];
            for j in t - 5..t {
                kb[t + j] = f32::NEG_INFINITY;
            }
            kb[t - 1] = f32::NEG_INFINITY;
            let kb = Tensor::from_vec(kb, (b, 1, 1, t), &dev)?.to_dtype(dtype)?;
            for bias in [None, Some(&kb)] {
                // candle's ops: rel_shift by pad-and-reshape, add, affine, bias add
                let p = 2 * t - 1;
                let shifted = bd
                    .pad_with_zeros(candle_core::D::Minus1, 1, 0)?
                    .reshape((b, h, p + 1, t))?
                    .narrow(2, 1, p)?
                    .contiguous()?
                    .reshape((b, h, t, p))?
                    .narrow(3, 0, t)?;
                let want = (&ac + shifted)?.affine(scale, 0.0)?;
                let want = match bias {
                    Some(k) => want.broadcast_add(k)?,
                    None => want,
                };
                let got = match rel_scores(ac.copy()?, &bd, scale as f32, bias)? {
                    Ok(g) => g,
                    Err(_) => candle_core::bail!("the kernel did not take {dtype:?}"),
                };
                let (got, want) = (
                    got.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?,
                    want.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?,
                );
                assert_eq!(got, want, "{dtype:?}, bias {}", bias.is_some());
            }
        }
        Ok(())
    }
}
