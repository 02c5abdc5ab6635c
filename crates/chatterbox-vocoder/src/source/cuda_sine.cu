// f0: (B, T); one thread per (b, h) row: step[b, h, t] = f0 (h + 1) / sr (f32, as candle's
// broadcast mul and div), widened to f64; start[b, h, t] = sum over earlier frames of
// step * upsample, in f64 (exact: the phase never needs more than f64's 53 bits here).
extern "C" __global__ void hift_sine_start(const float* f0, double* step, double* start,
        unsigned int rows, unsigned int h, unsigned int t, unsigned int upsample, float sr) {
    unsigned int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    unsigned int b = row / h, k = row - b * h;
    const float mult = (float)(k + 1);
    double acc = 0.0;
    for (unsigned int i = 0; i < t; ++i) {
        float s = __fdiv_rn(__fmul_rn(f0[(unsigned long long)b * t + i], mult), sr);
        double d = (double)s;
        unsigned long long at = (unsigned long long)row * t + i;
        step[at] = d;
        start[at] = acc;
        acc = __dadd_rn(acc, __dmul_rn(d, (double)upsample));
    }
}

// out[b, k, i u + r] = sine_amp sin(2 pi frac(f32(start + step (r + 1))) + phase[b, k]) uv
//                      + noise[b, k, i u + r] (uv ? noise_std : sine_amp / 3),
// phase 0 for the fundamental, uv = f0[b, i] > threshold.
extern "C" __global__ void hift_sine(const float* f0, const double* step, const double* start,
        const float* phase, const float* noise, float* out, unsigned long long n,
        unsigned int h, unsigned int t, unsigned int upsample, float two_pi, float sine_amp,
        float noise_std, float unvoiced_amp, float threshold) {
    for (unsigned long long j = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         j < n; j += (unsigned long long)blockDim.x * gridDim.x) {
        unsigned long long frame = j / upsample;
        unsigned int r = (unsigned int)(j - frame * upsample);
        unsigned long long row = frame / t;
        unsigned int i = (unsigned int)(frame - row * t);
        unsigned int b = (unsigned int)(row / h), k = (unsigned int)(row - (unsigned long long)b * h);
        float total = (float)__dadd_rn(__dmul_rn(step[frame], (double)(r + 1)), start[frame]);
        float cyc = __fsub_rn(total, floorf(total));
        float ph = k == 0 ? 0.0f : phase[(unsigned long long)b * h + k];
        float s = __fmul_rn(sinf(__fadd_rn(__fmul_rn(cyc, two_pi), ph)), sine_amp);
        float f = f0[(unsigned long long)b * t + i];
        float uv = f > threshold ? 1.0f : 0.0f;
        float amp = f > threshold ? noise_std : unvoiced_amp;
        out[j] = __fadd_rn(__fmul_rn(s, uv), __fmul_rn(noise[j], amp));
    }
}
