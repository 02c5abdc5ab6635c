#define NEG_INF __int_as_float(0xff800000)
// bf16 as raw 16-bit patterns: no CUDA headers needed at run time.
__device__ __forceinline__ float bf(unsigned short v) { return __uint_as_float(((unsigned int)v) << 16); }
__device__ __forceinline__ unsigned short to_bf(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u); // NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                               // nearest even
    return (unsigned short)(u >> 16);
}
__device__ float block_reduce(float v, float* red, bool is_max) {
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, u) : v + u;
    }
    unsigned int w = threadIdx.x >> 5, l = threadIdx.x & 31, warps = blockDim.x >> 5;
    __syncthreads();
    if (l == 0) red[w] = v;
    __syncthreads();
    float t = l < warps ? red[l] : (is_max ? NEG_INF : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, t, o);
        t = is_max ? fmaxf(t, u) : t + u;
    }
    return t;
}
// Row r of the scores x [rows, n] is query position (r % t) of a prefill at positions
// offset..offset + t: y[r, j] = softmax_j(x[r, j] * scale) over j <= offset + r % t, 0 after.
extern "C" __global__ void t3_causal_softmax_bf16(const unsigned short* __restrict__ x,
        unsigned short* __restrict__ y, unsigned int t, unsigned int n, unsigned int offset,
        float scale) {
    __shared__ float red[32];
    const unsigned long long row = blockIdx.x;
    const unsigned short* xr = x + row * n;
    unsigned short* yr = y + row * n;
    unsigned int valid = offset + (unsigned int)(row % t) + 1;
    if (valid > n) valid = n;
    float mx = NEG_INF;
    for (unsigned int j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, bf(xr[j]) * scale);
    mx = block_reduce(mx, red, true);
    float sum = 0.0f;
    for (unsigned int j = threadIdx.x; j < valid; j += blockDim.x) sum += expf(bf(xr[j]) * scale - mx);
    sum = block_reduce(sum, red, false);
    for (unsigned int j = threadIdx.x; j < n; j += blockDim.x)
        yr[j] = j < valid ? to_bf(expf(bf(xr[j]) * scale - mx) / sum) : (unsigned short)0;
}
// y [rows, i] = bf16(bf16(silu(g)) * u) for gu [rows, 2 i] = [g | u].
extern "C" __global__ void t3_silu_mul_bf16(const unsigned short* __restrict__ gu,
        unsigned short* __restrict__ y, unsigned int i, unsigned long long total) {
    for (unsigned long long k = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; k < total;
         k += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long r = k / i, c = k % i;
        float g = bf(gu[r * 2 * i + c]);
        float u = bf(gu[r * 2 * i + i + c]);
        float s = bf(to_bf(g / (1.0f + expf(-g))));
        y[k] = to_bf(s * u);
    }
}
// y [rows, n] = bf16(x + b) for x [rows, n], b [n].
extern "C" __global__ void t3_bias_add_bf16(const unsigned short* __restrict__ x,
        const unsigned short* __restrict__ b, unsigned short* __restrict__ y, unsigned int n,
        unsigned long long total) {
    for (unsigned long long k = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; k < total;
         k += (unsigned long long)gridDim.x * blockDim.x)
        y[k] = to_bf(bf(x[k]) + bf(b[k % n]));
}
