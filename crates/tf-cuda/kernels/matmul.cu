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

// ---- staged matmul (tf_mmv): the same arithmetic as tf_matmul, weights read in wide loads ----
//
// Where tf_matmul's time went (one activation row, Q4_0 or MLX 4-bit): every weight load is one
// lane reading one byte (or a 2- or 4-byte scale) straight from device memory, so a warp's load
// instruction moves 32-64 bytes over two rows, and each lane has only the two blocks of its
// unrolled loop in flight: a few KB in flight per SM where the H200 needs ~25-40 KB to cover
// DRAM latency. The kernel is latency bound, far below the memory roofline.
//
// tf_mmv keeps the geometry (one half-warp per weight row, 128 threads, 8 rows per block) and
// every lane's arithmetic: lane l still takes k = l (mod 16) in ascending k with one fmaf chain
// per activation row, then the fixed fold. Only the LOADS change: the half-warp streams its row
// in chunks of MMV_UNITS(FMT) whole format units (at most MMV_SPAN - 16 bytes, independent of the
// row length); each lane issues MMV_VEC 16-byte loads of the next chunk (a half-warp moves 256
// bytes per load instruction) before consuming the current chunk from shared memory. The MLX,
// Q4_0 and Q8_0 codes are widened to f32 by the exact 2^23 trick instead of an int-to-float
// conversion (a quarter-rate instruction): the same values, so the same products.

#define MMV_VEC 4                        // 16-byte loads per lane per chunk
#define MMV_SPAN (16 * 16 * MMV_VEC)     // bytes a half-warp stages per chunk
#define MMV_STRIDE (MMV_SPAN + 32)       // shared bytes per half-warp (offsets the banks)
#define MMV_HALVES 8                     // half-warps per block (128 threads)

// Elements of one storage unit of a format (a block, a super-block, or 32 floats).
__host__ __device__ constexpr int tf_unit_elems(int fmt) {
    return (fmt == FMT_Q4_K || fmt == FMT_Q6_K || fmt == FMT_PLANT_Q4_K || fmt == FMT_PLANT_Q6_K)
               ? 256
               : 32;
}

// Bytes of one storage unit of a format.
__host__ __device__ constexpr int tf_unit_bytes(int fmt) {
    return fmt == FMT_F32                                   ? 128
           : (fmt == FMT_F16 || fmt == FMT_BF16)            ? 64
           : fmt == FMT_Q4_0                                ? 18
           : fmt == FMT_Q4_1                                ? 20
           : fmt == FMT_Q8_0                                ? 34
           : (fmt == FMT_Q4_K || fmt == FMT_PLANT_Q4_K)     ? 144
           : (fmt == FMT_Q6_K || fmt == FMT_PLANT_Q6_K)     ? 210
                                                            : 4 * tf_mlx_bits(fmt) + 8;
}

// Units per chunk: a chunk plus its misalignment (< 16 bytes) fits in MMV_SPAN.
__host__ __device__ constexpr int tf_mmv_units(int fmt) {
    return (MMV_SPAN - 16) / tf_unit_bytes(fmt);
}

// An integer 0 <= q < 2^23 as f32, exactly: the bits of 2^23 + q, minus 2^23 (exact).
__device__ __forceinline__ float tf_small_int(u32 q) {
    return __int_as_float((int)(0x4b000000u | q)) - 8388608.0f;
}

// Element k of a row (row points at a unit boundary): tf_decode's value, with the codes of the
// formats below widened by tf_small_int (exact) instead of a conversion instruction.
template <int FMT>
__device__ __forceinline__ float tf_mmv_decode(const u8* row, int k) {
    if constexpr (FMT == FMT_Q4_0) {
        const int e = k & 31;
        const u8* b = row + (size_t)(k >> 5) * 18;
        const u8 q = b[2 + (e & 15)];
        const u32 v = e < 16 ? (q & 15u) : (u32)(q >> 4);
        // (float)(v - 8): 2^23 + v - (2^23 + 8), exact for v < 16.
        const float f = __int_as_float((int)(0x4b000000u | v)) - 8388616.0f;
        return tf_f16(tf_ld16(b)) * f;
    } else if constexpr (FMT == FMT_Q8_0) {
        const int e = k & 31;
        const u8* b = row + (size_t)(k >> 5) * 34;
        // (float)(signed char)c: 2^23 + (c ^ 128) - (2^23 + 128), exact.
        const float f = __int_as_float((int)(0x4b000000u | (u32)(b[2 + e] ^ 0x80u))) - 8388736.0f;
        return tf_f16(tf_ld16(b)) * f;
    } else if constexpr (FMT >= FMT_MLX2 && FMT <= FMT_MLX8) {
        constexpr int B = tf_mlx_bits(FMT);
        const u8* p = row + (size_t)(k >> 5) * (4 * B + 8);
        const int bit = (k & 31) * B;
        u32 v = p[bit >> 3];
        if (8 % B != 0) v |= (u32)p[(bit >> 3) + 1] << 8;
        const u32 q = (v >> (bit & 7)) & ((1u << B) - 1u);
        const float s = *(const float*)(p + 4 * B);
        const float bias = *(const float*)(p + 4 * B + 4);
        return s * tf_small_int(q) + bias;
    } else {
        return tf_decode<FMT>(row, k);
    }
}

