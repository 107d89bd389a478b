// Fused decode kernels: the same per-element arithmetic as the separate kernels (so the same
// bits), fewer launches and one trip to device memory for the weights.
//
// tf_mmf_<fmt>_<xf>_<ep>: a block of MMF_THREADS threads owns MMF_ROWS consecutive weight rows,
// one per half-warp, and walks the columns in the chunks of tf_mmv (matmul.cu: whole format
// units, at most MMV_SPAN - 16 bytes of a row), so its shared memory is bounded whatever the row
// length. Each half-warp streams its row as tf_mmv does (16-byte loads, the next chunk in flight
// while the current one is consumed from shared memory); for each tile of MM_RT activation rows
// and each chunk, in ascending column order, the block stages the tile's inputs for the chunk's
// columns after an optional transform:
//   xf none: x as is
//   xf norm: RMSNorm, r = 1 / sqrt(dot16(x, x) / cols + eps) per row (a half-warp's fold over
//            the whole row, as in tf_rms_norm, before the first chunk), then g[k] * (x[k] * r)
//   xf silu: SwiGLU of a fused [gate | up] row of width 2 * cols: silu(gate[k]) * up[k]
// and each half-warp continues its row's 16-lane fmaf chains over the chunk (lane l still takes
// k = l (mod 16) in ascending k, the accumulators living across chunks), then the fixed fold
// (as tf_matmul), then
//   ep store: y = s        ep add: y = y + s (the residual add)
//   ep swiglu: the weight is a fused [gate | up] of 2 * h rows; the block's first four
//            half-warps take gate rows, the last four the up rows h further on, and
//            y[i, p] = silu(gate) * up ([n, h]: the input of the down projection, as tf_silu_mul)
//   ep rope: the weight is a fused [q | k | v] (full rotary); the first blocks take four RoPE
//            pairs each (the pairs' first rows in the first four half-warps, their second rows
//            in the last four) and rotate them as tf_rope_append does: q into y, k into the key
//            pool; the blocks after them take eight v rows each into the value pool
// Every block recomputes the transform for the rows it reads; each value is the same bits as the
// separate kernel's, and nothing depends on the number of rows in the call.

#define MMF_ROWS 8
#define MMF_THREADS 128
#define XF_NONE 0
#define XF_NORM 1
#define XF_SILU 2
#define EP_STORE 0
#define EP_ADD 1
#define EP_SWIGLU 2
#define EP_ROPE 3

// What EP_ROPE needs besides the matmul's arguments (tf_rope_append's, for full rotary).
struct TfRope {
    const float* cs;
    float* kpool;
    float* vpool;
    const int* slots;
    const int* pos;
    int heads, kv_heads, head_dim, pairing, n_layers, layer, capacity;
};

// Stages columns c0 .. c0 + cw of nt input rows into shared memory (row r at xs + r * stride),
// eight loads in flight per thread before their stores; XF_SILU stores silu(gate) * up of a
// [gate | up] row, XF_NORM g[k] * (x[k] * rs[r]).
template <int XF>
__device__ __forceinline__ void tf_stage_cols(const float* __restrict__ x,
                                              const float* __restrict__ g, const float* rs,
                                              float* xs, int nt, int cols, int c0, int cw,
                                              int stride, int i0, int x_stride) {
    const int total = nt * cw;
    for (int t0 = threadIdx.x; t0 < total; t0 += 8 * MMF_THREADS) {
        float a[8], b[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int t = t0 + u * MMF_THREADS;
            if (t < total) {
                const int r = t / cw, k = c0 + t - r * cw;
                const float* xr = x + (size_t)(i0 + r) * x_stride;
                a[u] = xr[k];
                if (XF == XF_SILU) b[u] = xr[cols + k];
                if (XF == XF_NORM) b[u] = g[k];
            }
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int t = t0 + u * MMF_THREADS;
            if (t < total) {
                const int r = t / cw, kl = t - r * cw;
                float v = a[u];
                if (XF == XF_SILU) v = tf_silu(a[u]) * b[u];
                if (XF == XF_NORM) v = b[u] * (a[u] * rs[r]);
                xs[r * stride + kl] = v;
            }
        }
    }
}

// The start of position pos[i] of slot slots[i] in a layer's pool rows (tf_rope_append's dst).
__device__ __forceinline__ size_t tf_rope_dst(const TfRope& rp, int i) {
    const size_t row_w = (size_t)rp.kv_heads * rp.head_dim;
    return (((size_t)rp.slots[i] * rp.n_layers + rp.layer) * rp.capacity + (size_t)rp.pos[i]) *
           row_w;
}

