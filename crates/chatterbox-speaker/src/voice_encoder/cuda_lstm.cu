__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// xp f32 [B, T, 4H] (x W_ihᵀ + b_ih + b_hh), w f32 [H, 4H] (W_hhᵀ), gate order i, f, g, o.
// out f32 [B, T, H] (every hidden state, `all`) or [B, H] (the last). One block of 4H threads
// per sequence; shared memory: h [H], gates [4H].
extern "C" __global__ void ve_lstm_layer(const float* __restrict__ xp,
        const float* __restrict__ w, float* __restrict__ out, unsigned int steps,
        unsigned int hidden, int all) {
    extern __shared__ float sm[];
    float* h = sm;
    float* gates = sm + hidden;
    unsigned int b = blockIdx.x, j = threadIdx.x, g4 = 4 * hidden;
    float c = 0.0f;
    if (j < hidden) h[j] = 0.0f;
    __syncthreads();
    const float* xb = xp + (unsigned long long)b * steps * g4;
    for (unsigned int s = 0; s < steps; s++) {
        float acc = xb[(unsigned long long)s * g4 + j];
        if (s > 0) {
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
            unsigned int k = 0;
            for (; k + 4 <= hidden; k += 4) {
                a0 += h[k] * __ldg(w + (unsigned long long)k * g4 + j);
                a1 += h[k + 1] * __ldg(w + (unsigned long long)(k + 1) * g4 + j);
                a2 += h[k + 2] * __ldg(w + (unsigned long long)(k + 2) * g4 + j);
                a3 += h[k + 3] * __ldg(w + (unsigned long long)(k + 3) * g4 + j);
            }
            for (; k < hidden; k++) a0 += h[k] * __ldg(w + (unsigned long long)k * g4 + j);
            acc += (a0 + a1) + (a2 + a3);
        }
        gates[j] = acc;
        __syncthreads();
        if (j < hidden) {
            float i = sigmoid(gates[j]);
            float f = sigmoid(gates[hidden + j]);
            float g = tanhf(gates[2 * hidden + j]);
            float o = sigmoid(gates[3 * hidden + j]);
            c = f * c + i * g;
            float hn = o * tanhf(c);
            h[j] = hn;
            if (all) out[((unsigned long long)b * steps + s) * hidden + j] = hn;
            else if (s + 1 == steps) out[(unsigned long long)b * hidden + j] = hn;
        }
        __syncthreads();
    }
}
