// y[b, t, c] = x[b, t, c] + sum_k w[k, c] * x[b, t + k - left, c] (zero outside 0..frames)
extern "C" __global__ void s3tok_fsmn_f32(const float* x, const float* w, float* y,
        unsigned int frames, unsigned int channels, unsigned int taps, unsigned int left,
        unsigned long long total) {
    unsigned long long idx = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return;
    unsigned int c = (unsigned int)(idx % channels);
    unsigned long long row = idx / channels;
    int t = (int)(row % frames);
    const float* xb = x + (row - (unsigned long long)t) * channels;
    float acc = 0.0f;
    for (unsigned int k = 0; k < taps; k++) {
        int s = t + (int)k - (int)left;
        if (s >= 0 && s < (int)frames) acc += w[k * channels + c] * xb[(unsigned long long)s * channels + c];
    }
    y[idx] = acc + x[idx];
}
