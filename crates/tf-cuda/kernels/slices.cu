// Matrix products in the GPU's own order (tf_slices): MLX 4-bit and bf16 weights.
//
// tf_mmv and tf_mmq give the CPU's bits: 16 chains a row, chain l over k = l (mod 16), so a
// row has at most 16 threads and each gets 2 weights of a 32-element unit, for which it loads
// the unit's scale, bias, code bytes and inputs (docs/perf.md). tf_slices has an order of its
// own, the same whatever n, so a row's bits do not depend on the other rows of the call (the
// rule); they are not the CPU's, and the difference is measured as fidelity (docs/fidelity.md):
//
//   lane p of 32 owns the row's units u = p, p + 32, ... (32 elements each, ascending u); four
//   chains c_m (m = 0..3) take x_e * w_e for the unit's elements e = 8m .. 8m + 7, ascending;
//   the lane's sum is (c_0 + c_1) + (c_2 + c_3); the 32 lane sums fold by the shuffle tree
//   (16, 8, 4, 2, 1). MLX: w_e = fmaf(s_u, q_e, b_u), one rounding. bf16: w_e is the value.
//
// A warp takes SL_RJ weight rows (the one-row entries: tf_slice_one_rows) and up to MM_RT
// activation rows at a time, loads each unit whole (24 or 64 bytes, the warp's 32 lanes reading
// consecutive units) a step ahead, and reuses a unit's inputs for all its weight rows. None of
// this grouping changes a sum.

#define SL_RJ 2  // weight rows a warp

// 32-bit words of one unit: 16 code bytes, the f32 scale and bias (MLX 4-bit); 32 bf16 values.
__host__ __device__ constexpr int tf_slice_words(int fmt) { return fmt == FMT_BF16 ? 16 : 6; }

// The raw words of the unit at p (24 bytes 8-aligned, or 64 bytes 16-aligned).
template <int FMT>
__device__ __forceinline__ void tf_slice_load(const u8* p, u32* w) {
    if constexpr (FMT == FMT_BF16) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint4 v = __ldg((const uint4*)p + i);
            w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 3; i++) {
            const uint2 v = __ldg((const uint2*)p + i);
            w[2 * i] = v.x, w[2 * i + 1] = v.y;
        }
    }
}

// tf_byte_f's 0x4b000000 held in a register the compiler cannot fold to an immediate (n >= 0,
// so n >> 31 is 0): the byte permutes then take their selectors as the immediate and need no
// register move each (about 100 fewer instructions a step of the one-row loop, `bash
// scripts/sass.sh tf_slices_mlx4_one`).
__device__ __forceinline__ u32 tf_exp_byte(int n) { return 0x4b000000u | ((u32)n >> 31); }

// The weights of a unit's elements 8m .. 8m + 7 from its raw words (mg: tf_exp_byte).
template <int FMT>
__device__ __forceinline__ void tf_slice_decode(const u32* w, int m, float* out, u32 mg) {
    if constexpr (FMT == FMT_BF16) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            out[2 * i] = __int_as_float((int)(w[4 * m + i] << 16));
            out[2 * i + 1] = __int_as_float((int)(w[4 * m + i] & 0xffff0000u));
        }
    } else {
        // Byte i of word m holds element 8m + 2i (low nibble) and 8m + 2i + 1 (high).
        constexpr float M23 = 8388608.0f;  // 2^23
        const float s = __int_as_float((int)w[4]), b = __int_as_float((int)w[5]);
        const u32 lo = w[m] & 0x0f0f0f0fu, hi = (w[m] >> 4) & 0x0f0f0f0fu;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            out[2 * i] = fmaf(s, tf_byte_f(lo, i, mg) - M23, b);
            out[2 * i + 1] = fmaf(s, tf_byte_f(hi, i, mg) - M23, b);
        }
    }
}

// Folds the 32 lane values of a warp by the shuffle tree; valid in lane 0. Every lane calls it.
__device__ __forceinline__ float tf_fold32_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = v + __shfl_down_sync(TF_FULL_MASK, v, off);
    return v;
}

// Weight rows a warp of the one-row entries takes at a time.
__host__ __device__ constexpr int tf_slice_one_rows(int fmt) { return fmt == FMT_BF16 ? 2 : 4; }

