// bf16 as raw 16-bit patterns: no CUDA headers needed at run time.
__device__ __forceinline__ float bf(unsigned short v) { return __uint_as_float(((unsigned int)v) << 16); }
__device__ __forceinline__ unsigned short to_bf(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u); // NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                               // nearest even
    return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float dot8(uint4 a, uint4 b) {
    const unsigned int* p = reinterpret_cast<const unsigned int*>(&a);
    const unsigned int* q = reinterpret_cast<const unsigned int*>(&b);
    float s = 0.0f;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        s += __uint_as_float(p[i] << 16) * __uint_as_float(q[i] << 16);
        s += __uint_as_float(p[i] & 0xffff0000u) * __uint_as_float(q[i] & 0xffff0000u);
    }
    return s;
}
// y[r, n] = bf16(sum_k x[r, k] * w[n, k] + bias[n]) for r < rows (<= 2); one warp per n.
extern "C" __global__ void t3_gemv_bf16(const unsigned short* x, const unsigned short* w,
        const unsigned short* bias, unsigned short* y, unsigned int rows, unsigned int n,
        unsigned int k, int has_bias) {
    unsigned int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    unsigned int lane = threadIdx.x % 32;
    if (warp >= n) return;
    const uint4* wr = reinterpret_cast<const uint4*>(w + (unsigned long long)warp * k);
    const uint4* x0 = reinterpret_cast<const uint4*>(x);
    const uint4* x1 = reinterpret_cast<const uint4*>(x + k);
    float acc0 = 0.0f, acc1 = 0.0f;
    for (unsigned int c = lane; c < k / 8; c += 32) {
        uint4 wv = wr[c];
        acc0 += dot8(wv, x0[c]);
        if (rows > 1) acc1 += dot8(wv, x1[c]);
    }
    #pragma unroll
    for (int off = 16; off > 0; off /= 2) {
        acc0 += __shfl_xor_sync(0xffffffffu, acc0, off);
        acc1 += __shfl_xor_sync(0xffffffffu, acc1, off);
    }
    if (lane == 0) {
        float b = has_bias ? bf(bias[warp]) : 0.0f;
        y[warp] = to_bf(acc0 + b);
        if (rows > 1) y[n + warp] = to_bf(acc1 + b);
    }
}
