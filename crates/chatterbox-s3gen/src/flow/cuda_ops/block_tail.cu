// y = mish(LayerNorm(y + bias)) * mask over rows of c, in place (`mask` (rows,) or null);
// y + bias and the norm are rounded to T as the separate ops round. One warp per row.
template <typename T>
__device__ void block_tail(T* y, const T* bias, const T* w, const T* nb, const T* mask,
                           unsigned int rows, unsigned int c, float eps) {
    unsigned int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    unsigned int lane = threadIdx.x & 31;
    if (row >= rows) return;
    T* r = y + (unsigned long long)row * c;
    float sum = 0.0f;
    for (unsigned int i = lane; i < c; i += 32) sum += rnd(ld(r, i) + ld(bias, i), r);
    float mean = warp_sum(sum) / (float)c;
    float sq = 0.0f;
    for (unsigned int i = lane; i < c; i += 32) {
        float d = rnd(ld(r, i) + ld(bias, i), r) - mean;
        sq += d * d;
    }
    float inv = rsqrtf(warp_sum(sq) / (float)c + eps);
    float m = mask ? ld(mask, row) : 1.0f;
    for (unsigned int i = lane; i < c; i += 32) {
        float v = rnd(ld(r, i) + ld(bias, i), r);
        float z = rnd((v - mean) * inv * ld(w, i) + ld(nb, i), r);
        st(r, i, rnd(z * tanhf(log1pf(expf(z))), r) * m);
    }
}

#define KERNELS(T, S) \
extern "C" __global__ void flow_block_tail_##S(T* y, const T* b, const T* w, const T* nb, \
        const T* m, unsigned int rows, unsigned int c, float eps) { \
    block_tail(y, b, w, nb, m, rows, c, eps); }

KERNELS(float, f32)
KERNELS(bf16, bf16)
KERNELS(f16, f16)