// One unit of the warp's RJ weight rows (raw words w[r]) into the chains of NT activation rows;
// xin(i, q) is the float4 q (0..7) of row i's inputs of the unit; mg: tf_exp_byte.
template <int FMT, int NT, int RJ, class XIn>
__device__ __forceinline__ void tf_slice_unit(const u32 (*w)[tf_slice_words(FMT)], XIn xin,
                                              float (*c)[RJ][4], u32 mg) {
#pragma unroll
    for (int m = 0; m < 4; m++) {
        float xv[NT][8];
#pragma unroll
        for (int i = 0; i < NT; i++) {
            const float4 a = xin(i, 2 * m), b = xin(i, 2 * m + 1);
            xv[i][0] = a.x, xv[i][1] = a.y, xv[i][2] = a.z, xv[i][3] = a.w;
            xv[i][4] = b.x, xv[i][5] = b.y, xv[i][6] = b.z, xv[i][7] = b.w;
        }
#pragma unroll
        for (int r = 0; r < RJ; r++) {
            float wd[8];
            tf_slice_decode<FMT>(w[r], m, wd, mg);
#pragma unroll
            for (int i = 0; i < NT; i++)
#pragma unroll
                for (int e = 0; e < 8; e++) c[i][r][m] = fmaf(xv[i][e], wd[e], c[i][r][m]);
        }
    }
}

// Folds the warp's chains of NT activation rows (from i0) and RJ weight rows (from j0) into y
// and zeroes them. PLANT 2 (a planted control): the lane's sum as (c_0 + c_2) + (c_1 + c_3),
// accurate and row-invariant but not tf_slices' bits. Every lane of the warp calls it.
template <int PLANT, int NT, int RJ>
__device__ __forceinline__ void tf_slice_store(float (*c)[RJ][4], float* __restrict__ y,
                                               int i0, int j0, int rows) {
#pragma unroll
    for (int i = 0; i < NT; i++)
#pragma unroll
        for (int r = 0; r < RJ; r++) {
            float* a = c[i][r];
            const float l =
                PLANT == 2 ? (a[0] + a[2]) + (a[1] + a[3]) : (a[0] + a[1]) + (a[2] + a[3]);
            const float s = tf_fold32_sum(l);
            if ((threadIdx.x & 31) == 0 && j0 + r < rows) y[(size_t)(i0 + i) * rows + j0 + r] = s;
#pragma unroll
            for (int m = 0; m < 4; m++) a[m] = 0.0f;
        }
}

// Float4s of one x slab in shared memory (a lane step: 32 units, 1024 columns) of one row.
#define SL_SLAB 256

