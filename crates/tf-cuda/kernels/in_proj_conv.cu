// Mamba's in_proj with the conv step folded in (kernels/mma.cu's split product, then
// kernels/mamba.cu's conv of one row): after mma.cu and mamba.cu in the program.

// tf_mma_mlx4_r{RT}_split_x4 of a one-token round's in_proj tiles from .. to, with the conv
// step folded in (NAME_conv): after a block writes its RT tiles, its thread r < 16 RT takes
// the tiles' row r; where that row is the xBC channel c = row - x_off (0 <= c < cd), it makes
// tf_mamba_conv's step of the round's one row on the slot's window, so the scan follows the
// product with no kernel between. The same bits as the product, then tf_mamba_conv.
#define TF_MAMBA_IN_PROJ_CONV_ENTRY_SB(NAME, RT, SB)                                            \
    extern "C" __global__ void __launch_bounds__(32 * MMA_KW, RT == 1 ? 2 : 1)                  \
        NAME(const u8* W, const uint4* xp, const float* xsum, float* y, int rows, int cols,     \
             int from, int to, int x_off, const float* cw, const float* cbias, int has_bias,    \
             float* pool, const int* slots, const int* pos, int n_slots, int slot_stride,       \
             int layer_off, int cd, int kernel, float* out) {                                   \
        tf_follow();                                                                            \
        const SB* sb = tf_mma_scales<SB>(W, (rows + 15) >> 4, cols);                            \
        for (int t0 = from + (int)blockIdx.x * RT; t0 < to; t0 += (int)gridDim.x * RT) {        \
            tf_mma_body<RT, MMA_KW, 2, 0, 1>((const uint4*)W, sb, nullptr, y, 1, 0, t0, rows,   \
                                             cols, xp, xsum);                                   \
            const int r = 16 * t0 + (int)threadIdx.x, c = r - x_off, s = slots[0];              \
            if (threadIdx.x >= 16 * RT || c < 0 || c >= cd || s < 0 || s >= n_slots) continue;  \
            const int taps = kernel - 1;                                                        \
            float* st = pool + (size_t)s * slot_stride + layer_off + c;                         \
            float win[MAMBA_MAX_KERNEL - 1];                                                    \
            _Pragma("unroll") for (int t = 0; t < MAMBA_MAX_KERNEL - 1; t++)                    \
                win[t] = t < taps && pos[0] != 0 ? st[(size_t)t * cd] : 0.0f;                  \
            const float x = y[r];                                                               \
            out[c] = tf_mamba_conv_out<0>(cw + (size_t)c * kernel, win, x, taps, cbias,         \
                                          has_bias, c);                                         \
            tf_mamba_conv_shift(win, x, taps);                                                  \
            _Pragma("unroll") for (int t = 0; t < MAMBA_MAX_KERNEL - 1; t++)                    \
                if (t < taps) st[(size_t)t * cd] = win[t];                                      \
        }                                                                                       \
    }
#define TF_MAMBA_IN_PROJ_CONV_ENTRY(NAME, RT)                                                   \
    TF_MAMBA_IN_PROJ_CONV_ENTRY_SB(NAME, RT, float2)                                            \
    TF_MAMBA_IN_PROJ_CONV_ENTRY_SB(NAME##_b16, RT, u32)
TF_MAMBA_IN_PROJ_CONV_ENTRY(tf_mma_mlx4_r1_split_x4_conv, 1)
TF_MAMBA_IN_PROJ_CONV_ENTRY(tf_mma_mlx4_r2_split_x4_conv, 2)
