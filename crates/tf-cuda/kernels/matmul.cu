// Matrix products over packed weights: y[i, j] = sum_k x[i, k] * W[j, k].
//
// One half-warp (16 lanes) owns one weight row j. Lane l accumulates the elements k = l (mod 16)
// in ascending k with fmaf into one accumulator per activation row, then the 16 lanes are folded
// by the fixed tree: the CPU's canonical arithmetic (tf_kernels matmul::kernel), so each (i, j)
// has the same bits whatever n is, whichever tile the row falls in, and on the CPU. Activation
// rows are taken MM_RT at a time; the tile only groups independent sums, it never changes one.

#define MM_RT 4

// PLANT = 1 is a planted control: when n > 1 each lane walks its blocks in descending order, so
// the reduction order depends on the row count (the contract suite must catch it). (Rotating
// which lane takes which elements is NOT such a control: the fold tree gives the same sum.)
template <int FMT, int PLANT>
__device__ __forceinline__ void tf_matmul(const u8* __restrict__ W, const float* __restrict__ x,
                                          float* __restrict__ y, int n, int rows, int cols) {
    const int lane = threadIdx.x & 15;
    const int j = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 4);
    const bool active = j < rows;
    const int el = lane;
    const bool reverse = PLANT == 1 && n > 1;
    const u8* row = W + (size_t)(active ? j : 0) * tf_row_bytes(FMT, cols);
    for (int i0 = 0; i0 < n; i0 += MM_RT) {
        float acc[MM_RT];
#pragma unroll
        for (int r = 0; r < MM_RT; r++) acc[r] = 0.0f;
        const float* xr = x + (size_t)i0 * cols;
        if (active) {
            if (FMT >= FMT_Q4_0) {
                const int nb = cols >> 5;
#pragma unroll 2
                for (int bi = 0; bi < nb; bi++) {
                    const int b = reverse ? nb - 1 - bi : bi;
                    const int k0 = (b << 5) + el;
                    const float w0 = tf_decode<FMT>(row, k0);
                    const float w1 = tf_decode<FMT>(row, k0 + 16);
#pragma unroll
                    for (int r = 0; r < MM_RT; r++) {
                        if (i0 + r < n) {
                            acc[r] = fmaf(xr[(size_t)r * cols + k0], w0, acc[r]);
                            acc[r] = fmaf(xr[(size_t)r * cols + k0 + 16], w1, acc[r]);
                        }
                    }
                }
            } else {
                for (int k = el; k < cols; k += 16) {
                    const float w = tf_decode<FMT>(row, k);
#pragma unroll
                    for (int r = 0; r < MM_RT; r++)
                        if (i0 + r < n) acc[r] = fmaf(xr[(size_t)r * cols + k], w, acc[r]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < MM_RT; r++) {
            const float s = tf_fold16_sum(acc[r]);
            if (active && lane == 0 && i0 + r < n) y[(size_t)(i0 + r) * rows + j] = s;
        }
    }
}

#define TF_MATMUL_ENTRY(NAME, FMT, PLANT)                                                     \
    extern "C" __global__ void NAME(const u8* W, const float* x, float* y, int n, int rows,  \
                                    int cols) {                                               \
        tf_matmul<FMT, PLANT>(W, x, y, n, rows, cols);                                        \
    }

TF_MATMUL_ENTRY(tf_matmul_f32, FMT_F32, 0)
TF_MATMUL_ENTRY(tf_matmul_f16, FMT_F16, 0)
TF_MATMUL_ENTRY(tf_matmul_bf16, FMT_BF16, 0)
TF_MATMUL_ENTRY(tf_matmul_q4_0, FMT_Q4_0, 0)
TF_MATMUL_ENTRY(tf_matmul_q4_1, FMT_Q4_1, 0)
TF_MATMUL_ENTRY(tf_matmul_q8_0, FMT_Q8_0, 0)
TF_MATMUL_ENTRY(tf_plant_matmul_q4_1_rowvar, FMT_Q4_1, 1)

// Embedding rows: out[i, k] = W[tokens[i], k] decoded (the values the matmul multiplies by).
template <int FMT>
__device__ __forceinline__ void tf_embed(const u8* __restrict__ W, const int* __restrict__ tokens,
                                         float* __restrict__ out, int cols) {
    const int i = blockIdx.x;
    const u8* row = W + (size_t)tokens[i] * tf_row_bytes(FMT, cols);
    for (int k = threadIdx.x; k < cols; k += blockDim.x)
        out[(size_t)i * cols + k] = tf_decode<FMT>(row, k);
}

#define TF_EMBED_ENTRY(NAME, FMT)                                                             \
    extern "C" __global__ void NAME(const u8* W, const int* tokens, float* out, int cols) {   \
        tf_embed<FMT>(W, tokens, out, cols);                                                  \
    }

TF_EMBED_ENTRY(tf_embed_f32, FMT_F32)
TF_EMBED_ENTRY(tf_embed_f16, FMT_F16)
TF_EMBED_ENTRY(tf_embed_bf16, FMT_BF16)
TF_EMBED_ENTRY(tf_embed_q4_0, FMT_Q4_0)
TF_EMBED_ENTRY(tf_embed_q4_1, FMT_Q4_1)
TF_EMBED_ENTRY(tf_embed_q8_0, FMT_Q8_0)
