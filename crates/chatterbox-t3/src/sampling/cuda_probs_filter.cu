#define THREADS 1024
#define NEG_INF __int_as_float(0xff800000)
__device__ float block_reduce(float v, float* red, bool is_max) {
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, u) : v + u;
    }
    unsigned int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) red[w] = v;
    __syncthreads();
    float t = red[l];
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, t, o);
        t = is_max ? fmaxf(t, u) : t + u;
    }
    return t;
}
// y[r, i] = x[r, i] when p[r, i] = softmax(x[r])[i] is kept, else -inf.
// mode 0 (min-p): kept when p >= max(p) * param; mode 1: kept when p > 0.
extern "C" __global__ void t3_probs_filter(const float* __restrict__ x, float* __restrict__ y,
        unsigned int cols, int mode, float param) {
    __shared__ float red[32];
    const float* xr = x + (unsigned long long)blockIdx.x * cols;
    float* yr = y + (unsigned long long)blockIdx.x * cols;
    float mx = NEG_INF;
    for (unsigned int i = threadIdx.x; i < cols; i += THREADS) mx = fmaxf(mx, xr[i]);
    mx = block_reduce(mx, red, true);
    float sum = 0.0f;
    for (unsigned int i = threadIdx.x; i < cols; i += THREADS) sum += expf(xr[i] - mx);
    sum = block_reduce(sum, red, false);
    float inv = 1.0f / sum;
    float thr = mode == 0 ? inv * param : 0.0f;
    for (unsigned int i = threadIdx.x; i < cols; i += THREADS) {
        float v = xr[i];
        float p = expf(v - mx) * inv;
        bool keep = mode == 0 ? !(p < thr) : p > 0.0f;
        yr[i] = keep ? v : NEG_INF;
    }
}