// The 16 bytes at p that lie in [lo, hi), zeros elsewhere (a window's edge vectors only).
__device__ __noinline__ uint4 tf_mmv_edge(const u8* p, const u8* lo, const u8* hi) {
    u32 w[4] = {0u, 0u, 0u, 0u};
#pragma unroll 1
    for (int c = 0; c < 16; c++)
        if (p + c >= lo && p + c < hi) w[c >> 2] |= (u32)p[c] << (8 * (c & 3));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// Loads the 16-byte vectors of one chunk window (vector v at a0 + 16 v, v < nv) that thread
// `t` of the TPR threads streaming a row owns (read-only cache path); vectors not wholly inside
// [lo, hi) byte by byte within it.
template <int VEC, int TPR>
__device__ __forceinline__ void tf_chunk_fetch(uint4* v, const u8* a0, int nv, const u8* lo,
                                               const u8* hi, int t) {
#pragma unroll
    for (int u = 0; u < VEC; u++) {
        const int i = t + TPR * u;
        v[u] = make_uint4(0u, 0u, 0u, 0u);
        if (i < nv) {
            const u8* p = a0 + 16 * i;
            v[u] = p >= lo && p + 16 <= hi ? __ldg((const uint4*)p) : tf_mmv_edge(p, lo, hi);
        }
    }
}

// tf_mmv's fetch: 16 lanes a row.
__device__ __forceinline__ void tf_mmv_fetch(uint4* v, const u8* a0, int nv, const u8* lo,
                                             const u8* hi, int lane) {
    tf_chunk_fetch<MMV_VEC, 16>(v, a0, nv, lo, hi, lane);
}

// The window of chunk c (chunk_bytes each) of a row of rb bytes: its first byte aligned down to
// 16 (a0), the chunk's offset in it (delta) and its 16-byte vectors (nv).
__device__ __forceinline__ void tf_chunk_window(const u8* row, size_t rb, size_t chunk_bytes,
                                                int c, const u8** a0, int* delta, int* nv) {
    const u8* s = row + (size_t)c * chunk_bytes;
    const u8* e = s + chunk_bytes < row + rb ? s + chunk_bytes : row + rb;
    *a0 = (const u8*)((size_t)s & ~(size_t)15);
    *delta = (int)(s - *a0);
    *nv = (int)((e - *a0 + 15) >> 4);
}

// tf_mmv's window: chunks of tf_mmv_units(FMT) units.
template <int FMT>
__device__ __forceinline__ void tf_mmv_window(const u8* row, size_t rb, int c, const u8** a0,
                                              int* delta, int* nv) {
    tf_chunk_window(row, rb, (size_t)tf_mmv_units(FMT) * tf_unit_bytes(FMT), c, a0, delta, nv);
}

// One staged chunk of a row into the chains of NT activation rows (xk: row 0's input at the
// chunk's first column; row r at xk + r * cols): lane l's elements in ascending k (descending
// blocks when rev, the planted control), as tf_matmul.
template <int FMT, int NT>
__device__ __forceinline__ void tf_mmv_chunk(const u8* srow, const float* __restrict__ xk,
                                             int cols, int len, bool rev, int lane,
                                             float* acc) {
    if constexpr (FMT == FMT_MLX4 && NT == 1) {
        // One activation row: tf_mmv_decode's arithmetic with the unit's scale and bias read
        // once for both of the lane's elements (k = l and l + 16: byte l / 2 and 8 + l / 2, the
        // same nibble). (With more rows this loop made the kernel slower: docs/perf.md.)
        const int nb = len >> 5;
        const int byte = lane >> 1, sh = (lane & 1) << 2;
#pragma unroll 2
        for (int bi = 0; bi < nb; bi++) {
            const int b = rev ? nb - 1 - bi : bi;
            const u8* pu = srow + (size_t)b * 24;
            const float sc = *(const float*)(pu + 16), bs = *(const float*)(pu + 20);
            const float w0 = sc * tf_small_int(((u32)pu[byte] >> sh) & 15u) + bs;
            const float w1 = sc * tf_small_int(((u32)pu[8 + byte] >> sh) & 15u) + bs;
            const int kl = (b << 5) + lane;
#pragma unroll
            for (int r = 0; r < NT; r++) {
                acc[r] = fmaf(xk[(size_t)r * cols + kl], w0, acc[r]);
                acc[r] = fmaf(xk[(size_t)r * cols + kl + 16], w1, acc[r]);
            }
        }
    } else if (FMT >= FMT_Q4_0) {
        const int nb = len >> 5;
#pragma unroll 2
        for (int bi = 0; bi < nb; bi++) {
            const int b = rev ? nb - 1 - bi : bi;
            const int kl = (b << 5) + lane;
            const float w0 = tf_mmv_decode<FMT>(srow, kl);
            const float w1 = tf_mmv_decode<FMT>(srow, kl + 16);
#pragma unroll
            for (int r = 0; r < NT; r++) {
                acc[r] = fmaf(xk[(size_t)r * cols + kl], w0, acc[r]);
                acc[r] = fmaf(xk[(size_t)r * cols + kl + 16], w1, acc[r]);
            }
        }
    } else {
        for (int kl = lane; kl < len; kl += 16) {
            const float w = tf_mmv_decode<FMT>(srow, kl);
#pragma unroll
            for (int r = 0; r < NT; r++) acc[r] = fmaf(xk[(size_t)r * cols + kl], w, acc[r]);
        }
    }
}

// PLANT = 1: the planted control of tf_matmul (blocks in descending order when n > 1).
template <int FMT, int PLANT>
__device__ __forceinline__ void tf_mmv(u8* mmv_smem, const u8* __restrict__ W,
                                       const float* __restrict__ x, float* __restrict__ y, int n,
                                       int rows, int cols) {
    constexpr int UE = tf_unit_elems(FMT), NU = tf_mmv_units(FMT);
    const int lane = threadIdx.x & 15;
    u8* sb = mmv_smem + (size_t)((threadIdx.x >> 4) & (MMV_HALVES - 1)) * MMV_STRIDE;
    const int j = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 4);
    const bool active = j < rows;
    const bool reverse = PLANT == 1 && n > 1;
    const size_t rb = tf_row_bytes(FMT, cols);
    const u8* row = W + (size_t)(active ? j : 0) * rb;
    const u8* lo = W;
    const u8* hi = W + (size_t)rows * rb;
    const int units = (cols + UE - 1) / UE;
    const int nchunks = (units + NU - 1) / NU;
    for (int i0 = 0; i0 < n; i0 += MM_RT) {
        float acc[MM_RT];
#pragma unroll
        for (int r = 0; r < MM_RT; r++) acc[r] = 0.0f;
        const float* xr = x + (size_t)i0 * cols;
        uint4 v[MMV_VEC];
        const u8* a0;
        int delta, nv;
        tf_mmv_window<FMT>(row, rb, reverse ? nchunks - 1 : 0, &a0, &delta, &nv);
        tf_mmv_fetch(v, a0, nv, lo, hi, lane);
        for (int ci = 0; ci < nchunks; ci++) {
            const int c = reverse ? nchunks - 1 - ci : ci;
            const int cdelta = delta;
            __syncwarp();  // the previous chunk is consumed
#pragma unroll
            for (int u = 0; u < MMV_VEC; u++) ((uint4*)sb)[lane + 16 * u] = v[u];
            __syncwarp();
            if (ci + 1 < nchunks) {  // the next chunk's loads fly while this one is consumed
                tf_mmv_window<FMT>(row, rb, reverse ? c - 1 : c + 1, &a0, &delta, &nv);
                tf_mmv_fetch(v, a0, nv, lo, hi, lane);
            }
            const u8* srow = sb + cdelta;
            const int k_base = c * NU * UE;
            const int len = min(NU * UE, cols - k_base);
            const float* xk = xr + k_base;
            if (active) {
                // The tile's row count as a constant: no per-row tests in the inner loop.
                switch (min(MM_RT, n - i0)) {
                    case 1: tf_mmv_chunk<FMT, 1>(srow, xk, cols, len, reverse, lane, acc); break;
                    case 2: tf_mmv_chunk<FMT, 2>(srow, xk, cols, len, reverse, lane, acc); break;
                    case 3: tf_mmv_chunk<FMT, 3>(srow, xk, cols, len, reverse, lane, acc); break;
                    default: tf_mmv_chunk<FMT, MM_RT>(srow, xk, cols, len, reverse, lane, acc);
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

// ---- four lanes a thread (tf_mmq): the same arithmetic, fewer instructions a weight ----
//
// In tf_mmv every lane loads its x and its code bytes one element at a time. tf_mmq gives each
// thread four of a row's 16 lanes, l = 4q .. 4q + 3 (q = threadIdx.x & 3; four threads a row,
// MMQ_ROWS rows a 128-thread block): fewer loads and decode instructions a weight, but a quarter
// of the threads, so it pays only where a matrix has rows enough to keep the GPU busy (the
// launcher's choice, docs/perf.md). A chunk's four elements of those lanes are consecutive, so
// the thread reads their x as one float4 and their codes in one 32-bit word. acc[r][i] is lane 4q + i's chain, fed in
// ascending k as in tf_matmul; the fold is the same tree: (l, l + 8) across threads q and q + 2,
// (l, l + 4) across q and q + 1, then (l, l + 2) and (0, 1) inside thread q = 0 (tf_fold_quad).
// The four threads of a row stream it as tf_mmv's half-warp does (16-byte loads into shared
// memory, the next chunk in flight). Formats: Q4_0, Q4_1, Q8_0 and MLX affine (32-element
// units); launchers give these 4 threads a row (GpuFormat::matmul_threads_per_row).

#define MMQ_VEC 8                      // 16-byte loads per thread per chunk
#define MMQ_SPAN (4 * 16 * MMQ_VEC)    // bytes a row stages per chunk
#define MMQ_STRIDE (MMQ_SPAN + 16)     // shared bytes per row (offsets the banks)
#define MMQ_ROWS 32                    // rows per 128-thread block

// Formats tf_mmq serves (the rest stay on tf_mmv).
__host__ __device__ constexpr bool tf_mmq_format(int fmt) {
    return fmt == FMT_Q4_0 || fmt == FMT_Q4_1 || fmt == FMT_Q8_0 || tf_mlx_bits(fmt) > 0;
}

// Units per chunk: a chunk plus its misalignment (< 16 bytes) fits in MMQ_SPAN.
__host__ __device__ constexpr int tf_mmq_units(int fmt) {
    return (MMQ_SPAN - 16) / tf_unit_bytes(fmt);
}

// 32 bits at any byte address of shared memory: two aligned words, funnel-shifted (the word
// after p's may lie past the chunk; MMQ_STRIDE leaves room for it).
__device__ __forceinline__ u32 tf_smem_u32(const u8* p) {
    const u32* w = (const u32*)(p - ((size_t)p & 3));
    return __funnelshift_r(w[0], w[1], 8 * (int)((size_t)p & 3));
}

// 2^23 + byte i of v, as an f32 (one byte permute under the exponent byte 0x4b, from mg):
// exact, so subtracting 2^23 (+ an offset) gives the code as tf_decode's conversion does.
__device__ __forceinline__ float tf_byte_f(u32 v, int i, u32 mg = 0x4b000000u) {
    return __int_as_float((int)__byte_perm(v, mg, 0x7440 + i));
}

// The eight weights of lanes 4q .. 4q + 3 in a unit at p: w[4c + i] is element 16c + 4q + i,
// decoded with tf_decode's arithmetic (its PLANT variants included).
template <int FMT>
__device__ __forceinline__ void tf_mmq_decode(const u8* p, int q, float* w) {
    constexpr float M23 = 8388608.0f;  // 2^23
    if constexpr (FMT == FMT_Q4_0) {
        // Byte e of the 16 code bytes holds element e (low nibble) and e + 16 (high).
        const float d = tf_f16(tf_ld16(p));
        const u32 v = tf_smem_u32(p + 2 + 4 * q);
        const u32 nib[2] = {v & 0x0f0f0f0fu, (v >> 4) & 0x0f0f0f0fu};
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] = d * (tf_byte_f(nib[k >> 2], k & 3) - (M23 + 8.0f));
    } else if constexpr (FMT == FMT_Q4_1) {
        const float d = tf_f16(tf_ld16(p)), m = tf_f16(tf_ld16(p + 2));
        const u32 v = *(const u32*)(p + 4 + 4 * q);
        const u32 nib[2] = {v & 0x0f0f0f0fu, (v >> 4) & 0x0f0f0f0fu};
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] = fmaf(d, tf_byte_f(nib[k >> 2], k & 3) - M23, m);
    } else if constexpr (FMT == FMT_Q8_0) {
        // (float)(signed char)c: 2^23 + (c ^ 128) - (2^23 + 128), exact.
        const float d = tf_f16(tf_ld16(p));
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const u32 v = tf_smem_u32(p + 2 + 16 * c + 4 * q) ^ 0x80808080u;
#pragma unroll
            for (int i = 0; i < 4; i++) w[4 * c + i] = d * (tf_byte_f(v, i) - (M23 + 128.0f));
        }
    } else if constexpr (tf_mlx_bits(FMT) == 4 || tf_mlx_bits(FMT) == 8) {
        // MLX 4- and 8-bit: the four codes of a chunk are 16 or 32 aligned bits of the unit.
        // s * q rounds once: fmaf(s, 2^23 + q, -(s * 2^23)) is the exact s * q rounded once
        // (s * 2^23 is exact below |s| = 2^100; larger or non-finite scales take s * q).
        constexpr int B = tf_mlx_bits(FMT);
        const float s = *(const float*)(p + 4 * B);
        const float bias = *(const float*)(p + 4 * B + 4);
        const bool fast = fabsf(s) < 0x1p100f;
        const float ns = -(s * M23);
#pragma unroll
        for (int c = 0; c < 2; c++) {
            u32 code[4];
            if constexpr (B == 8) {
                const u32 v = *(const u32*)(p + 16 * c + 4 * q);
#pragma unroll
                for (int i = 0; i < 4; i++) code[i] = v;
            } else {
                // Elements 0..3 are nibbles 0..3 of the 16 bits: bytes 0, 1 of lo are
                // elements 0, 2; of hi, 1, 3 (FMT_PLANT_MLX4 takes each byte's other nibble).
                const u32 v = tf_ld16(p + 8 * c + 2 * q);
                const u32 lo = v & 0x0f0fu, hi = (v >> 4) & 0x0f0fu;
                const bool swap = FMT == FMT_PLANT_MLX4;
                code[0] = swap ? hi : lo;
                code[1] = swap ? lo : hi;
                code[2] = swap ? hi >> 8 : lo >> 8;
                code[3] = swap ? lo >> 8 : hi >> 8;
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float f = tf_byte_f(code[i], B == 8 ? i : 0);
                if constexpr (FMT == FMT_PLANT_MLX4_FMA)
                    w[4 * c + i] = fmaf(s, f - M23, bias);
                else
                    w[4 * c + i] = (fast ? fmaf(s, f, ns) : s * (f - M23)) + bias;
            }
        }
    } else {
        // The other MLX widths: element e at bits [e B, e B + B) of the unit; four consecutive
        // elements span 4 B <= 24 bits from a byte boundary (plus 4 bits when B is odd).
        constexpr int B = tf_mlx_bits(FMT);
        const float s = *(const float*)(p + 4 * B);
        const float bias = *(const float*)(p + 4 * B + 4);
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int bit = (16 * c + 4 * q) * B;
            const u32 v = tf_smem_u32(p + (bit >> 3)) >> (bit & 7);
#pragma unroll
            for (int i = 0; i < 4; i++)
                w[4 * c + i] = s * tf_small_int((v >> (i * B)) & ((1u << B) - 1u)) + bias;
        }
    }
}

// One staged chunk (nu units at srow; xk: row 0's x at the chunk's first column) into the chains
// of NT activation rows: units ascending (descending when rev, the planted control), within a
// unit its two 16-element chunks in order.
template <int FMT, int NT>
__device__ __forceinline__ void tf_mmq_chunk(const u8* srow, const float* __restrict__ xk,
                                             int cols, int nu, bool rev, int q,
                                             float (*acc)[4]) {
    constexpr int UB = tf_unit_bytes(FMT);
    const float* xq = xk + 4 * q;
#pragma unroll 2
    for (int ui = 0; ui < nu; ui++) {
        const int u = rev ? nu - 1 - ui : ui;
        float w[8];
        tf_mmq_decode<FMT>(srow + u * UB, q, w);
#pragma unroll
        for (int c = 0; c < 2; c++)
#pragma unroll
            for (int r = 0; r < NT; r++) {
                const float4 xv = __ldg((const float4*)(xq + r * cols + 32 * u + 16 * c));
                acc[r][0] = fmaf(xv.x, w[4 * c], acc[r][0]);
                acc[r][1] = fmaf(xv.y, w[4 * c + 1], acc[r][1]);
                acc[r][2] = fmaf(xv.z, w[4 * c + 2], acc[r][2]);
                acc[r][3] = fmaf(xv.w, w[4 * c + 3], acc[r][3]);
            }
    }
}

// The 16 lanes of a row, four per thread in threads q = 0..3, folded by the fixed tree (valid in
// q = 0). Every thread of the warp must call it.
__device__ __forceinline__ float tf_fold_quad(const float* a) {
    float s[4];
#pragma unroll
    for (int i = 0; i < 4; i++) s[i] = a[i] + __shfl_down_sync(TF_FULL_MASK, a[i], 2, 4);
#pragma unroll
    for (int i = 0; i < 4; i++) s[i] = s[i] + __shfl_down_sync(TF_FULL_MASK, s[i], 1, 4);
    return (s[0] + s[2]) + (s[1] + s[3]);
}

// PLANT = 1: the planted control of tf_matmul (units in descending order when n > 1).
template <int FMT, int PLANT>
__device__ __forceinline__ void tf_mmq(u8* mmq_smem, const u8* __restrict__ W,
                                       const float* __restrict__ x, float* __restrict__ y, int n,
                                       int rows, int cols) {
    constexpr int UB = tf_unit_bytes(FMT), NU = tf_mmq_units(FMT);
    const int q = threadIdx.x & 3;
    u8* sb = mmq_smem + (size_t)((threadIdx.x >> 2) & (MMQ_ROWS - 1)) * MMQ_STRIDE;
    const int j = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 2);
    const bool active = j < rows;
    const bool reverse = PLANT == 1 && n > 1;
    const size_t rb = tf_row_bytes(FMT, cols);
    const u8* row = W + (size_t)(active ? j : 0) * rb;
    const u8* lo = W;
    const u8* hi = W + (size_t)rows * rb;
    const int units = cols >> 5;
    const int nchunks = (units + NU - 1) / NU;
    for (int i0 = 0; i0 < n; i0 += MM_RT) {
        float acc[MM_RT][4];
#pragma unroll
        for (int r = 0; r < MM_RT; r++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[r][i] = 0.0f;
        const float* xr = x + (size_t)i0 * cols;
        uint4 v[MMQ_VEC];
        const u8* a0;
        int delta, nv;
        tf_chunk_window(row, rb, (size_t)NU * UB, reverse ? nchunks - 1 : 0, &a0, &delta, &nv);
        tf_chunk_fetch<MMQ_VEC, 4>(v, a0, nv, lo, hi, q);
        for (int ci = 0; ci < nchunks; ci++) {
            const int c = reverse ? nchunks - 1 - ci : ci;
            const int cdelta = delta;
            __syncwarp();  // the previous chunk is consumed
#pragma unroll
            for (int u = 0; u < MMQ_VEC; u++) ((uint4*)sb)[q + 4 * u] = v[u];
            __syncwarp();
            if (ci + 1 < nchunks) {  // the next chunk's loads fly while this one is consumed
                tf_chunk_window(row, rb, (size_t)NU * UB, reverse ? c - 1 : c + 1, &a0, &delta,
                                &nv);
                tf_chunk_fetch<MMQ_VEC, 4>(v, a0, nv, lo, hi, q);
            }
            const u8* srow = sb + cdelta;
            const int nu = min(NU, units - c * NU);
            const float* xk = xr + (size_t)c * NU * 32;
            if (active) {
                switch (min(MM_RT, n - i0)) {
                    case 1: tf_mmq_chunk<FMT, 1>(srow, xk, cols, nu, reverse, q, acc); break;
                    case 2: tf_mmq_chunk<FMT, 2>(srow, xk, cols, nu, reverse, q, acc); break;
                    case 3: tf_mmq_chunk<FMT, 3>(srow, xk, cols, nu, reverse, q, acc); break;
                    default: tf_mmq_chunk<FMT, MM_RT>(srow, xk, cols, nu, reverse, q, acc);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < MM_RT; r++) {
            const float s = tf_fold_quad(acc[r]);
            if (active && q == 0 && i0 + r < n) y[(size_t)(i0 + r) * rows + j] = s;
        }
    }
}

// The template behind the matmul entries (and the grouped expert matmuls of moe.cu). MMQ = 0
// runs tf_mmv (16 threads a row), MMQ = 1 tf_mmq (4 threads a row, tf_mmq's formats only). Each
// geometry has entries of its own (NAME and NAME_mmq) so that each gets its own register count;
// the launcher picks one (GpuFormat::matmul_threads_per_row). Both give tf_matmul's bits, so the
// choice never changes an output.
template <int FMT, int PLANT, int MMQ>
__device__ __forceinline__ void tf_matmul_rows(const u8* __restrict__ W,
                                               const float* __restrict__ x,
                                               float* __restrict__ y, int n, int rows, int cols) {
    if constexpr (MMQ) {
        static_assert(tf_mmq_format(FMT), "tf_mmq does not serve this format");
        __shared__ __align__(16) u8 smem[MMQ_ROWS * MMQ_STRIDE];
        tf_mmq<FMT, PLANT>(smem, W, x, y, n, rows, cols);
    } else {
        __shared__ __align__(16) u8 smem[MMV_HALVES * MMV_STRIDE];
        tf_mmv<FMT, PLANT>(smem, W, x, y, n, rows, cols);
    }
}
#define TF_MATMUL_IMPL tf_matmul_rows

// NAME: 16 threads a row.
#define TF_MATMUL_ENTRY(NAME, FMT, PLANT)                                                     \
    extern "C" __global__ void NAME(const u8* W, const float* x, float* y, int n, int rows,  \
                                    int cols) { tf_follow();                                  \
        TF_MATMUL_IMPL<FMT, PLANT, 0>(W, x, y, n, rows, cols);                                \
    }
// NAME and NAME_mmq (4 threads a row), for tf_mmq's formats.
#define TF_MATMUL_ENTRIES(NAME, FMT, PLANT)                                                   \
    TF_MATMUL_ENTRY(NAME, FMT, PLANT)                                                         \
    extern "C" __global__ void NAME##_mmq(const u8* W, const float* x, float* y, int n,       \
                                          int rows, int cols) { tf_follow();                  \
        TF_MATMUL_IMPL<FMT, PLANT, 1>(W, x, y, n, rows, cols);                                \
    }

TF_MATMUL_ENTRY(tf_matmul_f32, FMT_F32, 0)
TF_MATMUL_ENTRY(tf_matmul_f16, FMT_F16, 0)
TF_MATMUL_ENTRY(tf_matmul_bf16, FMT_BF16, 0)
TF_MATMUL_ENTRIES(tf_matmul_q4_0, FMT_Q4_0, 0)
TF_MATMUL_ENTRIES(tf_matmul_q4_1, FMT_Q4_1, 0)
TF_MATMUL_ENTRIES(tf_matmul_q8_0, FMT_Q8_0, 0)
TF_MATMUL_ENTRIES(tf_plant_matmul_q4_1_rowvar, FMT_Q4_1, 1)

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
        tf_follow();                                                                          \
        tf_embed<FMT>(W, tokens, out, cols);                                                  \
    }

TF_EMBED_ENTRY(tf_embed_f32, FMT_F32)
TF_EMBED_ENTRY(tf_embed_f16, FMT_F16)
TF_EMBED_ENTRY(tf_embed_bf16, FMT_BF16)
TF_EMBED_ENTRY(tf_embed_q4_0, FMT_Q4_0)
TF_EMBED_ENTRY(tf_embed_q4_1, FMT_Q4_1)
TF_EMBED_ENTRY(tf_embed_q8_0, FMT_Q8_0)
