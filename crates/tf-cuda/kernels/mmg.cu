// Matmuls of many activation rows (tf_mmg_<fmt>_<xf>_<ep>): the fused kernels' transforms,
// epilogues and bits (fused.cu), computed as a tiled product.
//
// tf_mmf gives each weight row one half-warp and walks the activation rows MM_RT at a time, so
// every tile of four rows decodes the whole matrix again and reads its inputs one float a lane:
// at 16-64 rows the decode and the loads, not the multiply-adds, are the work. Here a block of
// MMG_THREADS threads owns MMG_I activation rows by MMG_J weight rows. For each chunk of MMG_K
// columns it stages the transformed inputs (xf) and the decoded weights (tf_decode) in shared
// memory, column-major, so each weight is decoded once per block and a thread reads the eight
// inputs and eight weights of a column as two float4 each, for 64 fmaf. The weights' raw bytes
// arrive a chunk ahead by asynchronous copies (cp.async) into a second buffer and are decoded
// from shared memory, so their loads overlap the current chunk's work.
//
// The arithmetic of every output is unchanged: thread (lane l, tile t) keeps chain l of its
// tile's 8 x 8 sums, fed k = l (mod 16) in ascending k (chunks in order, MMG_K a multiple of 16),
// and the 16 lanes' chains are folded by tf_fold16_sum's pairs (tf_mmg_fold). Nothing depends
// on the number of rows in the call or on which block a row falls in, so these kernels and
// tf_mmf give the same bits and the launcher may pick either by row count (fused.rs).

#define MMG_I 32          // activation rows a block
#define MMG_J 32          // weight rows a block (EP_SWIGLU: 16 gate rows and their 16 up rows)
#define MMG_K 64          // columns a chunk
#define MMG_LD 36         // floats a staged column (32 + 4: conflict-free float4 reads)
#define MMG_THREADS 256   // 16 lanes x 16 tiles of 8 x 8 (4 along i, 4 along j)
#define MMG_STAGE (MMG_I * MMG_K / MMG_THREADS)  // inputs (and weights) a thread stages a chunk
// The staging pairs input row r with tile weight row r.
static_assert(MMG_I == MMG_J, "tf_mmg stages as many weight rows as input rows");

// Weight row of the block's tile row jj, or -1 past the matrix. EP_SWIGLU: tile rows
// 0..MMG_J/2-1 are gate rows p, the rest their up rows h + p (rows = 2 h).
template <int EP>
__device__ __forceinline__ int tf_mmg_row(int jb, int jj, int rows) {
    if constexpr (EP == EP_SWIGLU) {
        const int h = rows / 2, p = jb * (MMG_J / 2) + (jj & (MMG_J / 2 - 1));
        return p < h ? p + (jj >= MMG_J / 2 ? h : 0) : -1;
    } else {
        const int j = jb * MMG_J + jj;
        return j < rows ? j : -1;
    }
}

// One step of tf_mmg_fold: lanes l and l ^ (C / 4) pair up; the lower keeps sums 0..C-1 of the
// 2 C it holds, the upper C..2C-1, and each adds the partner's partial of the sums it keeps.
template <int C>
__device__ __forceinline__ void tf_mmg_fold_step(float* v, int lane) {
    const bool upper = (lane & (C / 4)) != 0;
#pragma unroll
    for (int s = 0; s < C; s++) {
        const float send = upper ? v[s] : v[s + C];
        const float keep = upper ? v[s + C] : v[s];
        v[s] = keep + __shfl_xor_sync(TF_FULL_MASK, send, C / 4, 16);
    }
}

// Folds the 16 lanes' chains of 64 sums with tf_fold16_sum's pairs (l with l ^ 8, then 4, 2,
// 1), halving what a lane holds at each step: lane l ends with sums 4 l .. 4 l + 3 in v[0..3].
// Each is the fixed fold's value (a lane adds the partner's partial to its own: a + b and
// b + a are the same bits). Every thread of the warp must call it.
__device__ __forceinline__ void tf_mmg_fold(float* v, int lane) {
    tf_mmg_fold_step<32>(v, lane);
    tf_mmg_fold_step<16>(v, lane);
    tf_mmg_fold_step<8>(v, lane);
    tf_mmg_fold_step<4>(v, lane);
}

// 16-byte vectors of a tile row's raw window for one chunk (its bytes plus the misalignment).
template <int FMT>
__host__ __device__ constexpr int tf_mmg_raw_vecs() {
    return (tf_unit_bytes(FMT) * (MMG_K / tf_unit_elems(FMT)) + 15) / 16 + 1;
}

