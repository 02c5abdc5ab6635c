// col[b, c * k + j, t] = x[b, c, t * stride + j * dilation - padding] (0 outside): the input
// of a convolution unrolled so that `W (C_out, C_in * K) @ col (C_in * K, T_out)` is the
// output in channels-first layout. One row of `col` per `blockIdx.y` step, threads along `t`:
// writes coalesce (reads too at stride 1) and no thread divides.
extern "C" __global__ void hift_im2col_cf_f32(const float* x, float* col, unsigned int c_in,
        unsigned int k, unsigned int len_in, unsigned int len_out, unsigned int dilation,
        unsigned int padding, unsigned int rows, unsigned int stride) {
    for (unsigned int row = blockIdx.y; row < rows; row += gridDim.y) {
        unsigned int j = row % k;
        const float* src = x + (unsigned long long)(row / k) * len_in;
        float* dst = col + (unsigned long long)row * len_out;
        long long shift = (long long)j * dilation - (long long)padding;
        for (unsigned int t = blockIdx.x * blockDim.x + threadIdx.x; t < len_out;
             t += blockDim.x * gridDim.x) {
            long long s = (long long)t * stride + shift;
            dst[t] = (s >= 0 && s < (long long)len_in) ? src[s] : 0.0f;
        }
    }
}
