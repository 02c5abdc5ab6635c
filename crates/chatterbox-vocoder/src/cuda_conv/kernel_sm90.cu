// The split-precision convolution of chatterbox-vocoder on Hopper's warpgroup MMA (see
// `mod.rs`): one warpgroup per block computes 64 output channels x 128 steps; per group of 8
// input channels and tap, one TF32 wgmma (2^11 hi_w . hi_x) and one f16 wgmma of depth 16
// ([2^11 lo_w, hi_w] . [hi_x; 2^11 lo_x]), both operands read from shared memory. Compiled
// at run time with NVRTC for compute_90a, after `common.cuh`.
#define WG_THREADS 128

// The activated input, split and laid out as wgmma's K-major operands: for batch b, group cc
// of BK channels and step t, 4 planes of float4 (index (b chunks + cc) 4 + plane): 0 and 1
// the TF32 hi of channels 8 cc + 0..3 and 4..7, 2 the f16 hi of channels 8 cc + 0..7, 3 the
// f16 2^11 lo of the same (zeros past c_in). act: as `hift_act`'s. Two neighbouring threads
// share a step: thread h of the pair takes channels 4 h..4 h + 3 (plane h, and half of planes
// 2 and 3), so that a warp's stores are 256 contiguous bytes per plane.
// Grid: (ceil(2 t / 256), chunks, batch) blocks of 256 threads.
extern "C" __global__ void hift_act_split_wg(const float* __restrict__ x,
                                             const float* __restrict__ alpha,
                                             const float* __restrict__ inv_alpha,
                                             float4* __restrict__ xs, int c_in, int t, int act,
                                             float slope) {
    const int i2 = blockIdx.x * blockDim.x + threadIdx.x;
    const int tt = i2 >> 1, h = i2 & 1;
    const int cc = blockIdx.y, b = blockIdx.z;
    if (tt >= t) return;
    float hi[4], lo[4];
    #pragma unroll
    for (int i = 0; i < 4; ++i)
        split_tf32(act_input(x, b, c_in, cc * BK + 4 * h + i, t, tt, act, alpha, inv_alpha, slope),
                   hi[i], lo[i]);
    float4* out = xs + ((unsigned long long)b * gridDim.y + cc) * 4 * t + tt;
    out[(unsigned long long)h * t] = make_float4(hi[0], hi[1], hi[2], hi[3]);
    float2* f16s = reinterpret_cast<float2*>(out + 2ull * t) + h;
    f16s[0] = make_float2(f16_pair(hi[0], hi[1]), f16_pair(hi[2], hi[3]));
    f16s[2ull * t] = make_float2(f16_pair(lo[0] * 2048.0f, lo[1] * 2048.0f),
                                 f16_pair(lo[2] * 2048.0f, lo[3] * 2048.0f));
}

// A shared-memory matrix descriptor without swizzling: core matrices of 8 rows of 16 bytes,
// `lbo` bytes apart along K and `sbo` along M (or N).
__device__ __forceinline__ unsigned long long wg_desc(unsigned int addr, unsigned int lbo,
                                                      unsigned int sbo) {
    return (unsigned long long)((addr & 0x3ffff) >> 4) |
           ((unsigned long long)((lbo & 0x3ffff) >> 4) << 16) |
           ((unsigned long long)((sbo & 0x3ffff) >> 4) << 32);
}