// Starts copying the raw bytes of chunk ci's weights (every tile row's window, 16-aligned) into
// raw (MMG_J rows of tf_mmg_raw_vecs vectors); vectors not wholly inside [lo, hi) are copied
// byte by byte, synchronously (the matrix's edges). Commits one group (empty past the end).
template <int FMT, int EP>
__device__ __forceinline__ void tf_mmg_raw_fetch(uint4* raw, const u8* W, size_t rb, int rows,
                                                 int jb, int c0, int kn, const u8* lo,
                                                 const u8* hi) {
    constexpr int NV = tf_mmg_raw_vecs<FMT>();
    if (kn > 0) {
        for (int idx = threadIdx.x; idx < MMG_J * NV; idx += MMG_THREADS) {
            const int rr = idx / NV, v = idx % NV;
            const int j = tf_mmg_row<EP>(jb, rr, rows);
            if (j < 0) continue;
            const u8* s = W + (size_t)j * rb + tf_row_bytes(FMT, c0);
            const u8* e = s + tf_row_bytes(FMT, kn);
            const u8* a0 = (const u8*)((size_t)s & ~(size_t)15);
            const u8* p = a0 + 16 * v;
            if (p >= e) continue;
            if (p >= lo && p + 16 <= hi)
                tf_cp_async16(&raw[rr * NV + v], p);
            else
                raw[rr * NV + v] = tf_mmv_edge(p, lo, hi);
        }
    }
    tf_cp_async_commit();
}

// PLANT = 1 is a planted control: the chunks in descending order (another chain order).
template <int FMT, int XF, int EP, int PLANT>
__device__ __forceinline__ void tf_mmg(const u8* __restrict__ W, const float* __restrict__ x,
                                       const float* __restrict__ g, float eps, float* y, int n,
                                       int rows, int cols, int x_stride) {
    __shared__ __align__(16) float xs[MMG_K][MMG_LD];
    __shared__ __align__(16) float ws[MMG_K][MMG_LD];
    __shared__ float rs[MMG_I];
    __shared__ float out[MMG_I][MMG_J + 1];
    const int t = threadIdx.x, lane = t & 15, tile = t >> 4;
    const int ti = tile & 3, tj = tile >> 2;  // inputs 8 ti .. 8 ti + 7, weights 8 tj .. + 7
    const int i0 = blockIdx.y * MMG_I, jb = blockIdx.x;
    const size_t rb = tf_row_bytes(FMT, cols);
    if (XF == XF_NORM) {
        // r = 1 / sqrt(dot16(x, x) / cols + eps) per row, a 16-lane group a row (as tf_mmf).
#pragma unroll
        for (int h = 0; h < MMG_I / 16; h++) {
            const int rr = tile + 16 * h;
            float acc = 0.0f;
            if (i0 + rr < n) {
                const float* xr = x + (size_t)(i0 + rr) * x_stride;
#pragma unroll 8
                for (int k = lane; k < cols; k += 16) acc = fmaf(xr[k], xr[k], acc);
            }
            const float ss = tf_fold16_sum(acc);
            if (lane == 0) rs[rr] = tf_inv_rms(ss, cols, eps);
        }
        __syncthreads();  // rs written
    }
    float acc[64];
#pragma unroll
    for (int o = 0; o < 64; o++) acc[o] = 0.0f;
    const int nchunks = (cols + MMG_K - 1) / MMG_K;
    // Chunk ci's first column (descending for the planted control) and width (0 past the end).
    auto chunk_c0 = [&](int ci) { return (PLANT == 1 ? nchunks - 1 - ci : ci) * MMG_K; };
    auto chunk_kn = [&](int ci) { return ci < nchunks ? min(MMG_K, cols - chunk_c0(ci)) : 0; };
    // The weights' raw bytes travel one chunk ahead (asynchronous copies into the other half
    // of raw), so their loads fly while the current chunk is decoded and multiplied.
    constexpr int NV = tf_mmg_raw_vecs<FMT>();
    __shared__ uint4 raw[2][MMG_J * NV];
    const u8* lo = W;
    const u8* hi = W + (size_t)rows * rb;
    tf_mmg_raw_fetch<FMT, EP>(raw[0], W, rb, rows, jb, chunk_c0(0), chunk_kn(0), lo, hi);
    for (int ci = 0; ci < nchunks; ci++) {
        const int c0 = chunk_c0(ci), kn = chunk_kn(ci);
        __syncthreads();  // the previous chunk consumed (its raw half free again)
        tf_mmg_raw_fetch<FMT, EP>(raw[(ci + 1) & 1], W, rb, rows, jb, chunk_c0(ci + 1),
                                  chunk_kn(ci + 1), lo, hi);
        // Stage: element e = t + u MMG_THREADS is column kk = e % MMG_K of tile row e / MMG_K
        // (a warp reads along a row), stored column-major; the inputs are fetched into
        // registers first, so their loads are in flight together.
        float sx[MMG_STAGE];
#pragma unroll
        for (int u = 0; u < MMG_STAGE; u++) {
            const int e = t + u * MMG_THREADS, rr = e / MMG_K, kk = e % MMG_K, k = c0 + kk;
            sx[u] = 0.0f;
            if (i0 + rr < n && kk < kn) {
                const float* xr = x + (size_t)(i0 + rr) * x_stride;
                if (XF == XF_NONE) sx[u] = xr[k];
                if (XF == XF_NORM) sx[u] = g[k] * (xr[k] * rs[rr]);
                if (XF == XF_SILU) sx[u] = tf_silu(xr[k]) * xr[cols + k];
            }
        }
        tf_cp_async_wait<1>();  // this chunk's raw bytes (the next chunk's may still fly)
        __syncthreads();        // ... every thread's
        const uint4* rw = raw[ci & 1];
#pragma unroll
        for (int u = 0; u < MMG_STAGE; u++) {
            const int e = t + u * MMG_THREADS, rr = e / MMG_K, kk = e % MMG_K;
            xs[kk][rr] = sx[u];
            const int j = tf_mmg_row<EP>(jb, rr, rows);
            // The row's chunk starts (W + j rb + its byte offset) % 16 bytes into its window.
            const size_t start = (size_t)(W + (size_t)j * rb + tf_row_bytes(FMT, c0));
            const u8* srow = (const u8*)(rw + rr * NV) + (start & 15);
            ws[kk][rr] = j >= 0 && kk < kn ? tf_decode<FMT>(srow, kk) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int m = 0; m < MMG_K / 16; m++) {
            const int kk = lane + 16 * m;
            if (kk < kn) {
                const float4 xa = *(const float4*)&xs[kk][8 * ti];
                const float4 xb = *(const float4*)&xs[kk][8 * ti + 4];
                const float4 wa = *(const float4*)&ws[kk][8 * tj];
                const float4 wb = *(const float4*)&ws[kk][8 * tj + 4];
                const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
                const float wv[8] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
                for (int a = 0; a < 8; a++)
#pragma unroll
                    for (int b = 0; b < 8; b++) acc[8 * a + b] = fmaf(xv[a], wv[b], acc[8 * a + b]);
            }
        }
    }
    // Sum o = 8 a + b of the tile is (input 8 ti + a, weight 8 tj + b); lane l holds 4 l .. + 3.
    tf_mmg_fold(acc, lane);
#pragma unroll
    for (int s = 0; s < 4; s++) out[8 * ti + (lane >> 1)][8 * tj + 4 * (lane & 1) + s] = acc[s];
    __syncthreads();
    if constexpr (EP == EP_SWIGLU) {
        const int h = rows / 2;
        for (int e = t; e < MMG_I * (MMG_J / 2); e += MMG_THREADS) {
            const int rr = e / (MMG_J / 2), pp = e % (MMG_J / 2);
            const int i = i0 + rr, p = jb * (MMG_J / 2) + pp;
            if (i < n && p < h)
                y[(size_t)i * h + p] = tf_silu(out[rr][pp]) * out[rr][MMG_J / 2 + pp];
        }
    } else {
        for (int e = t; e < MMG_I * MMG_J; e += MMG_THREADS) {
            const int rr = e / MMG_J, jj = e % MMG_J;
            const int i = i0 + rr, j = jb * MMG_J + jj;
            if (i < n && j < rows) {
                float* o = y + (size_t)i * rows + j;
                *o = EP == EP_ADD ? *o + out[rr][jj] : out[rr][jj];
            }
        }
    }
}

