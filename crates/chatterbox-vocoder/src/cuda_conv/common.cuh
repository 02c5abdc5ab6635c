// What both forms of chatterbox-vocoder's split-precision convolution share (see `mod.rs`):
// the tile sizes, the split of a value, cp.async and the launch's parameter. NVRTC compiles it
// in front of `kernel.cu` (mma.sync, sm_80 and newer) or `kernel_sm90.cu` (wgmma, sm_90a).
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

// The activation in front of a convolution: act 0 none, 1 Snake (alpha, inv_alpha of the
// channel), 2 leaky ReLU (slope). Snake with the rounding of the separate kernels (no
// contraction).
__device__ __forceinline__ float hift_act(float u, int act, const float* __restrict__ alpha,
                                          const float* __restrict__ inv_alpha, int c,
                                          float slope) {
    if (act == 1) {
        float sn = sinf(__fmul_rn(u, alpha[c]));
        return __fadd_rn(u, __fmul_rn(__fmul_rn(sn, sn), inv_alpha[c]));
    }
    if (act == 2) return u > 0.0f ? u : __fmul_rn(u, slope);
    return u;
}

__device__ __forceinline__ unsigned int smem_addr(const void* p) {
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (unsigned int)a;
}

// 16 bytes from global to shared, zero-filled when `valid` is false.
__device__ __forceinline__ void cp_async16(unsigned int dst, const void* src, bool valid) {
    int bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// The activated input at batch b, channel c, step tt of `x` (B, c_in, t); zero past c_in.
__device__ __forceinline__ float act_input(const float* __restrict__ x, int b, int c_in, int c,
                                           int t, int tt, int act,
                                           const float* __restrict__ alpha,
                                           const float* __restrict__ inv_alpha, float slope) {
    if (c >= c_in) return 0.0f;
    return hift_act(x[((unsigned long long)b * c_in + c) * t + tt], act, alpha, inv_alpha, c,
                    slope);
}

// The epilogue's access to steps t and t + 1 of an output row (index idx in yb, and in the
// residual rb when has_res): one 8-byte access where every operand allows it.
__device__ __forceinline__ bool pair_aligned(const float* yb, const float* rb, int has_res,
                                             unsigned long long idx, int t, int t_out) {
    unsigned long long addr = (unsigned long long)(yb + idx);
    if (has_res) addr |= (unsigned long long)(rb + idx);
    return t + 1 < t_out && (addr & 7) == 0;
}

// The residual at steps t and t + 1 (zeros past the output).
__device__ __forceinline__ float2 load_pair(const float* rb, unsigned long long idx, int t,
                                            int t_out, bool aligned) {
    if (aligned) return *reinterpret_cast<const float2*>(rb + idx);
    return make_float2(t < t_out ? rb[idx] : 0.0f, t + 1 < t_out ? rb[idx + 1] : 0.0f);
}

// Stores steps t and t + 1 (those inside the output).
__device__ __forceinline__ void store_pair(float* yb, unsigned long long idx, int t, int t_out,
                                           bool aligned, float v0, float v1) {
    if (aligned) {
        *reinterpret_cast<float2*>(yb + idx) = make_float2(v0, v1);
    } else {
        if (t < t_out) yb[idx] = v0;
        if (t + 1 < t_out) yb[idx + 1] = v1;
    }
}

// One convolution of a group launched together, and its blocks: t_blocks x o_blocks x batch,
// numbered from `first`. xs: the split input (the split kernel's layout); wf: the weights
// (`weight_fragments.rs`); res: the residual when has_res; y: the output; m_tiles: output
// channels / 16, padded to 64.
struct ConvProblem {
    const float4* xs;
    const float4* wf;
    const float* bias;
    const float* res;
    float* y;
    int chunks, c_out, m_tiles, k, t_in, t_out, dil, pad, has_res;
    int xs_stride, t_blocks, o_blocks, first;
    // channel groups in flight (2, 3 or 4): the most its own shared memory allows (the
    // mma.sync kernel; the wgmma kernels take theirs from the launch)
    int steps;
};

// Up to MAX_GROUP independent convolutions in one launch, so that the blocks of one fill the
// last wave of another (`count` problems, blocks numbered consecutively across them).
#define MAX_GROUP 3
struct ConvGroup {
    ConvProblem p[MAX_GROUP];
    int count;
};

// Which problem of the group this block computes (blocks are numbered consecutively across
// them), and the block's batch, first output channel and first step in it.
__device__ __forceinline__ int block_problem(const ConvGroup& grp) {
    int i = 0;
    while (i + 1 < grp.count && (int)blockIdx.x >= grp.p[i + 1].first) ++i;
    return i;
}

__device__ __forceinline__ void block_place(const ConvProblem& p, int& b, int& o0, int& t0) {
    const int local = blockIdx.x - p.first;
    const int rest = local / p.t_blocks;
    t0 = (local % p.t_blocks) * BN;
    o0 = (rest % p.o_blocks) * BM;
    b = rest / p.o_blocks;
}
