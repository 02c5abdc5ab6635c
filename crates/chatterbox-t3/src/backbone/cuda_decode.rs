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

const SOURCE: &str = r#"
#define WARPS 8
#define NEG_INF __int_as_float(0xff800000)
// bf16 as raw 16-bit patterns: no CUDA headers needed at run time.
__device__ __forceinline__ float bf(unsigned short v) { return __uint_as_float(((unsigned int)v) << 16); }
__device__ __forceinline__ unsigned short to_bf(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u); // NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                               // nearest even
    return (unsigned short)(u >> 16);
}
// `f` rounded to bf16 (what an op with a bf16 output stores).
__device__ __forceinline__ float rbf(float f) { return bf(to_bf(f)); }

// 8 bf16 weights against 8 bf16 activations, in f32.
__device__ __forceinline__ float dot8h(uint4 w, uint4 x) {
    float s = __uint_as_float(w.x << 16) * __uint_as_float(x.x << 16);
    s += __uint_as_float(w.x & 0xffff0000u) * __uint_as_float(x.x & 0xffff0000u);
    s += __uint_as_float(w.y << 16) * __uint_as_float(x.y << 16);
    s += __uint_as_float(w.y & 0xffff0000u) * __uint_as_float(x.y & 0xffff0000u);
    s += __uint_as_float(w.z << 16) * __uint_as_float(x.z << 16);
    s += __uint_as_float(w.z & 0xffff0000u) * __uint_as_float(x.z & 0xffff0000u);
    s += __uint_as_float(w.w << 16) * __uint_as_float(x.w << 16);
    s += __uint_as_float(w.w & 0xffff0000u) * __uint_as_float(x.w & 0xffff0000u);
    return s;
}
// 8 bf16 weights against 8 f32 activations.
__device__ __forceinline__ float dot8(uint4 w, const float* x) {
    const float4 a = *reinterpret_cast<const float4*>(x);
    const float4 b = *reinterpret_cast<const float4*>(x + 4);
    float s = __uint_as_float(w.x << 16) * a.x;
    s += __uint_as_float(w.x & 0xffff0000u) * a.y;
    s += __uint_as_float(w.y << 16) * a.z;
    s += __uint_as_float(w.y & 0xffff0000u) * a.w;
    s += __uint_as_float(w.z << 16) * b.x;
    s += __uint_as_float(w.z & 0xffff0000u) * b.y;
    s += __uint_as_float(w.w << 16) * b.z;
    s += __uint_as_float(w.w & 0xffff0000u) * b.w;
    return s;
}

__device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    #pragma unroll
    for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// Block-wide sum (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
__device__ float block_sum(float v, float* scratch) {
    v = warp_sum(v);
    unsigned int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float t = lane < warps ? scratch[lane] : 0.0f;
    return warp_sum(t);
}
__device__ float block_max(float v, float* scratch) {
    v = warp_max(v);
    unsigned int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float t = lane < warps ? scratch[lane] : NEG_INF;
    return warp_max(t);
}

// y = x · Wᵀ (+ bias) for rows <= 2 of x (bf16 [rows, k], rows * k <= 8 * 4 * blockDim), W
// bf16 [n, k]; with `g`, x is first normalised as candle's norms do: RMS
// (bf16(x * rsqrt(mean(x²) + eps) * g)), or LayerNorm when `nb` (its bias) is given
// (bf16((x - mean) * rsqrt(var + eps) * g + nb)). With `bias`, acc = bf16(x · w + bias).
// mode 0: y [rows, n] = bf16(acc)
// mode 1: y [rows, n] = bf16(res + bf16(acc))
// mode 2: y [rows, n / 2] = bf16(bf16(silu(bf16(acc_i))) * bf16(acc_{i + n/2}))
// mode 3: y [rows, n] = bf16(gelu_new(bf16(acc))) (GPT-2's tanh GELU, in f32)
// One warp per output (a gate and its up in mode 2), 16-byte weight loads, f32 sums.
#define UW 8
#define SU 4
// A unit of a warp's work: round `r` of output `t`, UW 16-byte chunks per lane (UW of one
// weight row, or UW / 2 of each of a pair).
__device__ __forceinline__ void load_unit(uint4* buf, const uint4* w, unsigned int t,
        unsigned int r, unsigned int k8, unsigned int outs, bool pair, unsigned int lane) {
    unsigned int span = pair ? 32 * (UW / 2) : 32 * UW;
    const uint4* wa = w + (unsigned long long)t * k8;
    const uint4* wb = w + (unsigned long long)(t + outs) * k8;
    #pragma unroll
    for (int u = 0; u < UW; u++) {
        unsigned int c = r * span + (pair ? lane + 32 * (u % (UW / 2)) : lane + 32 * u);
        if (c < k8) buf[u] = __ldg((pair && u >= UW / 2 ? wb : wa) + c);
    }
}

