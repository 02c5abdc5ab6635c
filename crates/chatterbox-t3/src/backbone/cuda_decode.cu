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