// Lane r < MM_RT of a half-warp gets the sum of tile row r (the fixed fold of the row's 16
// chains, which ends in lane 0); the other lanes get 0. Every lane must call it.
__device__ __forceinline__ float tf_tile_row_sum(const float* acc, int lane) {
    float mine = 0.0f;
#pragma unroll
    for (int r = 0; r < MM_RT; r++) {
        const float t = __shfl_sync(TF_FULL_MASK, tf_fold16_sum(acc[r]), 0, 16);
        if (lane == r) mine = t;
    }
    return mine;
}

template <int FMT, int XF, int EP>
__device__ __forceinline__ void tf_mmf(const u8* __restrict__ W, const float* __restrict__ x,
                                       const float* __restrict__ g, float eps, float* y, int n,
                                       int rows, int cols, int x_stride, const TfRope& rp) {
    extern __shared__ __align__(16) u8 tf_smem[];
    __shared__ float rs[MM_RT];
    constexpr int UE = tf_unit_elems(FMT), NU = tf_mmv_units(FMT), CCOLS = NU * UE;
    const size_t rb = tf_row_bytes(FMT, cols);
    const int cc = min(cols, CCOLS);  // the staged inputs' row stride
    const int lane = threadIdx.x & 15;
    const int hw = threadIdx.x >> 4;
    u8* sb = tf_smem + (size_t)hw * MMV_STRIDE;  // this half-warp's weight window
    float* xs = (float*)(tf_smem + MMF_ROWS * MMV_STRIDE);
    // This half-warp's weight row j; with EP_SWIGLU, output column p of h = rows / 2.
    const int h = rows / 2, half = MMF_ROWS / 2;
    const int p = blockIdx.x * half + (hw & (half - 1));
    int j = EP == EP_SWIGLU ? p + (hw >= half ? h : 0) : blockIdx.x * MMF_ROWS + hw;
    bool active = EP == EP_SWIGLU ? p < h : j < rows;
    // EP_ROPE: pair p of the q and k heads' pairs (rp_pairs), or v row j - qk_rows.
    const int rhalf = rp.head_dim / 2, rp_pairs = (rp.heads + rp.kv_heads) * rhalf;
    const int rp_blocks = (rp_pairs + half - 1) / half, qk_rows = 2 * rp_pairs;
    const bool rp_pair_block = EP == EP_ROPE && (int)blockIdx.x < rp_blocks;
    int rp_head = 0, rp_ia = 0, rp_ib = 0;
    if constexpr (EP == EP_ROPE) {
        if (rp_pair_block) {
            rp_head = p / rhalf;
            const int pp = p - rp_head * rhalf;
            rp_ia = rp.pairing == 0 ? 2 * pp : pp;
            rp_ib = rp.pairing == 0 ? 2 * pp + 1 : pp + rhalf;
            j = rp_head * rp.head_dim + (hw >= half ? rp_ib : rp_ia);
            active = p < rp_pairs;
        } else {
            j = qk_rows + ((int)blockIdx.x - rp_blocks) * MMF_ROWS + hw;
            active = j < rows;
        }
    }
    const u8* row = W + (size_t)(active ? j : 0) * rb;
    const u8* lo = W;
    const u8* hi = W + (size_t)rows * rb;
    const int units = (cols + UE - 1) / UE;
    const int nchunks = (units + NU - 1) / NU;
    for (int i0 = 0; i0 < n; i0 += MM_RT) {
        const int nt = min(MM_RT, n - i0);
        // The first chunk's weight loads fly while the norm (if any) reads the input rows.
        uint4 v[MMV_VEC];
        const u8* a0;
        int delta, nv;
        tf_mmv_window<FMT>(row, rb, 0, &a0, &delta, &nv);
        tf_mmv_fetch(v, a0, nv, lo, hi, lane);
        // EP_ROPE: lane r < nt takes the tile's row r in the epilogue; what it needs from device
        // memory (its angles, its cache entry) is loaded now, behind the product.
        float rp_cos = 0.0f, rp_sin = 0.0f;
        size_t rp_dst = 0;
        // EP_ADD: lane r < nt reads the y its row's sum is added to, behind the product too.
        float y0 = 0.0f;
        if (EP == EP_ADD && active && lane < nt) y0 = y[(size_t)(i0 + lane) * rows + j];
        if constexpr (EP == EP_ROPE) {
            if (active && lane < nt) {
                const int pp = p - rp_head * rhalf;
                const float* c = rp.cs + (size_t)(i0 + lane) * 2 * rhalf;
                if (rp_pair_block && hw >= half) {
                    rp_cos = c[pp];
                    rp_sin = c[rhalf + pp];
                }
                if (!rp_pair_block || (hw >= half && rp_head >= rp.heads))
                    rp_dst = tf_rope_dst(rp, i0 + lane);
            }
        }
        if (XF == XF_NORM && hw < MM_RT) {  // threads 0..63: two whole warps
            float acc = 0.0f;
            if (hw < nt) {
                const float* xr = x + (size_t)(i0 + hw) * x_stride;
#pragma unroll 8
                for (int k = lane; k < cols; k += 16) acc = fmaf(xr[k], xr[k], acc);
            }
            const float ss = tf_fold16_sum(acc);
            if (lane == 0 && hw < nt) rs[hw] = tf_inv_rms(ss, cols, eps);
        }
        float acc[MM_RT];
#pragma unroll
        for (int r = 0; r < MM_RT; r++) acc[r] = 0.0f;
        for (int c = 0; c < nchunks; c++) {
            const int c0 = c * CCOLS;
            const int cw = min(CCOLS, cols - c0);
            const int cdelta = delta;
            __syncthreads();  // the previous chunk consumed; rs written
#pragma unroll
            for (int u = 0; u < MMV_VEC; u++) ((uint4*)sb)[lane + 16 * u] = v[u];
            tf_stage_cols<XF>(x, g, rs, xs, nt, cols, c0, cw, cc, i0, x_stride);
            if (c + 1 < nchunks) {  // the next chunk's loads fly while this one is consumed
                tf_mmv_window<FMT>(row, rb, c + 1, &a0, &delta, &nv);
                tf_mmv_fetch(v, a0, nv, lo, hi, lane);
            }
            __syncthreads();
            if (active) {
                // The chains as tf_mmv's (matmul.cu), the inputs from shared memory.
                const u8* srow = sb + cdelta;
                switch (nt) {
                    case 1: tf_mmv_chunk<FMT, 1>(srow, xs, cc, cw, false, lane, acc); break;
                    case 2: tf_mmv_chunk<FMT, 2>(srow, xs, cc, cw, false, lane, acc); break;
                    case 3: tf_mmv_chunk<FMT, 3>(srow, xs, cc, cw, false, lane, acc); break;
                    default: tf_mmv_chunk<FMT, MM_RT>(srow, xs, cc, cw, false, lane, acc);
                }
            }
        }
        if constexpr (EP == EP_ROPE) {
            __shared__ float first[MM_RT][MMF_ROWS / 2];
            const float mine = tf_tile_row_sum(acc, lane);
            if (rp_pair_block) {
                if (lane < nt && hw < half) first[lane][hw] = mine;
                __syncthreads();
                if (active && lane < nt && hw >= half) {
                    const float a = first[lane][hw - half], b = mine;
                    const float oa = a * rp_cos - b * rp_sin, ob = b * rp_cos + a * rp_sin;
                    float* o = rp_head < rp.heads
                                   ? y + (size_t)(i0 + lane) * rows + (size_t)rp_head * rp.head_dim
                                   : rp.kpool + rp_dst + (size_t)(rp_head - rp.heads) * rp.head_dim;
                    o[rp_ia] = oa;
                    o[rp_ib] = ob;
                }
            } else if (active && lane < nt) {
                rp.vpool[rp_dst + (j - qk_rows)] = mine;
            }
        } else if constexpr (EP == EP_SWIGLU) {
            __shared__ float gate[MM_RT][MMF_ROWS / 2];
            float s[MM_RT];
#pragma unroll
            for (int r = 0; r < MM_RT; r++) s[r] = tf_fold16_sum(acc[r]);
            if (lane == 0 && hw < half)
                for (int r = 0; r < nt; r++) gate[r][hw] = s[r];
            __syncthreads();
            if (active && lane == 0 && hw >= half)
                for (int r = 0; r < nt; r++)
                    y[(size_t)(i0 + r) * h + p] = tf_silu(gate[r][hw - half]) * s[r];
        } else {
            // Lane r < nt writes row r (for the add, onto the y it read before the product).
            const float mine = tf_tile_row_sum(acc, lane);
            if (active && lane < nt)
                y[(size_t)(i0 + lane) * rows + j] = EP == EP_ADD ? y0 + mine : mine;
        }
    }
}

