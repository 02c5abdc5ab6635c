// The split-precision ("3xTF32") implicit-GEMM convolution of chatterbox-vocoder for sm_80 and
// newer (see `mod.rs`): hi_w hi_x on TF32 mma.sync, lo_w hi_x + hi_w lo_x on one f16 mma of
// depth 16. Compiled at run time with NVRTC for compute_80, after `common.cuh`.
#define THREADS 256

// The activated input, split and laid out for the convolution: for batch b, group cc of BK
// channels, q < 4 and step t, the float4 (hi of channel 8 cc + q, hi of 8 cc + q + 4, then as
// f16 pairs (hi, hi), (2^11 lo, 2^11 lo) of the same two), zeros past c_in.
// act: as `hift_act`'s.
// Grid: (ceil(t / 256), chunks * 4, batch) blocks of 256 threads.
extern "C" __global__ void hift_act_split(const float* __restrict__ x,
                                          const float* __restrict__ alpha,
                                          const float* __restrict__ inv_alpha,
                                          float4* __restrict__ xs, int c_in, int t, int act,
                                          float slope) {
    const int tt = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y, b = blockIdx.z;
    if (tt >= t) return;
    const int cc = row >> 2, r = row & 3;
    float v[2];
    #pragma unroll
    for (int h = 0; h < 2; ++h)
        v[h] = act_input(x, b, c_in, cc * BK + r + 4 * h, t, tt, act, alpha, inv_alpha, slope);
    float4 e;
    float lo0, lo1;
    split_tf32(v[0], e.x, lo0);
    split_tf32(v[1], e.y, lo1);
    e.z = f16_pair(e.x, e.y);
    e.w = f16_pair(lo0 * 2048.0f, lo1 * 2048.0f);
    xs[((unsigned long long)b * gridDim.y + row) * t + tt] = e;
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

// y[b, o, t] = (bias[o] + sum_{c, j} w[o, c, j] xa[b, c, t + j dil - pad]) (+ res[b, o, t]),
// where xa is the activated input as
// `hift_act_split` lays it out (`xs_g`, `chunks` groups of BK channels).
// wf: the weight split and laid out as mma fragments: for each group of BK input channels, tap
// and 16 output channels, the TF32 fragments of 2^11 hi of the 32 lanes, then the f16
// fragments of [2^11 lo, hi] (see `mod.rs`).
// Each step stages one group: its input window (4 rows of xs_stride float4: 2 mod 8, free of
// bank conflicts, >= BN + (k - 1) dil) and the block's weight fragments for it (k taps x 4
// tiles of 16 output channels x 64 float4), NS steps in flight (cp.async).
template <int NS>
__device__ __noinline__ void conv_body(
        const float4* __restrict__ xs_g, const float4* __restrict__ wf,
        const float* __restrict__ bias, const float* __restrict__ res,
        float* __restrict__ y, int chunks, int c_out, int m_tiles, int k, int t_in, int t_out,
        int dil, int pad, int has_res, int xs_stride, int b, int o0, int t0) {
    extern __shared__ float4 smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, q = lane & 3;
    const int wm = (warp >> 2) * 32, wn = (warp & 3) * 32;
    const int span = BN + (k - 1) * dil;
    // one step's buffer: the window, then the weights
    const int x_len = 4 * xs_stride, w_len = k * (BM / 16) * 64;
    const int step_len = x_len + w_len;
    const float4* xb = xs_g + (unsigned long long)b * chunks * 4 * t_in;
    const int mt0 = o0 >> 4;

    // Copies group cc's window (zeros outside the input) and weights into its buffer and
    // commits the copies (an empty group past the last, which keeps the count in flight fixed).
    auto issue = [&](int cc) {
        if (cc < chunks) {
            float4* buf = smem + (cc % NS) * step_len;
            for (int s = tid; s < span; s += THREADS) {
                const int tt = t0 + s - pad;
                const bool ok = tt >= 0 && tt < t_in;
                const float4* src = xb + (unsigned long long)cc * 4 * t_in + (ok ? tt : 0);
                #pragma unroll
                for (int r = 0; r < 4; ++r)
                    cp_async16(smem_addr(buf + r * xs_stride + s),
                               src + (unsigned long long)r * t_in, ok);
            }
            // per tap, the 4 tiles of this block are contiguous (BM / 16 * 64 float4)
            const float4* wsrc = wf + ((unsigned long long)cc * k * m_tiles + mt0) * 64;
            // (THREADS == BM / 16 * 64: one value per thread and tap)
            for (int j = 0; j < k; ++j)
                cp_async16(smem_addr(buf + x_len + j * THREADS + tid),
                           wsrc + (unsigned long long)j * m_tiles * 64 + tid, true);
        }
        cp_async_commit();
    };

    float acc[2][4][4];
    #pragma unroll
    for (int i = 0; i < 2; ++i)
        #pragma unroll
        for (int j = 0; j < 4; ++j)
            #pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;
    #pragma unroll
    for (int s = 0; s < NS - 1; ++s) issue(s);
    for (int cc = 0; cc < chunks; ++cc) {
        // this group's copies have landed (every thread's), and every warp is done with the
        // buffer the next issue overwrites (the previous group's)
        cp_async_wait<NS - 2>();
        __syncthreads();
        issue(cc + NS - 1);
        const float4* buf = smem + (cc % NS) * step_len;
        const float4* cur = buf + q * xs_stride + wn + g;
        const float4* wc = buf + x_len + (wm >> 4) * 64 + lane;
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
        float4 ah[2], al[2];
        #pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
            ah[mi] = wc[mi * 64];
            al[mi] = wc[mi * 64 + 32];
        }
        for (int j = 0; j < k; ++j) {
            // the next tap's weights load while this tap computes
            const int jn = j + 1 < k ? j + 1 : j;
            float4 nh[2], nl[2], bx[4];
            const float4* wj = wc + jn * (BM / 16) * 64;
            #pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
                nh[mi] = wj[mi * 64];
                nl[mi] = wj[mi * 64 + 32];
            }
            #pragma unroll
            for (int ni = 0; ni < 4; ++ni) bx[ni] = cur[ni * 8 + j * dil];
            // 2^11 (lo_w hi_x + hi_w lo_x) on f16, then 2^11 hi_w hi_x on TF32
            #pragma unroll
            for (int mi = 0; mi < 2; ++mi)
                #pragma unroll
                for (int ni = 0; ni < 4; ++ni)
                    mma_f16(part[mi][ni], al[mi], bx[ni].z, bx[ni].w);
            #pragma unroll
            for (int mi = 0; mi < 2; ++mi)
                #pragma unroll
                for (int ni = 0; ni < 4; ++ni)
                    mma_tf32(part[mi][ni], ah[mi].x, ah[mi].y, ah[mi].z, ah[mi].w,
                             bx[ni].x, bx[ni].y);
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
                for (int r = 0; r < 4; ++r)
                    acc[i][j][r] = __fmaf_rn(part[i][j][r], 4.8828125e-4f, acc[i][j][r]);
    }
    // (conv + bias) + residual, every residual load of the thread in flight before its first
    // store
    float* yb = y + (unsigned long long)b * c_out * t_out;
    const float* rb = res + (unsigned long long)b * c_out * t_out;
    float rv[2][4][4];
    if (has_res) {
        #pragma unroll
        for (int mi = 0; mi < 2; ++mi)
            #pragma unroll
            for (int ni = 0; ni < 4; ++ni)
                #pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int o = o0 + wm + mi * 16 + g + hh * 8;
                    const int t = t0 + wn + ni * 8 + 2 * q;
                    const unsigned long long idx = (unsigned long long)o * t_out + t;
                    float2 r = make_float2(0.0f, 0.0f);
                    if (o < c_out)
                        r = load_pair(rb, idx, t, t_out, pair_aligned(yb, rb, 1, idx, t, t_out));
                    rv[mi][ni][hh * 2] = r.x;
                    rv[mi][ni][hh * 2 + 1] = r.y;
                }
    }
    #pragma unroll
    for (int mi = 0; mi < 2; ++mi)
        #pragma unroll
        for (int ni = 0; ni < 4; ++ni)
            #pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int o = o0 + wm + mi * 16 + g + hh * 8;
                const int t = t0 + wn + ni * 8 + 2 * q;
                if (o >= c_out || t >= t_out) continue;
                const unsigned long long idx = (unsigned long long)o * t_out + t;
                const float bo = bias[o];
                float v0 = acc[mi][ni][hh * 2] + bo, v1 = acc[mi][ni][hh * 2 + 1] + bo;
                if (has_res) {
                    v0 = v0 + rv[mi][ni][hh * 2];
                    v1 = v1 + rv[mi][ni][hh * 2 + 1];
                }
                store_pair(yb, idx, t, t_out, pair_aligned(yb, rb, has_res, idx, t, t_out), v0, v1);
            }
}

// The convolutions of a group, each with its own groups in flight (the launch's shared memory
// is the largest of theirs).
extern "C" __global__ void __launch_bounds__(THREADS, 2) hift_conv_group(const ConvGroup grp) {
    const ConvProblem& p = grp.p[block_problem(grp)];
    int b, o0, t0;
    block_place(p, b, o0, t0);
#define CONV_ARGS                                                                              \
    p.xs, p.wf, p.bias, p.res, p.y, p.chunks, p.c_out, p.m_tiles, p.k, p.t_in, p.t_out,       \
        p.dil, p.pad, p.has_res, p.xs_stride, b, o0, t0
    if (p.steps >= 4)
        conv_body<4>(CONV_ARGS);
    else if (p.steps == 3)
        conv_body<3>(CONV_ARGS);
    else
        conv_body<2>(CONV_ARGS);
}
