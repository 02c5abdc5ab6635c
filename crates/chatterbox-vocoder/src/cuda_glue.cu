// One signature for every kernel: inputs x, p, q; output y of n values; five sizes; a scalar.
#define LOOP for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
    i < n; i += (unsigned long long)blockDim.x * gridDim.x)

// Per channel of x (B, channels, len): y = x + inv_alpha sin(alpha x)^2 (p = alpha, q =
// inv_alpha), with explicit roundings (no multiply-add contraction, as candle's separate ops).
extern "C" __global__ void hift_snake(const float* x, const float* p, const float* q,
        float* y, unsigned long long n, unsigned int channels, unsigned int len,
        unsigned int c, unsigned int d, unsigned int e, float unused) {
    LOOP {
        unsigned int ch = (unsigned int)((i / len) % channels);
        float v = x[i];
        float s = sinf(__fmul_rn(v, p[ch]));
        y[i] = __fadd_rn(v, __fmul_rn(__fmul_rn(s, s), q[ch]));
    }
}

// Per channel of x (B, channels, len): y = x + bias (p), then + residual (q, x's shape) when
// `has_residual`.
extern "C" __global__ void hift_bias_residual(const float* x, const float* p, const float* q,
        float* y, unsigned long long n, unsigned int channels, unsigned int len,
        unsigned int has_residual, unsigned int d, unsigned int e, float unused) {
    LOOP {
        unsigned int ch = (unsigned int)((i / len) % channels);
        float v = x[i] + p[ch];
        y[i] = has_residual ? v + q[i] : v;
    }
}

// y = x > 0 ? x : x * slope (candle's max(x, 0) + slope * min(x, 0), value for value).
extern "C" __global__ void hift_leaky_relu(const float* x, const float* p, const float* q,
        float* y, unsigned long long n, unsigned int a, unsigned int b, unsigned int c,
        unsigned int d, unsigned int e, float slope) {
    LOOP {
        float v = x[i];
        y[i] = v > 0.0f ? v : __fmul_rn(v, slope);
    }
}

// x: (B, C, len) transposed-convolution output; p: C biases; q: (B, C, t_out) source branch.
// y[b, c, t] = (x[b, c, pad + s] + p[c]) + q[b, c, t], where s = t, or with the reflection pad
// of one step (`reflect`) s = 1 for t = 0 and t - 1 after.
extern "C" __global__ void hift_ups_sum(const float* x, const float* p, const float* q,
        float* y, unsigned long long n, unsigned int channels, unsigned int len,
        unsigned int t_out, unsigned int pad, unsigned int reflect, float unused) {
    LOOP {
        unsigned long long row = i / t_out;
        unsigned int t = (unsigned int)(i - row * t_out);
        unsigned int c = (unsigned int)(row % channels);
        unsigned int s = reflect ? (t == 0 ? 1 : t - 1) : t;
        float v = __fadd_rn(x[row * len + pad + s], p[c]);
        y[i] = __fadd_rn(v, q[i]);
    }
}

// y = ((x + p) + q) / div over the first `count` of x, p, q (HiFT's sum of its resblocks,
// then the division by their number, as the reference's separate ops).
extern "C" __global__ void hift_sum_div(const float* x, const float* p, const float* q,
        float* y, unsigned long long n, unsigned int count, unsigned int b, unsigned int c,
        unsigned int d, unsigned int e, float div) {
    LOOP {
        float v = x[i];
        if (count > 1) v = __fadd_rn(v, p[i]);
        if (count > 2) v = __fadd_rn(v, q[i]);
        y[i] = __fdiv_rn(v, div);
    }
}

// x: (B, 2 bins, T) conv_post output; y: (B, 2 bins, T) as [real; imag] of the spectrum
// min(exp(x[:bins]), 100) * (cos, sin)(sin(x[bins:])); n = B * bins * T.
extern "C" __global__ void hift_spectrum(const float* x, const float* p, const float* q,
        float* y, unsigned long long n, unsigned int bins, unsigned int t,
        unsigned int c, unsigned int d, unsigned int e, float unused) {
    LOOP {
        unsigned long long row = i / t;
        unsigned int k = (unsigned int)(i - row * t);
        unsigned long long b = row / bins;
        unsigned int j = (unsigned int)(row - b * bins);
        unsigned long long re = (b * 2 * bins + j) * t + k, im = re + (unsigned long long)bins * t;
        float m = expf(x[re]);
        m = m < 100.0f ? m : 100.0f;
        float ph = sinf(x[im]);
        y[re] = __fmul_rn(m, cosf(ph));
        y[im] = __fmul_rn(m, sinf(ph));
    }
}