// The 64 accumulator operands of a thread in an m64n128 wgmma with f32 results (%0..%63), and
// the asm text of one such wgmma: `shape_types`, then `d, a-desc (%64), b-desc (%65),
// scale-d (%66 != 0), imm-scale-a, imm-scale-b` and `tail`.
#define WG_ACC64 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), \
    "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), \
    "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), \
    "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
    "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), \
    "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
    "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), \
    "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), \
    "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define WG_MMA(shape_types, tail)                                                              \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                \
    "wgmma.mma_async.sync.aligned." shape_types " {"                                             \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                   \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                         \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                         \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"                          \
    "}, %64, %65, p, 1, 1" tail ";\n}\n"

// d (+)= a b for 64 x 8 TF32 a and 8 x 128 b, both K-major in shared memory (scale_d 0: d = a b).
__device__ __forceinline__ void wgmma_tf32(float* d, unsigned long long a, unsigned long long b,
                                           int scale_d) {
    asm volatile(WG_MMA("m64n128k8.f32.tf32.tf32", "")
                 : WG_ACC64
                 : "l"(a), "l"(b), "r"(scale_d)
                 : "memory");
}

// The same for 64 x 16 f16 a and 16 x 128 b (neither transposed).
__device__ __forceinline__ void wgmma_f16(float* d, unsigned long long a, unsigned long long b,
                                          int scale_d) {
    asm volatile(WG_MMA("m64n128k16.f32.f16.f16", ", 0, 0")
                 : WG_ACC64
                 : "l"(a), "l"(b), "r"(scale_d)
                 : "memory");
}

// Orders the registers of `d` against the asynchronous wgmma (the compiler sees them as
// written here).
__device__ __forceinline__ void wg_fence_regs(float* d) {
    #pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// y[b, o, t] as `conv_body` of `kernel.cu` computes it, the weights laid out per (group cc,
// tap, 64 output channels) as 4 KiB of K-major core matrices: the TF32 2^11 hi (channels
// 0..3 then 4..7 of the group, 8 rows of 16 bytes per 8 output channels), then the f16
// [2^11 lo, hi] (channels 0..7 of each). Each step stages one group: the 4 planes of its
// window (xs_stride float4 apart) and the block's k x 4 KiB of weights; NS steps in flight.
template <int NS>
__device__ __forceinline__ void conv_body_wg(
        const float4* __restrict__ xs_g, const float4* __restrict__ wf,
        const float* __restrict__ bias, const float* __restrict__ res,
        float* __restrict__ y, int chunks, int c_out, int m_blocks, int k, int t_in, int t_out,
        int dil, int pad, int has_res, int xs_stride, int b, int o0, int t0) {
    extern __shared__ float4 smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, q = lane & 3;
    const int span = BN + (k - 1) * dil;
    const int x_len = 4 * xs_stride, w_len = k * 256;
    const int step_len = x_len + w_len;
    const float4* xb = xs_g + (unsigned long long)b * chunks * 4 * t_in;
    const int mb = o0 / BM;

    auto issue = [&](int cc) {
        if (cc < chunks) {
            float4* buf = smem + (cc % NS) * step_len;
            for (int s = tid; s < span; s += WG_THREADS) {
                const int tt = t0 + s - pad;
                const bool ok = tt >= 0 && tt < t_in;
                const float4* src = xb + (unsigned long long)cc * 4 * t_in + (ok ? tt : 0);
                #pragma unroll
                for (int r = 0; r < 4; ++r)
                    cp_async16(smem_addr(buf + r * xs_stride + s),
                               src + (unsigned long long)r * t_in, ok);
            }
            for (int i = tid; i < w_len; i += WG_THREADS) {
                const int j = i >> 8, e = i & 255;
                cp_async16(smem_addr(buf + x_len + i),
                           wf + ((unsigned long long)(cc * k + j) * m_blocks + mb) * 256 + e,
                           true);
            }
        }
        cp_async_commit();
    };

    float acc[64], part[64];
    #pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    #pragma unroll
    for (int s = 0; s < NS - 1; ++s) issue(s);
    const unsigned int lbo_x = xs_stride * 16;
    for (int cc = 0; cc < chunks; ++cc) {
        cp_async_wait<NS - 2>();
        // the copies are generic-proxy writes; the tensor cores read through the async proxy
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        issue(cc + NS - 1);
        const unsigned int xa = smem_addr(smem + (cc % NS) * step_len);
        const unsigned int wa = xa + x_len * 16;
        wg_fence_regs(part);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        for (int j = 0; j < k; ++j) {
            const unsigned int xj = xa + j * dil * 16, wj = wa + j * 4096;
            wgmma_f16(part, wg_desc(wj + 2048, 1024, 128), wg_desc(xj + 2 * lbo_x, lbo_x, 128),
                      j > 0);
            wgmma_tf32(part, wg_desc(wj, 1024, 128), wg_desc(xj, lbo_x, 128), 1);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        wg_fence_regs(part);
        #pragma unroll
        for (int i = 0; i < 64; ++i) acc[i] = __fmaf_rn(part[i], 4.8828125e-4f, acc[i]);
    }
    // The epilogue: (conv + bias) + residual, every residual load of the thread in flight
    // (into `part`, free now) before its first store.
    float* yb = y + (unsigned long long)b * c_out * t_out;
    const float* rb = res + (unsigned long long)b * c_out * t_out;
    const int row = o0 + warp * 16 + g;
    const float brow[2] = {row < c_out ? bias[row] : 0.0f, row + 8 < c_out ? bias[row + 8] : 0.0f};
    if (has_res) {
        #pragma unroll
        for (int ni = 0; ni < 16; ++ni)
            #pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int o = row + hh * 8, t = t0 + ni * 8 + 2 * q;
                const unsigned long long idx = (unsigned long long)o * t_out + t;
                float2 r = make_float2(0.0f, 0.0f);
                if (o < c_out)
                    r = load_pair(rb, idx, t, t_out, pair_aligned(yb, rb, 1, idx, t, t_out));
                part[ni * 4 + hh * 2] = r.x;
                part[ni * 4 + hh * 2 + 1] = r.y;
            }
    }
    #pragma unroll
    for (int ni = 0; ni < 16; ++ni)
        #pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int o = row + hh * 8, t = t0 + ni * 8 + 2 * q;
            if (o >= c_out || t >= t_out) continue;
            const unsigned long long idx = (unsigned long long)o * t_out + t;
            float v0 = acc[ni * 4 + hh * 2] + brow[hh], v1 = acc[ni * 4 + hh * 2 + 1] + brow[hh];
            if (has_res) {
                v0 = v0 + part[ni * 4 + hh * 2];
                v1 = v1 + part[ni * 4 + hh * 2 + 1];
            }
            store_pair(yb, idx, t, t_out, pair_aligned(yb, rb, has_res, idx, t, t_out), v0, v1);
        }
}

// The convolutions of a group, all with NS groups in flight (the launch's shared memory is
// NS times the largest step of theirs).
template <int NS>
__device__ __forceinline__ void conv_group_wg(const ConvGroup& grp) {
    const ConvProblem& p = grp.p[block_problem(grp)];
    int b, o0, t0;
    block_place(p, b, o0, t0);
    conv_body_wg<NS>(p.xs, p.wf, p.bias, p.res, p.y, p.chunks, p.c_out, p.m_tiles / 4, p.k,
                     p.t_in, p.t_out, p.dil, p.pad, p.has_res, p.xs_stride, b, o0, t0);
}

extern "C" __global__ void __launch_bounds__(WG_THREADS, 3) hift_conv_wg2(const ConvGroup grp) {
    conv_group_wg<2>(grp);
}
extern "C" __global__ void __launch_bounds__(WG_THREADS, 3) hift_conv_wg3(const ConvGroup grp) {
    conv_group_wg<3>(grp);
}
extern "C" __global__ void __launch_bounds__(WG_THREADS, 3) hift_conv_wg4(const ConvGroup grp) {
    conv_group_wg<4>(grp);
}
