// The flow estimator's fused self-attention (see `mod.rs`), compiled at run time with NVRTC for
// compute_80: softmax(q k^T + key_bias) v per (batch row, head), straight from the fused
// (b, t, 3 h 64) q/k/v projection into the (b, t, h 64) output, in bf16 or f16 with f32
// accumulation and an f32 online softmax (flash attention's single pass).
//
// A block has 4 warps and owns 64 query rows of one (batch row, head); each warp owns 16 rows
// and keeps their q fragments, scores and output accumulators in registers. The keys go by in
// tiles of 64, staged (k and v) in shared memory by cp.async, two tiles in flight.
#define HD 64
#define BM 64
#define BN 64
#define THREADS 128
// Shared-memory row stride in 16-bit elements (144 bytes): the 8 rows an ldmatrix reads land
// on distinct banks.
#define LDS 72
// -inf without the CUDA headers NVRTC does not include.
#define NEG_INF __int_as_float(0xff800000)

typedef unsigned short u16;

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

__device__ __forceinline__ void ldmatrix_x4(unsigned int* r, unsigned int addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned int* r, unsigned int addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// d += a b on one m16n8k16 tile, 16-bit inputs (bf16 or f16), f32 accumulators.
template <bool BF16>
__device__ __forceinline__ void mma16(float* d, const unsigned int* a, unsigned int b0,
                                      unsigned int b1) {
    if (BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Two f32 values rounded (to nearest even) into one 32-bit pair, `lo` in the low half.
template <bool BF16>
__device__ __forceinline__ unsigned int pack2(float lo, float hi) {
    unsigned int r;
    if (BF16) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    }
    return r;
}

// qkv: (b, t, 3 h 64), q already scaled by 64^-0.5; bias: (b, t) f32 added to the scores of
// each key, or null; out: (b, t, h 64). Grid (ceil(t / 64), b h), THREADS threads.
template <bool BF16>
__device__ __forceinline__ void attention(const u16* __restrict__ qkv,
                                          const float* __restrict__ bias, u16* __restrict__ out,
                                          int t, int h) {
    __shared__ __align__(16) u16 ks[2][BN * LDS];
    __shared__ __align__(16) u16 vs[2][BN * LDS];
    const float LOG2E = 1.4426950408889634f;
    const int bh = blockIdx.y, b = bh / h, head = bh % h;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, q4 = lane & 3;
    const long long row_stride = 3LL * h * HD;
    const u16* base = qkv + (long long)b * t * row_stride;
    const u16* kbase = base + (long long)h * HD + head * HD;
    const u16* vbase = kbase + (long long)h * HD;
    const float* brow = bias ? bias + (long long)b * t : nullptr;

    // Stages key tile `j` (k and v) into buffer `buf`: 64 rows x 8 chunks of 16 bytes each.
    auto stage = [&](int j, int buf) {
#pragma unroll
        for (int i = 0; i < (BN * HD / 8) / THREADS; ++i) {
            int c = tid + i * THREADS, r = c >> 3, col = (c & 7) * 8;
            int key = j * BN + r;
            bool ok = key < t;
            long long off = (long long)(ok ? key : 0) * row_stride + col;
            cp_async16(smem_addr(&ks[buf][r * LDS + col]), kbase + off, ok);
            cp_async16(smem_addr(&vs[buf][r * LDS + col]), vbase + off, ok);
        }
        cp_async_commit();
    };

    const int tiles = (t + BN - 1) / BN;
    stage(0, 0);

    // This warp's q rows as m16n8k16 A fragments: 4 steps of 16 channels.
    const int r0 = blockIdx.x * BM + warp * 16 + g, r1 = r0 + 8;
    unsigned int qa[4][4];
    {
        const u16* q0 = base + (long long)r0 * row_stride + head * HD + 2 * q4;
        const u16* q1 = base + (long long)r1 * row_stride + head * HD + 2 * q4;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            qa[kk][0] = r0 < t ? *(const unsigned int*)(q0 + kk * 16) : 0u;
            qa[kk][1] = r1 < t ? *(const unsigned int*)(q1 + kk * 16) : 0u;
            qa[kk][2] = r0 < t ? *(const unsigned int*)(q0 + kk * 16 + 8) : 0u;
            qa[kk][3] = r1 < t ? *(const unsigned int*)(q1 + kk * 16 + 8) : 0u;
        }
    }

    float o[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    // Running max (in log2 units) and partial sums of this thread's two rows.
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;

    for (int j = 0; j < tiles; ++j) {
        const int buf = j & 1;
        if (j + 1 < tiles) {
            stage(j + 1, buf ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();

        // s = q k^T for 16 rows x 64 keys.
        float s[8][4];
#pragma unroll
        for (int n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
        const int mi = lane >> 3, ri = lane & 7;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                unsigned int kb[4];
                int key = (2 * p + (mi >> 1)) * 8 + ri, col = kk * 16 + (mi & 1) * 8;
                ldmatrix_x4(kb, smem_addr(&ks[buf][key * LDS + col]));
                mma16<BF16>(s[2 * p], qa[kk], kb[0], kb[1]);
                mma16<BF16>(s[2 * p + 1], qa[kk], kb[2], kb[3]);
            }
        }

        // Bias, masking past t, and the online softmax (log2 units). Full tiles skip the
        // tests (the same operations on every key, so the same numbers).
        float mx0 = NEG_INF, mx1 = NEG_INF;
        if ((j + 1) * BN <= t) {
#pragma unroll
            for (int n = 0; n < 8; ++n) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float kb = brow ? __ldg(brow + j * BN + n * 8 + 2 * q4 + e) : 0.f;
                    s[n][e] = (s[n][e] + kb) * LOG2E;
                    s[n][e + 2] = (s[n][e + 2] + kb) * LOG2E;
                    mx0 = fmaxf(mx0, s[n][e]);
                    mx1 = fmaxf(mx1, s[n][e + 2]);
                }
            }
        } else {
#pragma unroll
            for (int n = 0; n < 8; ++n) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    int key = j * BN + n * 8 + 2 * q4 + e;
                    bool ok = key < t;
                    float kb = (ok && brow) ? __ldg(brow + key) : 0.f;
                    s[n][e] = ok ? (s[n][e] + kb) * LOG2E : NEG_INF;
                    s[n][e + 2] = ok ? (s[n][e + 2] + kb) * LOG2E : NEG_INF;
                    mx0 = fmaxf(mx0, s[n][e]);
                    mx1 = fmaxf(mx1, s[n][e + 2]);
                }
            }
        }
#pragma unroll
        for (int sh = 1; sh <= 2; sh <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, sh));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, sh));
        }
        // The first tile holds key 0, so the running max is finite from then on.
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
        const float c0 = exp2f(m0 - n0), c1 = exp2f(m1 - n1);
        m0 = n0;
        m1 = n1;
        l0 *= c0;
        l1 *= c1;
