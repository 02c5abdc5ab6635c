// The convolution columns of x (n, t, c): out (n, t_out, k c), where tap j of output frame s
// holds (x[s - pad_left + j] + add[row]) * mask[s - pad_left + j], zeros outside 0..t; `add`
// is (1 or n, c) (add_rows), `add` and `mask` may be null. One block per output frame, V
// channels per thread.
template <typename T, int V>
__device__ void columns(T* out, const T* x, const T* add, const T* mask, unsigned int t,
                        unsigned int t_out, unsigned int c, unsigned int k, unsigned int pad_left,
                        unsigned int add_rows) {
    unsigned int row = blockIdx.x;
    unsigned int b = row / t_out, s = row - b * t_out;
    unsigned int kc = k * c;
    const T* a = add ? add + (unsigned long long)(add_rows == 1 ? 0 : b) * c : add;
    for (unsigned int col = threadIdx.x * V; col < kc; col += blockDim.x * V) {
        unsigned int j = col / c, ch = col - j * c;
        int src = (int)s + (int)j - (int)pad_left;
        float v[V];
        if (src >= 0 && src < (int)t) {
            unsigned long long f = (unsigned long long)b * t + (unsigned int)src;
            load<T, V>(x, f * c + ch, v);
            float m = mask ? ld(mask, f) : 1.0f;
            for (int q = 0; q < V; q++) v[q] = (a ? v[q] + ld(a, ch + q) : v[q]) * m;
        } else {
            for (int q = 0; q < V; q++) v[q] = 0.0f;
        }
        store<T, V>(out, (unsigned long long)row * kc + col, v);
    }
}

#define KERNELS(T, S) \
extern "C" __global__ void flow_columns_##S(T* o, const T* x, const T* a, const T* m, \
        unsigned int t, unsigned int t_out, unsigned int c, unsigned int k, unsigned int pl, \
        unsigned int ar) { columns<T, 1>(o, x, a, m, t, t_out, c, k, pl, ar); } \
extern "C" __global__ void flow_columns16_##S(T* o, const T* x, const T* a, const T* m, \
        unsigned int t, unsigned int t_out, unsigned int c, unsigned int k, unsigned int pl, \
        unsigned int ar) { columns<T, 16 / sizeof(T)>(o, x, a, m, t, t_out, c, k, pl, ar); }

KERNELS(float, f32)
KERNELS(bf16, bf16)
KERNELS(f16, f16)