// Persistent: each warp takes outputs task, task + stride, ... and issues the loads of its
// next unit before computing the current one, so every warp keeps a unit of weights in flight.
extern "C" __global__ void __launch_bounds__(32 * WARPS, 2) t3_decode_gemv(
        const unsigned short* __restrict__ x,
        const unsigned short* __restrict__ g, const unsigned short* __restrict__ nb, float eps,
        const unsigned short* __restrict__ w, const unsigned short* __restrict__ bias,
        const unsigned short* __restrict__ res, unsigned short* __restrict__ y,
        unsigned int rows, unsigned int n, unsigned int k, int mode) {
    extern __shared__ uint4 xs[];           // [rows, k / 8]: x (normalised) in bf16
    __shared__ float scratch[4][WARPS];
    unsigned int k8 = k / 8;
    unsigned int lane = threadIdx.x % 32;
    unsigned int task = blockIdx.x * WARPS + threadIdx.x / 32;
    unsigned int stride = gridDim.x * WARPS;
    bool pair = mode == 2;
    unsigned int outs = pair ? n / 2 : n;
    unsigned int span = pair ? 32 * (UW / 2) : 32 * UW;
    unsigned int rounds = (k8 + span - 1) / span;
    const uint4* w4 = reinterpret_cast<const uint4*>(w);
    // the first unit is issued before x is staged: it does not depend on it
    uint4 vv[UW];
    if (task < outs) load_unit(vv, w4, task, 0, k8, outs, pair, lane);
    // stage x (and its norm) in one pass of 16-byte loads, all issued before any is used
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    uint4 v[SU];
    float ss0 = 0.0f, ss1 = 0.0f, sm0 = 0.0f, sm1 = 0.0f;
    #pragma unroll
    for (int u = 0; u < SU; u++) {
        unsigned int i = threadIdx.x + u * blockDim.x;
        if (i < rows * k8) v[u] = __ldg(xv + i);
    }
    #pragma unroll
    for (int u = 0; u < SU; u++) {
        unsigned int i = threadIdx.x + u * blockDim.x;
        if (i < rows * k8) {
            const unsigned int* p = reinterpret_cast<const unsigned int*>(&v[u]);
            float s = 0.0f, m = 0.0f;
            #pragma unroll
            for (int q = 0; q < 4; q++) {
                float lo = __uint_as_float(p[q] << 16), hi = __uint_as_float(p[q] & 0xffff0000u);
                s += lo * lo + hi * hi;
                m += lo + hi;
            }
            if (i < k8) { ss0 += s; sm0 += m; } else { ss1 += s; sm1 += m; }
        }
    }
    float scale0 = 1.0f, scale1 = 1.0f, mean0 = 0.0f, mean1 = 0.0f;
    if (g) {
        float t[4] = {ss0, ss1, sm0, sm1};
        unsigned int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        #pragma unroll
        for (int q = 0; q < 4; q++) {
            t[q] = warp_sum(t[q]);
            if (lane == 0) scratch[q][warp] = t[q];
        }
        __syncthreads();
        #pragma unroll
        for (int q = 0; q < 4; q++) t[q] = warp_sum(lane < WARPS ? scratch[q][lane] : 0.0f);
        if (nb) {
            mean0 = t[2] / (float)k;
            mean1 = t[3] / (float)k;
            scale0 = rsqrtf(t[0] / (float)k - mean0 * mean0 + eps);
            scale1 = rsqrtf(t[1] / (float)k - mean1 * mean1 + eps);
        } else {
            scale0 = rsqrtf(t[0] / (float)k + eps);
            scale1 = rsqrtf(t[1] / (float)k + eps);
        }
    }
    const uint4* gv = reinterpret_cast<const uint4*>(g);
    #pragma unroll
    for (int u = 0; u < SU; u++) {
        unsigned int i = threadIdx.x + u * blockDim.x;
        if (i < rows * k8) {
            const unsigned int* p = reinterpret_cast<const unsigned int*>(&v[u]);
            float f[8];
            #pragma unroll
            for (int q = 0; q < 4; q++) {
                f[2 * q] = __uint_as_float(p[q] << 16);
                f[2 * q + 1] = __uint_as_float(p[q] & 0xffff0000u);
            }
            if (g) {
                float sc = i < k8 ? scale0 : scale1;
                uint4 gw = __ldg(gv + (i % k8));
                const unsigned int* gp = reinterpret_cast<const unsigned int*>(&gw);
                unsigned int o[4];
                if (nb) {
                    float mu = i < k8 ? mean0 : mean1;
                    uint4 bw = __ldg(reinterpret_cast<const uint4*>(nb) + (i % k8));
                    const unsigned int* bp = reinterpret_cast<const unsigned int*>(&bw);
                    #pragma unroll
                    for (int q = 0; q < 4; q++) {
                        unsigned int lo = to_bf((f[2 * q] - mu) * sc * __uint_as_float(gp[q] << 16)
                            + __uint_as_float(bp[q] << 16));
                        unsigned int hi = to_bf((f[2 * q + 1] - mu) * sc
                            * __uint_as_float(gp[q] & 0xffff0000u) + __uint_as_float(bp[q] & 0xffff0000u));
                        o[q] = lo | (hi << 16);
                    }
                } else {
                    #pragma unroll
                    for (int q = 0; q < 4; q++) {
                        unsigned int lo = to_bf(sc * f[2 * q] * __uint_as_float(gp[q] << 16));
                        unsigned int hi = to_bf(sc * f[2 * q + 1] * __uint_as_float(gp[q] & 0xffff0000u));
                        o[q] = lo | (hi << 16);
                    }
                }
                xs[i] = make_uint4(o[0], o[1], o[2], o[3]);
            } else {
                xs[i] = v[u];
            }
        }
    }
    __syncthreads();
    if (task >= outs) return;
    unsigned int r = 0;
    float a0 = 0.0f, a1 = 0.0f, b0 = 0.0f, b1 = 0.0f;  // [output a|b][row 0|1]
    while (true) {
        unsigned int nt = task, nr = r + 1;
        if (nr == rounds) { nr = 0; nt = task + stride; }
        uint4 vn[UW];
        if (nt < outs) load_unit(vn, w4, nt, nr, k8, outs, pair, lane);
        #pragma unroll
        for (int u = 0; u < UW; u++) {
            unsigned int c = r * span + (pair ? lane + 32 * (u % (UW / 2)) : lane + 32 * u);
            if (c < k8) {
                bool second = pair && u >= UW / 2;
                float s0 = dot8h(vv[u], xs[c]);
                float s1 = rows > 1 ? dot8h(vv[u], xs[k8 + c]) : 0.0f;
                if (second) { b0 += s0; b1 += s1; } else { a0 += s0; a1 += s1; }
            }
        }
        if (r + 1 == rounds) {
            a0 = warp_sum(a0); a1 = warp_sum(a1);
            if (pair) { b0 = warp_sum(b0); b1 = warp_sum(b1); }
            if (lane == 0) {
                float ba = bias ? bf(bias[task]) : 0.0f;
                float bb = bias && pair ? bf(bias[task + outs]) : 0.0f;
                for (unsigned int q = 0; q < rows; q++) {
                    float a = rbf((q == 0 ? a0 : a1) + ba);
                    float out;
                    if (mode == 1) {
                        out = bf(res[q * n + task]) + a;
                    } else if (mode == 2) {
                        float u = rbf((q == 0 ? b0 : b1) + bb);
                        out = rbf(a / (1.0f + expf(-a))) * u;
                    } else if (mode == 3) {
                        out = 0.5f * a * (1.0f + tanhf(0.7978845608f * (a + 0.044715f * a * a * a)));
                    } else {
                        out = a;
                    }
                    y[q * outs + task] = to_bf(out);
                }
            }
            a0 = a1 = b0 = b1 = 0.0f;
        }
        if (nt >= outs) break;
        task = nt;
        r = nr;
        #pragma unroll
        for (int u = 0; u < UW; u++) vv[u] = vn[u];
    }
}

