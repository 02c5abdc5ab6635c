// The bias kernels take V values per step (16-byte vectors when V > 1: the caller checks
// that rows of `cols` hold whole vectors and that the operands start aligned).

// y = gelu_erf(y + bias[col]) (exact GELU, as F.gelu(approximate="none"))
template <typename T, int V>
__device__ void bias_gelu(T* y, const T* bias, unsigned int cols, unsigned long long n) {
    GRID_LOOP(i, n / V) {
        unsigned long long e = i * V;
        unsigned int col = col_of(e, cols, n);
        float v[V];
        load<T, V>(y, e, v);
        for (int q = 0; q < V; q++) {
            float x = v[q] + ld(bias, col + q);
            v[q] = 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
        }
        store<T, V>(y, e, v);
    }
}

// y = y + bias[col] + residual
template <typename T, int V>
__device__ void bias_residual(T* y, const T* bias, const T* res, unsigned int cols,
                              unsigned long long n) {
    GRID_LOOP(i, n / V) {
        unsigned long long e = i * V;
        unsigned int col = col_of(e, cols, n);
        float v[V], r[V];
        load<T, V>(y, e, v);
        load<T, V>(res, e, r);
        for (int q = 0; q < V; q++) v[q] = (v[q] + ld(bias, col + q)) + r[q];
        store<T, V>(y, e, v);
    }
}

// y = y + bias[col]
template <typename T, int V>
__device__ void bias_add(T* y, const T* bias, unsigned int cols, unsigned long long n) {
    GRID_LOOP(i, n / V) {
        unsigned long long e = i * V;
        unsigned int col = col_of(e, cols, n);
        float v[V];
        load<T, V>(y, e, v);
        for (int q = 0; q < V; q++) v[q] += ld(bias, col + q);
        store<T, V>(y, e, v);
    }
}

// y = y * tanh(log1p(exp(y))) (torch.nn.Mish)
template <typename T>
__device__ void mish(T* y, unsigned long long n) {
    GRID_LOOP(i, n) {
        float v = ld(y, i);
        st(y, i, v * tanhf(log1pf(expf(v))));
    }
}

#define BIAS_KERNELS(T, S, V, VS) \
extern "C" __global__ void flow_bias_gelu##VS##_##S(T* y, const T* b, unsigned int cols, \
        unsigned long long n) { bias_gelu<T, V>(y, b, cols, n); } \
extern "C" __global__ void flow_bias_residual##VS##_##S(T* y, const T* b, const T* r, \
        unsigned int cols, unsigned long long n) { bias_residual<T, V>(y, b, r, cols, n); } \
extern "C" __global__ void flow_bias_add##VS##_##S(T* y, const T* b, unsigned int cols, \
        unsigned long long n) { bias_add<T, V>(y, b, cols, n); }

#define KERNELS(T, S) \
BIAS_KERNELS(T, S, 1, ) \
BIAS_KERNELS(T, S, 16 / sizeof(T), 16) \
extern "C" __global__ void flow_mish_##S(T* y, unsigned long long n) { mish(y, n); }

KERNELS(float, f32)
KERNELS(bf16, bf16)
KERNELS(f16, f16)
