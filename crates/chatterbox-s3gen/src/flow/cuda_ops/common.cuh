// Shared by the flow's element-wise kernels: each .cu of this folder is compiled after it.
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

