#define THREADS 1024
#define PER 8
// -inf without CUDA headers at run time
#define NEG_INF __int_as_float(0xff800000)
// order-preserving key of a float: a < b  <=>  key(a) < key(b) (NaN aside)
__device__ __forceinline__ unsigned int okey(float f) {
    unsigned int u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// Block-wide reduction over 32 warps (blocks of 1024 threads), in a fixed order; every
// thread gets the result.
struct Sum { __device__ float operator()(float a, float b) const { return a + b; } };
struct Max { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct MinU {
    __device__ unsigned int operator()(unsigned int a, unsigned int b) const { return min(a, b); }
};
template <typename T, typename Op>
__device__ T block_reduce(T x, T* red, Op op) {
    for (int o = 16; o > 0; o >>= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, o));
    unsigned int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) red[w] = x;
    __syncthreads();
    if (w == 0) {
        T t = red[l];
        for (int o = 16; o > 0; o >>= 1) t = op(t, __shfl_xor_sync(0xffffffffu, t, o));
        if (l == 0) red[32] = t;
    }
    __syncthreads();
    return red[32];
}
// out = scores with every token outside top-k-then-top-p set to -inf; one block per row.
extern "C" __global__ void t3_top_k_top_p(const float* scores, float* out, unsigned int v,
        unsigned int k, float thr) {
    __shared__ unsigned int hist[256];
    __shared__ float red[33];
    __shared__ unsigned int ured[33];
    __shared__ unsigned int sel[2];
    const float* row = scores + (unsigned long long)blockIdx.x * v;
    float* orow = out + (unsigned long long)blockIdx.x * v;
    const unsigned int tid = threadIdx.x;
    unsigned int key[PER];
    float val[PER];
    #pragma unroll
    for (int j = 0; j < PER; j++) {
        unsigned int i = tid + j * THREADS;
        val[j] = i < v ? row[i] : NEG_INF;
        key[j] = i < v ? okey(val[j]) : 0u;
    }
    // 1. the key of the k-th largest score: radix select, 8 bits at a time from the top
    unsigned int prefix = 0u, mask = 0u, left = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        if (tid < 256) hist[tid] = 0u;
        __syncthreads();
        #pragma unroll
        for (int j = 0; j < PER; j++) {
            if (tid + j * THREADS < v && (key[j] & mask) == prefix)
                atomicAdd(&hist[(key[j] >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            unsigned int acc = 0u;
            int d = 255;
            for (; d > 0; d--) {
                if (acc + hist[d] >= left) break;
                acc += hist[d];
            }
            sel[0] = prefix | ((unsigned int)d << shift);
            sel[1] = left - acc;
        }
        __syncthreads();
        prefix = sel[0];
        left = sel[1];
        mask |= 255u << shift;
    }
    const unsigned int kth = prefix;
    // 2. softmax over the top-k (the rest is -inf: probability 0)
    float m = NEG_INF;
    #pragma unroll
    for (int j = 0; j < PER; j++) if (key[j] >= kth) m = fmaxf(m, val[j]);
    m = block_reduce(m, red, Max());
    float p[PER];
    float z = 0.0f;
    #pragma unroll
    for (int j = 0; j < PER; j++) {
        p[j] = (tid + j * THREADS < v && key[j] >= kth) ? expf(val[j] - m) : 0.0f;
        z += p[j];
    }
    z = block_reduce(z, red, Sum());
    #pragma unroll
    for (int j = 0; j < PER; j++) p[j] = p[j] / z;
    // 3. the largest key x whose mass at or below it is at most thr
    unsigned int x = 0u;
    for (int b = 31; b >= 0; b--) {
        unsigned int c = x | (1u << b);
        float s = 0.0f;
        #pragma unroll
        for (int j = 0; j < PER; j++) if (key[j] <= c) s += p[j];
        s = block_reduce(s, red, Sum());
        if (s <= thr) x = c;
    }
    // 4. the smallest kept key above x (the top score if none: always keep one token)
    unsigned int kept = 0xffffffffu;
    #pragma unroll
    for (int j = 0; j < PER; j++)
        if (tid + j * THREADS < v && key[j] >= kth && key[j] > x) kept = min(kept, key[j]);
    kept = block_reduce(kept, ured, MinU());
    if (kept == 0xffffffffu) kept = okey(m);
    #pragma unroll
    for (int j = 0; j < PER; j++) {
        unsigned int i = tid + j * THREADS;
        if (i < v) orow[i] = key[j] >= kept ? val[j] : NEG_INF;
    }
}