// NT activation rows (from i0) against the warp's SL_RJ weight rows (from j0, rows wr; none
// when has is false, the warp then only helps copy x), one unit of a lane a step. The block's
// warps go through the steps together: before step t the block has copied x's slab t of the NT
// rows into shared memory lane-major (the float4 q of row i's unit 32 t + p at
// xs[(t & 1) * NT * SL_SLAB + i * SL_SLAB + q * 32 + p]), slab t + 1 flying (cp.async) while
// step t is multiplied. PLANT 1 (a planted control): slabs in descending order when n > 1, so
// a lane's units follow the row count.
template <int FMT, int PLANT, int NT>
__device__ __forceinline__ void tf_slices_tile(const u8* const* wr, bool has,
                                               const float* __restrict__ x,
                                               float* __restrict__ y, int i0, int j0, int n,
                                               int rows, int cols) {
    extern __shared__ __align__(16) u8 tf_smem[];
    float4* xs = (float4*)tf_smem;
    constexpr int NW = tf_slice_words(FMT), UB = 4 * NW;
    const int p = threadIdx.x & 31;
    const int units = cols >> 5, steps = (units + 31) >> 5;
    const int nu = units > p ? ((units - 1 - p) >> 5) + 1 : 0;  // the lane's units
    const bool rev = PLANT == 1 && n > 1;
    auto slab = [&](int t) { return rev ? steps - 1 - t : t; };  // the slab of step t
    // Copies slab u of the NT rows into buffer b (units past the row's end left alone).
    auto copy = [&](int u, int b) {
        for (int f = threadIdx.x; f < NT * SL_SLAB; f += blockDim.x) {
            const int i = f / SL_SLAB, lp = (f >> 3) & 31, q = f & 7;
            if (32 * u + lp < units)
                tf_cp_async16(&xs[(b * NT + i) * SL_SLAB + q * 32 + lp],
                              x + (size_t)(i0 + i) * cols + 32 * (32 * u + lp) + 4 * q);
        }
        tf_cp_async_commit();
    };
    float c[NT][SL_RJ][4] = {};
    const u32 mg = tf_exp_byte(rows);
    u32 cur[SL_RJ][NW];
    auto fetch = [&](int t, u32 (*buf)[NW]) {
        if (has && slab(t) < nu)
#pragma unroll
            for (int r = 0; r < SL_RJ; r++)
                tf_slice_load<FMT>(wr[r] + (size_t)(p + 32 * slab(t)) * UB, buf[r]);
    };
    fetch(0, cur);
    copy(slab(0), 0);
    for (int t = 0; t < steps; t++) {
        tf_cp_async_wait<0>();  // this thread's copies of slab t
        __syncthreads();        // everyone's; and every warp is done with step t - 1's buffer
        if (t + 1 < steps) copy(slab(t + 1), (t + 1) & 1);
        u32 nxt[SL_RJ][NW];
        if (t + 1 < steps) fetch(t + 1, nxt);  // in flight while this unit is multiplied
        if (has && slab(t) < nu) {
            const float4* xb = xs + (size_t)(t & 1) * NT * SL_SLAB + p;
            tf_slice_unit<FMT, NT, SL_RJ>(
                cur, [&](int i, int q) { return xb[i * SL_SLAB + q * 32]; }, c, mg);
        }
#pragma unroll
        for (int r = 0; r < SL_RJ; r++)
#pragma unroll
            for (int v = 0; v < NW; v++) cur[r][v] = nxt[r][v];
    }
    __syncthreads();  // the next tile's copies reuse the buffers
    if (has) tf_slice_store<PLANT, NT, SL_RJ>(c, y, i0, j0, rows);
}

// y[i, j] for i < n: warp w takes weight rows SL_RJ w .. SL_RJ w + SL_RJ - 1 (cols a multiple
// of 32; the launcher gives 32 / SL_RJ threads a row) against the activation rows in tiles of
// MM_RT. Dynamic shared memory: 2 * min(n, MM_RT) slabs of 4 KiB.
template <int FMT, int PLANT>
__device__ __forceinline__ void tf_slices(const u8* __restrict__ W, const float* __restrict__ x,
                                          float* __restrict__ y, int n, int rows, int cols) {
    const int j0 = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5) * SL_RJ;
    const bool has = j0 < rows;  // else the warp only helps copy x
    const size_t rb = (size_t)(cols >> 5) * (4 * tf_slice_words(FMT));
    const u8* wr[SL_RJ];
#pragma unroll
    for (int r = 0; r < SL_RJ; r++) wr[r] = W + (size_t)min(j0 + r, rows - 1) * rb;
    for (int i0 = 0; i0 < n; i0 += MM_RT) {
        switch (min(MM_RT, n - i0)) {
            case 1: tf_slices_tile<FMT, PLANT, 1>(wr, has, x, y, i0, j0, n, rows, cols); break;
            case 2: tf_slices_tile<FMT, PLANT, 2>(wr, has, x, y, i0, j0, n, rows, cols); break;
            case 3: tf_slices_tile<FMT, PLANT, 3>(wr, has, x, y, i0, j0, n, rows, cols); break;
            default: tf_slices_tile<FMT, PLANT, MM_RT>(wr, has, x, y, i0, j0, n, rows, cols);
        }
    }
}