// One block per (row, head) of a decode step (head_dim d <= 128, a multiple of 8). qkv bf16
// [rows, 3 H D] (q pre-scaled unless `scale` is used); RoPE (cos/sin bf16 [P, D/2],
// rotate-half) of q and k at the row's position, k and v written into the caches
// [rows, H, cap, D] there, then softmax(q kᵀ (· scale) + mask) v over positions 0..attend of
// the cache (mask f32 [mask_rows, attend] or none; positions whose mask is -inf are skipped:
// their weight is 0). Scores and probabilities are rounded to bf16 as candle's bf16 products
// and casts do.
extern "C" __global__ void t3_decode_attention(const unsigned short* __restrict__ qkv,
        const unsigned short* __restrict__ cos_t, const unsigned short* __restrict__ sin_t,
        const unsigned int* __restrict__ pos, unsigned int pos_n,
        unsigned short* kc, unsigned short* vc,
        const float* __restrict__ mask, unsigned int mask_rows, unsigned short* __restrict__ out,
        unsigned int heads, unsigned int d, unsigned int cap, unsigned int attend,
        float scale, int has_scale) {
    extern __shared__ float sm[];            // q [d], scores [attend], partial [blockDim, 8]
    __shared__ float scratch[32];
    float* qs = sm;
    float* sc = sm + d;
    float* part = sc + attend;
    unsigned int b = blockIdx.x / heads, h = blockIdx.x % heads, half = d / 2, d8 = d / 8;
    unsigned int p = pos[pos_n == 1 ? 0 : b];
    const unsigned short* qr = qkv + (unsigned long long)b * 3 * heads * d + h * d;
    const unsigned short* kr = qr + heads * d;
    const unsigned short* vr = qr + 2 * heads * d;
    unsigned long long base = ((unsigned long long)b * heads + h) * cap * d;
    unsigned int tid = threadIdx.x;
    if (tid < half) {
        float q1 = bf(qr[tid]), q2 = bf(qr[tid + half]);
        float k1 = bf(kr[tid]), k2 = bf(kr[tid + half]);
        if (cos_t) {
            float c = bf(cos_t[(unsigned long long)p * half + tid]);
            float s = bf(sin_t[(unsigned long long)p * half + tid]);
            qs[tid] = rbf(rbf(q1 * c) - rbf(q2 * s));
            qs[tid + half] = rbf(rbf(q1 * s) + rbf(q2 * c));
            kc[base + (unsigned long long)p * d + tid] = to_bf(rbf(k1 * c) - rbf(k2 * s));
            kc[base + (unsigned long long)p * d + tid + half] = to_bf(rbf(k1 * s) + rbf(k2 * c));
        } else {
            qs[tid] = q1;
            qs[tid + half] = q2;
            kc[base + (unsigned long long)p * d + tid] = kr[tid];
            kc[base + (unsigned long long)p * d + tid + half] = kr[tid + half];
        }
        vc[base + (unsigned long long)p * d + tid] = vr[tid];
        vc[base + (unsigned long long)p * d + tid + half] = vr[tid + half];
    }
    __syncthreads();
    const float* mrow = mask ? mask + (unsigned long long)(mask_rows == 1 ? 0 : b) * attend : 0;
    float mx = NEG_INF;
    for (unsigned int t = tid; t < attend; t += blockDim.x) {
        float m = mrow ? mrow[t] : 0.0f;
        float s = NEG_INF;
        if (m != NEG_INF) {
            const uint4* kp = reinterpret_cast<const uint4*>(kc + base + (unsigned long long)t * d);
            uint4 kk[16];
            #pragma unroll
            for (int j = 0; j < 16; j++) if (j < d8) kk[j] = kp[j];
            float acc = 0.0f;
            #pragma unroll
            for (int j = 0; j < 16; j++) if (j < d8) acc += dot8(kk[j], qs + 8 * j);
            s = rbf(acc);
            if (has_scale) s *= scale;
            s += m;
        }
        sc[t] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_max(mx, scratch);
    float sum = 0.0f;
    for (unsigned int t = tid; t < attend; t += blockDim.x) {
        float e = sc[t] == NEG_INF ? 0.0f : expf(sc[t] - mx);
        sc[t] = e;
        sum += e;
    }
    sum = block_sum(sum, scratch);
    float inv = 1.0f / sum;
    for (unsigned int t = tid; t < attend; t += blockDim.x) sc[t] = rbf(sc[t] * inv);
    __syncthreads();
    // weighted values: d8 threads per position (8 dims each), blockDim / d8 positions at once
    unsigned int lanes = blockDim.x / d8 * d8, grp = tid / d8, col = tid % d8, step = blockDim.x / d8;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (tid < lanes) {
        const uint4* vp = reinterpret_cast<const uint4*>(vc + base) + col;
        for (unsigned int t0 = grp; t0 < attend; t0 += 4 * step) {
            uint4 vv[4];
            float wt[4];
            #pragma unroll
            for (int u = 0; u < 4; u++) {
                unsigned int t = t0 + u * step;
                wt[u] = t < attend ? sc[t] : 0.0f;
                if (wt[u] != 0.0f) vv[u] = vp[(unsigned long long)t * d8];
            }
            #pragma unroll
            for (int u = 0; u < 4; u++) {
                if (wt[u] != 0.0f) {
                    const unsigned int* q = reinterpret_cast<const unsigned int*>(&vv[u]);
                    #pragma unroll
                    for (int e = 0; e < 4; e++) {
                        acc[2 * e] += wt[u] * __uint_as_float(q[e] << 16);
                        acc[2 * e + 1] += wt[u] * __uint_as_float(q[e] & 0xffff0000u);
                    }
                }
            }
        }
    }
    #pragma unroll
    for (int e = 0; e < 8; e++) part[tid * 8 + e] = acc[e];
    __syncthreads();
    if (tid < d) {
        unsigned int c = tid / 8, e = tid % 8;
        float total = 0.0f;
        for (unsigned int q = 0; q < step; q++) total += part[(q * d8 + c) * 8 + e];
        out[(unsigned long long)b * heads * d + h * d + tid] = to_bf(total);
    }
}
"#;

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
    fn name(&self) -> &'static str {
        "t3-decode-gemv"
    }

    fn cpu_fwd(
        &self,
        _: &candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, Shape)> {
        candle_core::bail!("t3-decode-gemv: CUDA only")
    }

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
    fn name(&self) -> &'static str {
        "t3-decode-attention"
    }

    fn cpu_fwd(
        &self,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, Shape)> {
        candle_core::bail!("t3-decode-attention: CUDA only")
    }

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
    use candle_core::{Device, D};

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