#define TF_MMF_ENTRY(FNAME, FMT, XF, EP)                                                        \
    extern "C" __global__ void __launch_bounds__(MMF_THREADS)                                   \
        tf_mmf_##FNAME(const u8* W, const float* x, const float* g, float eps, float* y, int n, \
                       int rows, int cols, int x_stride) { tf_follow();                         \
        tf_mmf<FMT, XF, EP>(W, x, g, eps, y, n, rows, cols, x_stride, TfRope{});                \
    }
// The [q | k | v] projection with the input norm, RoPE and the KV append (EP_ROPE).
#define TF_MMF_ROPE_ENTRY(FNAME, FMT)                                                           \
    extern "C" __global__ void __launch_bounds__(MMF_THREADS) tf_mmf_##FNAME(                   \
        const u8* W, const float* x, const float* g, float eps, float* y, int n, int rows,      \
        int cols, int x_stride, const float* cs, float* kpool, float* vpool, const int* slots,  \
        const int* pos, int heads, int kv_heads, int head_dim, int pairing, int n_layers,       \
        int layer, int capacity) { tf_follow();                                                 \
        const TfRope rp{cs, kpool, vpool, slots, pos, heads, kv_heads, head_dim, pairing,       \
                        n_layers, layer, capacity};                                             \
        tf_mmf<FMT, XF_NORM, EP_ROPE>(W, x, g, eps, y, n, rows, cols, x_stride, rp);            \
    }