// One activation row (the _one entries): the block first copies x into shared memory, lane-major
// (the float4 q of the lane's t-th unit at xs[(8 t + q) * 32 + p], so a warp's reads of it are
// consecutive, not 128 bytes apart); warp w takes the RJ-row groups w * per .. w * per + per - 1
// in turn (RJ = tf_slice_one_rows), one unit of a lane a step, the next step's loads (of the
// same group or the next) in flight while a step is multiplied, so a warp waits on memory once,
// not once a group. The same sums as tf_slices_tile at NT = 1. Dynamic shared memory: 4 KiB a
// 32 units (cols / 1024 rounded up).
template <int FMT, int PLANT>
__device__ __forceinline__ void tf_slices_one(const u8* __restrict__ W,
                                              const float* __restrict__ x,
                                              float* __restrict__ y, int rows, int cols,
                                              int per) {
    extern __shared__ __align__(16) u8 tf_smem[];
    float4* xs = (float4*)tf_smem;
    constexpr int NW = tf_slice_words(FMT), UB = 4 * NW, RJ = tf_slice_one_rows(FMT);
    const int p = threadIdx.x & 31;
    const int groups = (rows + RJ - 1) / RJ;
    int g = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5) * per;
    const int gend = min(g + per, groups);
    const int units = cols >> 5;
    const int nu = units > p ? ((units - 1 - p) >> 5) + 1 : 0;  // the lane's units
    const int steps = (units + 31) >> 5;                         // a group's steps (the warp's)
    const size_t rb = (size_t)units * UB;
    const u32 mg = tf_exp_byte(rows);
    // The raw words of the lane's unit t of group g (none if it lacks that unit).
    auto fetch = [&](int g, int t, u32 (*buf)[NW]) {
        if (t < nu)
#pragma unroll
            for (int r = 0; r < RJ; r++) {
                const u8* row = W + (size_t)min(g * RJ + r, rows - 1) * rb;
                tf_slice_load<FMT>(row + (size_t)(p + 32 * t) * UB, buf[r]);
            }
    };
    u32 cur[RJ][NW];
    if (g < gend) fetch(g, 0, cur);  // in flight while x is copied
    tf_follow();  // after the first loads: weights are never written; x is the kernels' before
    for (int f = threadIdx.x; f < cols >> 2; f += blockDim.x) {
        const int u = f >> 3;
        xs[((u >> 5) * 8 + (f & 7)) * 32 + (u & 31)] = __ldg((const float4*)x + f);
    }
    __syncthreads();
    if (g >= gend) return;  // the whole warp
    float c[1][RJ][4] = {};
    for (int t = 0;;) {
        const int gn = t + 1 == steps ? g + 1 : g, tn = t + 1 == steps ? 0 : t + 1;
        const bool more = gn < gend;
        u32 nxt[RJ][NW];
        if (more) fetch(gn, tn, nxt);  // in flight while this step is multiplied
        if (t < nu)
            tf_slice_unit<FMT, 1, RJ>(
                cur, [&](int, int q) { return xs[(8 * t + q) * 32 + p]; }, c, mg);
        // The group is done: fold and store, then start the next.
        if (t + 1 == steps) tf_slice_store<PLANT, 1, RJ>(c, y, 0, g * RJ, rows);
        if (!more) break;
#pragma unroll
        for (int r = 0; r < RJ; r++)
#pragma unroll
            for (int v = 0; v < NW; v++) cur[r][v] = nxt[r][v];
        g = gn, t = tn;
    }
}

// NAME (any n) and NAME_one (n = 1; `per` row groups a warp).
#define TF_SLICES_ENTRY(NAME, FMT, PLANT)                                                     \
    extern "C" __global__ void NAME(const u8* W, const float* x, float* y, int n, int rows,  \
                                    int cols) { tf_follow();                                  \
        tf_slices<FMT, PLANT>(W, x, y, n, rows, cols);                                        \
    }                                                                                         \
    extern "C" __global__ void NAME##_one(const u8* W, const float* x, float* y, int rows,    \
                                          int cols, int per) {                                \
        tf_slices_one<FMT, PLANT>(W, x, y, rows, cols, per);                                  \
    }

TF_SLICES_ENTRY(tf_slices_mlx4, FMT_MLX4, 0)
TF_SLICES_ENTRY(tf_slices_bf16, FMT_BF16, 0)
TF_SLICES_ENTRY(tf_plant_slices_mlx4_rowvar, FMT_MLX4, 1)
TF_SLICES_ENTRY(tf_plant_slices_mlx4_sum, FMT_MLX4, 2)
