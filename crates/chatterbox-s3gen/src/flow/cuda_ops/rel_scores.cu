// Relative-position attention scores, in place over ac (rows of t; row r is query i = r % t of
// its (batch, head), h heads a batch): ac = (ac + bd[r][t - 1 - i + j]) * scale, each step
// rounded to T as candle's add and affine round, then + key_bias[batch][j] when key_bias
// (batch, t) is given (0 or -inf: exact in T).
template <typename T>
__device__ void rel_scores(T* ac, const T* bd, const T* key_bias, unsigned int t, unsigned int h,
                           float scale, unsigned long long n) {
    unsigned long long p = 2ull * t - 1;
    GRID_LOOP(k, n) {
        unsigned long long r = k / t;
        unsigned int j = (unsigned int)(k - r * t), i = (unsigned int)(r % t);
        float v = rnd(ld(ac, k) + ld(bd, r * p + (t - 1 - i + j)), ac);
        v = rnd(v * scale, ac);
        if (key_bias) v += ld(key_bias, (r / ((unsigned long long)h * t)) * t + j);
        st(ac, k, v);
    }
}

#define KERNELS(T, S) \
extern "C" __global__ void flow_rel_scores_##S(T* ac, const T* bd, const T* kb, unsigned int t, \
        unsigned int h, float scale, unsigned long long n) { \
    rel_scores(ac, bd, kb, t, h, scale, n); }

KERNELS(float, f32)
KERNELS(bf16, bf16)
KERNELS(f16, f16)
