// The split-precision ("3xTF32") implicit-GEMM convolution of chatterbox-vocoder (see
// `mod.rs`): hi_w hi_x on TF32 mma, lo_w hi_x + hi_w lo_x on one f16 mma of depth 16. Compiled
// at run time with NVRTC for compute_80.
#define BM 64
#define BN 128
#define BK 8

// hi: v rounded to TF32 (to nearest); lo: the f32 remainder. Non-finite values (or values that
// would round past the largest float) stay whole in hi.
__device__ __forceinline__ void split_tf32(float v, float& hi, float& lo) {
    unsigned int bits = __float_as_uint(v);
    unsigned int h = (bits + 0x1000u) & 0xffffe000u;
    if ((bits & 0x7f800000u) == 0x7f800000u || (h & 0x7f800000u) == 0x7f800000u) h = bits;
    hi = __uint_as_float(h);
    lo = __fsub_rn(v, hi);
}

__device__ __forceinline__ void mma_tf32(float* d, float a0, float a1, float a2, float a3,
                                         float b0, float b1) {
    asm(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(__float_as_uint(a0)), "r"(__float_as_uint(a1)), "r"(__float_as_uint(a2)),
          "r"(__float_as_uint(a3)), "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
}

// d += a b on f16 inputs (m16n8k16): a is 4 registers of half pairs, b 2.
__device__ __forceinline__ void mma_f16(float* d, float4 a, float b0, float b1) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(__float_as_uint(a.x)), "r"(__float_as_uint(a.y)), "r"(__float_as_uint(a.z)),
          "r"(__float_as_uint(a.w)), "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
}

// Two values as an f16 pair (the first in the low half), rounded to nearest and saturated at
// the largest finite f16, in a float's bits.
__device__ __forceinline__ float f16_pair(float a, float b) {
    a = fminf(fmaxf(a, -65504.0f), 65504.0f);
    b = fminf(fmaxf(b, -65504.0f), 65504.0f);
    unsigned short ha, hb;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(ha) : "f"(a));
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(hb) : "f"(b));
    return __uint_as_float((unsigned int)ha | ((unsigned int)hb << 16));
}