#define TF_MMG_ENTRY(FNAME, FMT, XF, EP, PLANT)                                                 \
    extern "C" __global__ void __launch_bounds__(MMG_THREADS, 2)                                \
        tf_##FNAME(const u8* W, const float* x, const float* g, float eps, float* y, int n,     \
                   int rows, int cols, int x_stride) { tf_follow();                             \
        tf_mmg<FMT, XF, EP, PLANT>(W, x, g, eps, y, n, rows, cols, x_stride);                   \
    }
#define TF_MMG_FORMAT(NAME, FMT)                                       \
    TF_MMG_ENTRY(mmg_##NAME##_none_store, FMT, XF_NONE, EP_STORE, 0)   \
    TF_MMG_ENTRY(mmg_##NAME##_none_add, FMT, XF_NONE, EP_ADD, 0)       \
    TF_MMG_ENTRY(mmg_##NAME##_norm_store, FMT, XF_NORM, EP_STORE, 0)   \
    TF_MMG_ENTRY(mmg_##NAME##_norm_add, FMT, XF_NORM, EP_ADD, 0)       \
    TF_MMG_ENTRY(mmg_##NAME##_silu_store, FMT, XF_SILU, EP_STORE, 0)   \
    TF_MMG_ENTRY(mmg_##NAME##_silu_add, FMT, XF_SILU, EP_ADD, 0)       \
    TF_MMG_ENTRY(mmg_##NAME##_norm_swiglu, FMT, XF_NORM, EP_SWIGLU, 0)

TF_MMG_FORMAT(f32, FMT_F32)
TF_MMG_FORMAT(f16, FMT_F16)
TF_MMG_FORMAT(bf16, FMT_BF16)
TF_MMG_FORMAT(q4_0, FMT_Q4_0)
TF_MMG_FORMAT(q4_1, FMT_Q4_1)
TF_MMG_FORMAT(q8_0, FMT_Q8_0)
TF_MMG_FORMAT(mlx4, FMT_MLX4)

// Planted control: the chunks in descending order (the suite must catch it).
TF_MMG_ENTRY(plant_mmg_q4_1_none_store, FMT_Q4_1, XF_NONE, EP_STORE, 1)