#define TF_MMF_FORMAT(NAME, FMT)                          \
    TF_MMF_ENTRY(NAME##_none_store, FMT, XF_NONE, EP_STORE) \
    TF_MMF_ENTRY(NAME##_none_add, FMT, XF_NONE, EP_ADD)     \
    TF_MMF_ENTRY(NAME##_norm_store, FMT, XF_NORM, EP_STORE) \
    TF_MMF_ENTRY(NAME##_norm_add, FMT, XF_NORM, EP_ADD)     \
    TF_MMF_ENTRY(NAME##_silu_store, FMT, XF_SILU, EP_STORE) \
    TF_MMF_ENTRY(NAME##_silu_add, FMT, XF_SILU, EP_ADD)     \
    TF_MMF_ENTRY(NAME##_norm_swiglu, FMT, XF_NORM, EP_SWIGLU) \
    TF_MMF_ROPE_ENTRY(NAME##_norm_rope, FMT)

TF_MMF_FORMAT(f32, FMT_F32)
TF_MMF_FORMAT(f16, FMT_F16)
TF_MMF_FORMAT(bf16, FMT_BF16)
TF_MMF_FORMAT(q4_0, FMT_Q4_0)
TF_MMF_FORMAT(q4_1, FMT_Q4_1)
TF_MMF_FORMAT(q8_0, FMT_Q8_0)

// RoPE and KV append in one launch, one block per row of a fused [q | k | v] projection
// (row width (heads + 2 * kv_heads) * head_dim): q is rotated in place; k is rotated into the
// key pool; v is copied into the value pool. Same arithmetic as tf_rope + tf_kv_append.
extern "C" __global__ void tf_rope_append(float* qkv, const float* cs, float* kpool, float* vpool,
                                          const int* slots, const int* pos, int heads,
                                          int kv_heads, int head_dim, int half, int pairing,
                                          int n_layers, int layer, int capacity) {
    tf_follow();
    const int i = blockIdx.x;
    const int row_w = kv_heads * head_dim;
    float* q = qkv + (size_t)i * (heads + 2 * kv_heads) * head_dim;
    const float* k = q + (size_t)heads * head_dim;
    const float* v = k + row_w;
    const float* c = cs + (size_t)i * 2 * half;
    const size_t dst = (((size_t)slots[i] * n_layers + layer) * capacity + (size_t)pos[i]) * row_w;
    for (int t = threadIdx.x; t < (heads + kv_heads) * half; t += blockDim.x) {
        const int h = t / half, p = t - h * half;
        const int ia = pairing == 0 ? 2 * p : p;
        const int ib = pairing == 0 ? 2 * p + 1 : p + half;
        const float cc = c[p], s = c[half + p];
        if (h < heads) {
            float* hd = q + (size_t)h * head_dim;
            const float a = hd[ia], b = hd[ib];
            hd[ia] = a * cc - b * s;
            hd[ib] = b * cc + a * s;
        } else {
            const int kh = h - heads;
            const float* src = k + (size_t)kh * head_dim;
            const float a = src[ia], b = src[ib];
            kpool[dst + (size_t)kh * head_dim + ia] = a * cc - b * s;
            kpool[dst + (size_t)kh * head_dim + ib] = b * cc + a * s;
        }
    }
    const int rot = 2 * half;
    for (int e = threadIdx.x; e < row_w; e += blockDim.x) {
        vpool[dst + e] = v[e];
        if (e % head_dim >= rot) kpool[dst + e] = k[e];  // partial rotary: the tail passes through
    }
}