// y[b, o, t] = (bias[o] + sum_{c, j} w[o, c, j] act(x[b, c, t + j dil - pad])) (+ res[b, o, t])
//              (+ sum[b, o, t]) (/ div, when div != 0).
// wf: the weight split and laid out as mma fragments: for each group of BK input channels, tap
// and 16 output channels, 32 lanes x (the TF32 fragment of 2^11 hi, the f16 fragment of
// [2^11 lo, hi]): see `mod.rs`.
// act: 0 none, 1 Snake (alpha, inv_alpha), 2 leaky ReLU (slope).
// xs_stride (in float4, 2 mod 8): row stride of the staged window, free of bank conflicts;
// 4 * (BN + (k - 1) dil) <= MAXP * THREADS (checked by the caller).
// Shared memory: two staged windows (2 * 4 * xs_stride float4).
#define THREADS 256
#define MAXP 4
extern "C" __global__ void __launch_bounds__(THREADS, 2) hift_conv_tf32x3(
        const float* __restrict__ x, const float4* __restrict__ wf,
        const float* __restrict__ bias, const float* __restrict__ res,
        const float* __restrict__ sum, const float* __restrict__ alpha,
        const float* __restrict__ inv_alpha, float* __restrict__ y, int c_in, int c_out,
        int m_tiles, int k, int t_in, int t_out, int dil, int pad, int act, float slope,
        int has_res, int has_sum, float div, int xs_stride) {
    // Two buffers of the activated input window of BK channels: for each q < 4 and step s,
    // (hi of channel q, hi of q + 4, then as f16 pairs: (hi of q, hi of q + 4),
    // (2^11 lo of q, 2^11 lo of q + 4)).
    extern __shared__ float4 xs[];
    const int b = blockIdx.z, o0 = blockIdx.y * BM, t0 = blockIdx.x * BN;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, q = lane & 3;
    const int wm = (warp >> 2) * 32, wn = (warp & 3) * 32;
    const int mt0 = (o0 + wm) >> 4;
    const int span = BN + (k - 1) * dil;
    const float* xb = x + (unsigned long long)b * c_in * t_in;
    const int chunks = (c_in + BK - 1) / BK;

    // The raw input values of one channel group (at most MAXP pairs per thread).
    float pre[MAXP][2];
    auto fetch = [&](int cc) {
        #pragma unroll
        for (int p = 0; p < MAXP; ++p) {
            const int i = tid + p * THREADS;
            pre[p][0] = 0.0f;
            pre[p][1] = 0.0f;
            if (i < 4 * span) {
                const int r = i / span, s = i - r * span, tt = t0 + s - pad;
                #pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int c = cc * BK + r + 4 * h;
                    if (c < c_in && tt >= 0 && tt < t_in)
                        pre[p][h] = xb[(unsigned long long)c * t_in + tt];
                }
            }
        }
    };
    auto store = [&](int cc, float4* buf) {
        #pragma unroll
        for (int p = 0; p < MAXP; ++p) {
            const int i = tid + p * THREADS;
            if (i < 4 * span) {
                const int r = i / span, s = i - r * span;
                float v[2];
                #pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int c = cc * BK + r + 4 * h;
                    float u = pre[p][h];
                    if (c < c_in) {
                        if (act == 1) {
                            // Snake, with the rounding of the separate kernels (no contraction)
                            float sn = sinf(__fmul_rn(u, alpha[c]));
                            u = __fadd_rn(u, __fmul_rn(__fmul_rn(sn, sn), inv_alpha[c]));
                        } else if (act == 2) {
                            u = u > 0.0f ? u : __fmul_rn(u, slope);
                        }
                    }
                    v[h] = u;
                }
                float4 e;
                float lo0, lo1;
                split_tf32(v[0], e.x, lo0);
                split_tf32(v[1], e.y, lo1);
                e.z = f16_pair(e.x, e.y);
                e.w = f16_pair(lo0 * 2048.0f, lo1 * 2048.0f);
                buf[r * xs_stride + s] = e;
            }
        }
    };

    float acc[2][4][4];
    #pragma unroll
    for (int i = 0; i < 2; ++i)
        #pragma unroll
        for (int j = 0; j < 4; ++j)
            #pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;
    fetch(0);
    store(0, xs);
    __syncthreads();
    for (int cc = 0; cc < chunks; ++cc) {
        const float4* cur = xs + (cc & 1) * 4 * xs_stride + q * xs_stride + wn + g;
        // This group's sum starts from zero on the tensor cores and is added to the running
        // sum in f32: the tensor cores align each addend to the largest and truncate, so a
        // long accumulation there would lose the low bits of every product against the total.
        float part[2][4][4];
        #pragma unroll
        for (int i = 0; i < 2; ++i)
            #pragma unroll
            for (int j = 0; j < 4; ++j)
                #pragma unroll
                for (int r = 0; r < 4; ++r) part[i][j][r] = 0.0f;
        const float4* wc = wf + (unsigned long long)cc * k * m_tiles * 64 + (mt0 * 32 + lane) * 2;
        float4 ah[2], al[2];
        #pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
            ah[mi] = __ldg(wc + mi * 64);
            al[mi] = __ldg(wc + mi * 64 + 1);
        }
        for (int j = 0; j < k; ++j) {
            // the next tap's weights load while this tap computes
            const int jn = j + 1 < k ? j + 1 : j;
            float4 nh[2], nl[2], bx[4];
            const float4* wj = wc + (unsigned long long)jn * m_tiles * 64;
            #pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
                nh[mi] = __ldg(wj + mi * 64);
                nl[mi] = __ldg(wj + mi * 64 + 1);
            }
            #pragma unroll
            for (int ni = 0; ni < 4; ++ni) bx[ni] = cur[ni * 8 + j * dil];
            // 2^11 (lo_w hi_x + hi_w lo_x) on f16, then 2^11 hi_w hi_x on TF32, into each sum
            #pragma unroll
            for (int mi = 0; mi < 2; ++mi)
                #pragma unroll
                for (int ni = 0; ni < 4; ++ni)
                    mma_f16(part[mi][ni], al[mi], bx[ni].z, bx[ni].w);
            #pragma unroll
            for (int mi = 0; mi < 2; ++mi)
                #pragma unroll
                for (int ni = 0; ni < 4; ++ni)
                    mma_tf32(part[mi][ni], ah[mi].x, ah[mi].y, ah[mi].z, ah[mi].w, bx[ni].x, bx[ni].y);
            #pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
                ah[mi] = nh[mi];
                al[mi] = nl[mi];
            }
        }
        #pragma unroll
        for (int i = 0; i < 2; ++i)
            #pragma unroll
            for (int j = 0; j < 4; ++j)
                #pragma unroll
                for (int r = 0; r < 4; ++r) acc[i][j][r] = __fmaf_rn(part[i][j][r], 4.8828125e-4f, acc[i][j][r]);
        // The next group's window: fetched here rather than before the taps, which keeps
        // its registers free during them (128 per thread, two blocks per multiprocessor).
        if (cc + 1 < chunks) {
            fetch(cc + 1);
            store(cc + 1, xs + ((cc + 1) & 1) * 4 * xs_stride);
        }
        __syncthreads();
    }
    float* yb = y + (unsigned long long)b * c_out * t_out;
    const float* rb = res + (unsigned long long)b * c_out * t_out;
    const float* sb = sum + (unsigned long long)b * c_out * t_out;
    #pragma unroll
    for (int mi = 0; mi < 2; ++mi)
        #pragma unroll
        for (int ni = 0; ni < 4; ++ni)
            #pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int o = o0 + wm + mi * 16 + g + (r >> 1) * 8;
                const int t = t0 + wn + ni * 8 + 2 * q + (r & 1);
                if (o < c_out && t < t_out) {
                    const unsigned long long idx = (unsigned long long)o * t_out + t;
                    float v = acc[mi][ni][r] + bias[o];
                    if (has_res) v = v + rb[idx];
                    if (has_sum) v = sb[idx] + v;
                    if (div != 0.0f) v = __fdiv_rn(v, div);
                    yb[idx] = v;
                }
            }
}