#pragma unroll
        for (int n = 0; n < 8; ++n) {
            o[n][0] *= c0;
            o[n][1] *= c0;
            o[n][2] *= c1;
            o[n][3] *= c1;
            s[n][0] = exp2f(s[n][0] - n0);
            s[n][1] = exp2f(s[n][1] - n0);
            s[n][2] = exp2f(s[n][2] - n1);
            s[n][3] = exp2f(s[n][3] - n1);
            l0 += s[n][0] + s[n][1];
            l1 += s[n][2] + s[n][3];
        }

        // o += p v: p (rounded to 16 bits) as A fragments straight from the score registers.
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            unsigned int pa[4] = {
                pack2<BF16>(s[2 * kk][0], s[2 * kk][1]),
                pack2<BF16>(s[2 * kk][2], s[2 * kk][3]),
                pack2<BF16>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                pack2<BF16>(s[2 * kk + 1][2], s[2 * kk + 1][3]),
            };
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                unsigned int vb[4];
                int key = kk * 16 + (mi & 1) * 8 + ri, col = (2 * p + (mi >> 1)) * 8;
                ldmatrix_x4_trans(vb, smem_addr(&vs[buf][key * LDS + col]));
                mma16<BF16>(o[2 * p], pa, vb[0], vb[1]);
                mma16<BF16>(o[2 * p + 1], pa, vb[2], vb[3]);
            }
        }
        // The next iteration stages into this buffer.
        __syncthreads();
    }

#pragma unroll
    for (int sh = 1; sh <= 2; sh <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, sh);
        l1 += __shfl_xor_sync(0xffffffffu, l1, sh);
    }
    const float i0 = 1.f / l0, i1 = 1.f / l1;
    const long long out_stride = (long long)h * HD;
    u16* ob = out + (long long)b * t * out_stride + head * HD + 2 * q4;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
        if (r0 < t)
            *(unsigned int*)(ob + (long long)r0 * out_stride + n * 8) =
                pack2<BF16>(o[n][0] * i0, o[n][1] * i0);
        if (r1 < t)
            *(unsigned int*)(ob + (long long)r1 * out_stride + n * 8) =
                pack2<BF16>(o[n][2] * i1, o[n][3] * i1);
    }
}

// At most 128 registers, so that 4 blocks share a multiprocessor (142 gave 3: ncu, 16 x 1000
// frames, 18 % occupancy, latency-bound).
extern "C" __global__ void __launch_bounds__(THREADS, 4) flow_attention_bf16(
        const u16* __restrict__ qkv, const float* __restrict__ bias, u16* __restrict__ out,
        int t, int h) {
    attention<true>(qkv, bias, out, t, h);
}

extern "C" __global__ void __launch_bounds__(THREADS, 4) flow_attention_f16(
        const u16* __restrict__ qkv, const float* __restrict__ bias, u16* __restrict__ out,
        int t, int h) {
    attention<false>(qkv, bias, out, t, h);
}
