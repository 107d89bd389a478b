// Llama-style extras the CPU forward (tf_models::llama) applies between projections: projection
// biases (qwen2 q/k/v, some llama o and MLP) and the per-head q/k RMSNorm (qwen3). Launched as
// separate kernels, only for models that have them, with the CPU's arithmetic and order:
//   bias:          y = s + b                (s = the stored projection output, one rounding)
//   bias+residual: x = x + (s + b)          (the CPU adds the bias to o, then o to x)
//   head norm:     per head of head_dim: r = 1 / sqrt(dot(h, h) / head_dim + eps) with the
//                  dot in the 16-lane order, then h = g * (h * r) (as tf_kernels rms_norm).

// y[i, j] = y[i, j] + b[j] for the first n rows of `width` elements.
// PLANT = 1 is a planted control: the last column gets no bias.
template <int PLANT>
__device__ __forceinline__ void tf_bias_rows_impl(float* y, const float* b, int n, int width) {
    const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)n * width) return;
    const int j = (int)(t % (size_t)width);
    if (PLANT == 1 && j == width - 1) return;
    y[t] = y[t] + b[j];
}

extern "C" __global__ void tf_bias_rows(float* y, const float* b, int n, int width) {
    tf_follow();
    tf_bias_rows_impl<0>(y, b, n, width);
}

extern "C" __global__ void tf_plant_bias_rows_skip_last(float* y, const float* b, int n,
                                                        int width) {
    tf_follow();
    tf_bias_rows_impl<1>(y, b, n, width);
}

// x[i, j] = x[i, j] + (s[i, j] + b[j]) for the first n rows of `width` elements.
// PLANT = 1 is a planted control: (x + s) + b, the order of a fused residual epilogue followed
// by a bias add (close in value, different in bits).
template <int PLANT>
__device__ __forceinline__ void tf_bias_residual_impl(float* x, const float* s, const float* b,
                                                      int n, int width) {
    const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)n * width) return;
    const int j = (int)(t % (size_t)width);
    if (PLANT == 1)
        x[t] = (x[t] + s[t]) + b[j];
    else
        x[t] = x[t] + (s[t] + b[j]);
}

extern "C" __global__ void tf_bias_residual(float* x, const float* s, const float* b, int n,
                                            int width) {
    tf_follow();
    tf_bias_residual_impl<0>(x, s, b, n, width);
}

extern "C" __global__ void tf_plant_bias_residual_reordered(float* x, const float* s,
                                                            const float* b, int n, int width) {
    tf_follow();
    tf_bias_residual_impl<1>(x, s, b, n, width);
}

// In-place RMSNorm of every head of a run of `heads` heads in each row: head h of row i is the
// head_dim elements at x[i * row_stride + offset + h * head_dim]; gain g is [head_dim]. One warp
// (blockDim.x == 32) per (row, head), block index i * heads + h.
// PLANT = 1 is a planted control: the sum of squares skips the head's last element.
template <int PLANT>
__device__ __forceinline__ void tf_head_rms_norm_impl(float* x, const float* g, int heads,
                                                      int head_dim, int row_stride, int offset,
                                                      float eps) {
    const int i = blockIdx.x / heads;
    const int h = blockIdx.x % heads;
    float* hx = x + (size_t)i * row_stride + offset + (size_t)h * head_dim;
    const int lane = threadIdx.x;
    const int end = PLANT == 1 ? head_dim - 1 : head_dim;
    float acc = 0.0f;
    if (lane < 16)
        for (int k = lane; k < end; k += 16) acc = fmaf(hx[k], hx[k], acc);
    const float ss = tf_fold16_sum(acc);
    float r = 0.0f;
    if (lane == 0) r = tf_inv_rms(ss, head_dim, eps);
    r = __shfl_sync(TF_FULL_MASK, r, 0);
    __syncwarp();
    for (int k = lane; k < head_dim; k += 32) hx[k] = g[k] * (hx[k] * r);
}

extern "C" __global__ void tf_head_rms_norm(float* x, const float* g, int heads, int head_dim,
                                            int row_stride, int offset, float eps) {
    tf_follow();
    tf_head_rms_norm_impl<0>(x, g, heads, head_dim, row_stride, offset, eps);
}

extern "C" __global__ void tf_plant_head_rms_norm_short(float* x, const float* g, int heads,
                                                        int head_dim, int row_stride, int offset,
                                                        float eps) {
    tf_follow();
    tf_head_rms_norm_impl<1>(x, g, heads, head_dim, row_stride, offset, eps);
}
