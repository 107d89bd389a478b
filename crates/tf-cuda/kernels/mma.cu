// MLX 4-bit matrix products on the tensor cores (tf_mma_mlx4_*): mma.sync m16n8k16 with bf16
// inputs and f32 sums, for matrices whose MLX groups are whole multiples of 64 columns
// (src/mma.rs). An output's arithmetic depends only on its weight row and its x row: the same
// for any number of rows in a call and any tiles a block (RT).
//
// Weights ("mma tiles", made on the device from the rows layout by tf_mma_tile_mlx4): 16-row
// tiles (rows past the matrix's end are zero). Tile T, group G of 64 columns: 512 bytes of
// codes, 16 a lane: lane L's u32 m (columns 64 G + 16 m ..) holds its A fragment's 8 codes,
// nibble r the low and nibble r + 4 the high half of register r. With g = L / 4, t = L % 4 and
// k = 16 m: register 0 is row g, columns k + 2t, k + 2t + 1; register 1 row g + 8, the same
// columns; registers 2 and 3 the same rows, columns + 8 (the PTX ISA's m16n8k16 A layout).
// After every tile's codes: f32 (s, b - 128 s) for (T, G, row r of the tile), at (T groups + G)
// 16 + 2 (r % 8) + r / 8 (rows r and r + 8 side by side: a lane's two pairs in one load); or,
// in the compact tiles (entries NAME_b16; src/mma.rs), their bf16 pair (s in the low half, b
// in the high) as a u32 there, the kernel forming b - 128 s as the tile maker does
// (tf_mma_sb): the same f32 values, 576 bytes a tile and group, as the checkpoint holds them,
// against 640.
//
// x (f32, n rows), 4 or 8 rows a block. Each value is split into bf16 parts hi = bf16(v) and
// lo = bf16(v - hi); per 16 columns the tensor cores sum 128 + q (exact in bf16) against each
// part, the high and the low sums each carried through the group's four k-steps and added
// once; X, the group's sum of the parts, comes the same way from the same fragments times a
// matrix of ones. A group adds s Σ (128 + q) x + (b - 128 s) X to its outputs (two FMAs; the
// tiles hold b - 128 s); warp w takes groups w, w + MMA_KW, ... and the warps' sums are added
// in warp order. 8 rows a block (F = 2): lane (g, t) feeds row g, its high and low parts in two
// mmas. 4 rows a block (F = 1, calls of at most four rows): a row takes two B columns, 2c its
// high and 2c + 1 its low parts, so one mma serves all four, half the mmas of F = 2. The tensor
// cores sum each D column on its own, so both give the same bits.
//
// x split once a call (tf_mma_split, or the norm that writes it: norm_split.cu): for each (row,
// group) 16 uint4 of parts, the high (half 0) or low (half 1) parts of a lane's column pairs k +
// 2t and k + 2t + 8 of k-steps 0 and 1 in uint4 2t + half, of k-steps 2 and 3 eight on
// (tf_mma_part_at: a four-row lane reads its half in two 16-byte loads, each of a warp's over
// 128 contiguous bytes); and the group's X at sums[row * groups + G], from the same fragments
// times the same ones, in the same order: the bits the products compute in place, which the
// split products (tf_mma_mlx4_r*_split) read instead.

#define MMA_KW 16     // warps a block along the groups (fixed: it orders an output's sum)
#define MMA_MOE_KW 4  // the same for the grouped expert products (moe.cu), whose K is small

#ifdef TF_HOST_SIMT
// Host stand-ins (src/mma/host.rs's emulation): bf16 rounding to nearest even (finite values),
// and the m16n8k16 product from the PTX ISA's fragment layouts, each lane's D entries summed
// in double and rounded once (the hardware's own summation is not modelled).
struct float2 { float x, y; };
static inline u32 tf_mma_bf16(float f) {
    u32 b;
    std::memcpy(&b, &f, 4);
    return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
}
static inline u32 tf_mma_bf16x2(float lo, float hi) {
    return tf_mma_bf16(lo) | tf_mma_bf16(hi) << 16;
}
static inline float tf_mma_lo(u32 v) { return __int_as_float((int)(v << 16)); }
static inline float tf_mma_hi(u32 v) { return __int_as_float((int)(v & 0xffff0000u)); }
static u32 tf_mma_frag[64][32][6];
static float tf_mma_acc[64][32][4];
static inline void tf_mma_16816(float* d, const u32* a, u32 b0, u32 b1) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int r = 0; r < 4; r++) tf_mma_frag[w][lane][r] = a[r], tf_mma_acc[w][lane][r] = d[r];
    tf_mma_frag[w][lane][4] = b0, tf_mma_frag[w][lane][5] = b1;
    tf_warp_bars[w]->arrive_and_wait();
    // A[i][k]: lane 4 (i % 8) + (k % 8) / 2, register i / 8 + 2 (k / 8), half k % 2.
    auto A = [&](int i, int k) {
        const u32 v = tf_mma_frag[w][4 * (i % 8) + (k % 8) / 2][i / 8 + 2 * (k / 8)];
        return k % 2 ? tf_mma_hi(v) : tf_mma_lo(v);
    };
    // B[k][j]: lane 4 j + (k % 8) / 2, register k / 8, half k % 2.
    auto B = [&](int k, int j) {
        const u32 v = tf_mma_frag[w][4 * j + (k % 8) / 2][4 + k / 8];
        return k % 2 ? tf_mma_hi(v) : tf_mma_lo(v);
    };
    float out[4];
    for (int r = 0; r < 4; r++) {
        // D entry r of this lane: row lane / 4 + 8 (r / 2), column 2 (lane % 4) + r % 2.
        const int i = lane / 4 + 8 * (r / 2), j = 2 * (lane % 4) + r % 2;
        double acc = tf_mma_acc[w][lane][r];
        for (int k = 0; k < 16; k++) acc += (double)A(i, k) * (double)B(k, j);
        out[r] = (float)acc;
    }
    tf_warp_bars[w]->arrive_and_wait();
    for (int r = 0; r < 4; r++) d[r] = out[r];
}
#else
__device__ __forceinline__ u32 tf_mma_bf16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ float tf_mma_lo(u32 v) { return __int_as_float((int)(v << 16)); }
__device__ __forceinline__ float tf_mma_hi(u32 v) { return __int_as_float((int)(v & 0xffff0000u)); }
__device__ __forceinline__ void tf_mma_16816(float* d, const u32* a, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

// 0x000f000f held in a register the compiler cannot fold (n >= 0, so its sign bit is 0): LOP3
// then takes one immediate, 0x43004300, and the mask needs no move before each use.
__device__ __forceinline__ u32 tf_mma_mask(int n) { return 0x000f000fu | ((u32)n & 0x80000000u); }

// The A registers of code word v: bf16 pairs 128 + q, by one LOP3 (the 128 is taken off in the
// epilogue, through the tiles' b - 128 s).
__device__ __forceinline__ void tf_mma_codes(u32 v, u32* a, u32 mask) {
#pragma unroll
    for (int r = 0; r < 4; r++) a[r] = ((v >> (4 * r)) & mask) | 0x43004300u;
}

// The bf16 parts of a pair of x values: hi = bf16(v), lo = bf16(v - hi).
__device__ __forceinline__ void tf_mma_split(float2 v, u32& hi, u32& lo) {
    hi = tf_mma_bf16x2(v.x, v.y);
    lo = tf_mma_bf16x2(v.x - tf_mma_lo(hi), v.y - tf_mma_hi(hi));
}

// A lane's B registers of one k-step from its pairs a (columns k + 2t) and b (+ 8): (h0, h1,
// l0, l1).
__device__ __forceinline__ uint4 tf_mma_parts_of(float2 a, float2 b) {
    uint4 v;
    tf_mma_split(a, v.x, v.z);
    tf_mma_split(b, v.y, v.w);
    return v;
}

// The same from x at p, through the read-only cache.
__device__ __forceinline__ uint4 tf_mma_parts(const float* p) {
    return tf_mma_parts_of(__ldg((const float2*)p), __ldg((const float2*)(p + 8)));
}

// A tile row's (s, b - 128 s) for a group, from the tiles' f32 pair or their compact bf16 pair
// (s, b): 128 s is exact, so b - 128 s rounds once, as tf_mma_tile_mlx4 forms it.
__device__ __forceinline__ float2 tf_mma_sb(float2 v) { return v; }
__device__ __forceinline__ float2 tf_mma_sb(u32 v) {
    float2 r;
    r.x = __int_as_float((int)(v << 16));
    r.y = __int_as_float((int)(v & 0xffff0000u)) - 128.0f * r.x;
    return r;
}

// One group's weights for a lane: the codes of RT tiles, the scale pairs (SB: float2 or the
// compact u32) of its rows g and g + 8; and where x comes split, the group's X of the lane's D
// columns' x rows (F of them: t, or 2t and 2t + 1).
template <int RT, int F, class SB>
struct TfMmaGroup {
    uint4 q[RT];
    SB lo[RT], hi[RT];
    float X[F];
};

// A lane's scale pairs of a tile and group, rows g and g + 8, side by side at p: one load.
__device__ __forceinline__ void tf_mma_pairs(const u32* p, u32& lo, u32& hi) {
    const uint2 v = __ldg((const uint2*)p);
    lo = v.x, hi = v.y;
}
__device__ __forceinline__ void tf_mma_pairs(const float2* p, float2& lo, float2& hi) {
    const float4 v = __ldg((const float4*)p);
    lo.x = v.x, lo.y = v.y, hi.x = v.z, hi.y = v.w;
}

// The group of the RT tiles at wp, sp (and SPLIT, its X at xs), which then move KW groups on.
template <int RT, int KW, int F, int SPLIT, class SB>
__device__ __forceinline__ void tf_mma_load(TfMmaGroup<RT, F, SB>& d, const uint4** wp,
                                            const SB** sp, const float** xs) {
#pragma unroll
    for (int r = 0; r < RT; r++) {
        d.q[r] = __ldg(wp[r]);
        tf_mma_pairs(sp[r], d.lo[r], d.hi[r]);
        wp[r] += 32 * KW, sp[r] += 16 * KW;
    }
    if (SPLIT) {
#pragma unroll
        for (int c = 0; c < F; c++) d.X[c] = __ldg(xs[c]), xs[c] += KW;
    }
}

// A lane's x row's parts (h0, h1, l0, l1: the hi and lo parts of the pairs at columns k + 2t
// and k + 2t + 8) of its group's four k-steps (`all`), split in the lane from x in global
// memory (STAGED 0), read from the block's staging in shared memory (1) or from x split once a
// call in global memory (2), the same values; from the last two, `halves` reads only the pairs
// its B column takes in the four-row layout (the high parts for even g, the low for odd).
template <int STAGED, int KW>
struct TfMmaX;

// Where lane t's parts of one half (0 high, 1 low) of k-steps 0 and 1 are among a (row,
// group)'s 16 uint4 of the split; those of k-steps 2 and 3 are eight on.
__device__ __forceinline__ int tf_mma_part_at(int t, int half) { return 2 * t + half; }
template <int KW>
struct TfMmaX<0, KW> {
    const float* p;  // the lane's x row at column 64 G + 2t
    __device__ __forceinline__ void all(uint4 (&v)[4]) const {
#pragma unroll
        for (int m = 0; m < 4; m++) v[m] = tf_mma_parts(p + 16 * m);
    }
    __device__ __forceinline__ void next() { p += 64 * KW; }
};
template <int KW>
struct TfMmaX<1, KW> {
    const uint4* p;  // the staging at (the lane's row, G, m = 0, t)
    int odd;         // the lane's column g is odd
    __device__ __forceinline__ void all(uint4 (&v)[4]) const {
#pragma unroll
        for (int m = 0; m < 4; m++) v[m] = p[4 * m];
    }
    __device__ __forceinline__ void halves(uint2 (&h)[4]) const {
#pragma unroll
        for (int m = 0; m < 4; m++) h[m] = ((const uint2*)(p + 4 * m))[odd];
    }
    __device__ __forceinline__ void next() { p += 16 * KW; }
};
template <int KW>
struct TfMmaX<2, KW> {
    const uint4* p;  // the split at (the lane's row, G): its 16 uint4
    int t, odd;      // the lane's t, and whether its column g is odd
    // One half's parts of the group's four k-steps: two loads.
    __device__ __forceinline__ void side(int half, uint2 (&h)[4]) const {
        const uint4* q = p + tf_mma_part_at(t, half);
        const uint4 a = __ldg(q), b = __ldg(q + 8);
        h[0].x = a.x, h[0].y = a.y, h[1].x = a.z, h[1].y = a.w;
        h[2].x = b.x, h[2].y = b.y, h[3].x = b.z, h[3].y = b.w;
    }
    __device__ __forceinline__ void halves(uint2 (&h)[4]) const { side(odd, h); }
    __device__ __forceinline__ void all(uint4 (&v)[4]) const {
        uint2 h[4], l[4];
        side(0, h);
        side(1, l);
#pragma unroll
        for (int m = 0; m < 4; m++) v[m] = make_uint4(h[m].x, h[m].y, l[m].x, l[m].y);
    }
    __device__ __forceinline__ void next() { p += 16 * KW; }
};

// x split once a call whose sums were not made (an epilogue's split, tf_mma_relu2_out): the
// same parts, X summed in place from them (STAGED 3, the _xin entries).
template <int KW>
struct TfMmaX<3, KW> : TfMmaX<2, KW> {};

// One group of this lane's x (which then moves KW groups on) into yacc; X from the split
// (STAGED 2) or summed here (0, 1 and 3). F = 1, four x rows: B column g is row g / 2's high (g
// even) or low (g odd) parts, so one mma a k-step; F = 2, eight x rows: column g is row g, its
// high and low parts in two mmas with sums of their own. Either way an output's high and low sums are
// carried through the group's four k-steps and added once. PLANT (a planted control): the low
// parts dropped when the call has several rows.
template <int RT, int KW, int STAGED, int PLANT, int F, class SB>
__device__ __forceinline__ void tf_mma_group(const TfMmaGroup<RT, F, SB>& d, TfMmaX<STAGED, KW>& xr,
                                             u32 mask, int n, float (*yacc)[2 * F]) {
    u32 a[RT][4][4];
#pragma unroll
    for (int r = 0; r < RT; r++) {
        const u32 words[4] = {d.q[r].x, d.q[r].y, d.q[r].z, d.q[r].w};
#pragma unroll
        for (int m = 0; m < 4; m++) tf_mma_codes(words[m], a[r][m], mask);
    }
    const u32 ones[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};
    // acc[r][0] the high parts' sums, acc[r][1] the low parts' (F = 2); X the same against ones.
    float acc[RT][F][4], X[F][4];
#pragma unroll
    for (int c = 0; c < F; c++)
#pragma unroll
        for (int v = 0; v < 4; v++) {
            X[c][v] = 0.0f;
#pragma unroll
            for (int r = 0; r < RT; r++) acc[r][c][v] = 0.0f;
        }
    static_assert(F == 2 || STAGED != 0, "four-row products read x staged or split");
    uint2 bh[4];
    uint4 bv[4];
    if constexpr (F == 1)
        xr.halves(bh);
    else
        xr.all(bv);
#pragma unroll
    for (int m = 0; m < 4; m++) {
        if constexpr (F == 1) {
            uint2 b = bh[m];
            if (PLANT == 1 && n > 1 && xr.odd) b.x = 0u, b.y = 0u;
#pragma unroll
            for (int r = 0; r < RT; r++) tf_mma_16816(acc[r][0], a[r][m], b.x, b.y);
            if (STAGED != 2) tf_mma_16816(X[0], ones, b.x, b.y);
        } else {
            const uint4 v = bv[m];
            const bool drop = PLANT == 1 && n > 1;
            const u32 l0 = drop ? 0u : v.z, l1 = drop ? 0u : v.w;
#pragma unroll
            for (int r = 0; r < RT; r++) {
                tf_mma_16816(acc[r][0], a[r][m], v.x, v.y);
                tf_mma_16816(acc[r][1], a[r][m], l0, l1);
            }
            if (STAGED != 2) {
                tf_mma_16816(X[0], ones, v.x, v.y);
                tf_mma_16816(X[1], ones, l0, l1);
            }
        }
    }
    xr.next();
    // D entry v of a lane: tile row g + 8 (v / 2), column 2t + v % 2. F = 1: columns 2t and
    // 2t + 1 are x row t's high and low sums, so yacc[r][h] is (tile row g + 8h, x row t);
    // F = 2: yacc[r][v] is (tile row g + 8 (v / 2), x row 2t + v % 2).
#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
        for (int o = 0; o < 2 * F; o++) {
            const float2 sc = tf_mma_sb((F == 1 ? o : o >> 1) ? d.hi[r] : d.lo[r]);
            const int c = F == 1 ? 0 : o & 1;  // the x row's X among the lane's
            const float s = F == 1 ? acc[r][0][2 * o] + acc[r][0][2 * o + 1]
                                   : acc[r][0][o] + acc[r][1][o];
            const float xv = STAGED == 2 ? d.X[c]
                                         : (F == 1 ? X[0][0] + X[0][1] : X[0][c] + X[1][c]);
            yacc[r][o] = fmaf(sc.x, s, fmaf(sc.y, xv, yacc[r][o]));
        }
}

// One group of the body's loop: tf_mma_group, or in the loads probes (PLANT 2 to 5;
// tf-cuda-mmbench only, never a model's path) the group's loaded words folded by XOR into yacc:
// the same loads without the arithmetic (2), without x's parts (3), the codes and scale pairs
// alone (4), the codes alone (5). A load whose word is not folded is not made.
template <int RT, int KW, int STAGED, int PLANT, int F, class SB>
__device__ __forceinline__ void tf_mma_step(const TfMmaGroup<RT, F, SB>& d,
                                            TfMmaX<STAGED, KW>& xr, u32 mask, int n,
                                            float (*yacc)[2 * F]) {
    if constexpr (PLANT >= 2) {
        static_assert(STAGED == 2 && F == 1, "the loads probe is of the four-row split product");
        u32 f = 0u;
#pragma unroll
        for (int r = 0; r < RT; r++) {
            f ^= d.q[r].x ^ d.q[r].y ^ d.q[r].z ^ d.q[r].w;
            if (PLANT <= 4) f ^= d.lo[r] ^ d.hi[r];
        }
        if (PLANT <= 3) f ^= (u32)__float_as_int(d.X[0]);
        if (PLANT == 2) {
            uint2 h[4];
            xr.halves(h);
#pragma unroll
            for (int m = 0; m < 4; m++) f ^= h[m].x ^ h[m].y;
        }
        xr.next();
        yacc[0][0] += (float)(f & 1023u);
    } else {
        tf_mma_group<RT, KW, STAGED, PLANT, F>(d, xr, mask, n, yacc);
    }
}

// Where value c (0 .. 63) of a (row, group)'s split has its part `half` (0 high, 1 low): a
// 16-bit index among the group's 128, as tf_mma_split_group stores it (c = 16 m + 8 s + 2 t +
// e: k-step m, pair s of lane t, element e).
__device__ __forceinline__ int tf_mma_part_u16(int c, int half) {
    const int m = c >> 4, s = (c >> 3) & 1, t = (c >> 1) & 3, e = c & 1;
    return 2 * (4 * (tf_mma_part_at(t, half) + 8 * (m >> 1)) + 2 * (m & 1) + s) + e;
}

// Output `out` of a row whose value is v: relu²'d into act[out] (tf_moe_relu2's r * r) and its
// parts into the row's split (parts: its group 0), the values tf_moe_relu2_split stores; not
// its group's X, which the products reading it sum in place (STAGED 3).
__device__ __forceinline__ void tf_mma_relu2_out(float v, int out, float* __restrict__ act,
                                                 uint4* __restrict__ parts) {
    const float r = v > 0.0f ? v : 0.0f, q = r * r;
    act[out] = q;
    const u32 hi = tf_mma_bf16x2(q, 0.0f) & 0xffffu;
    const u32 lo = tf_mma_bf16x2(q - tf_mma_lo(hi), 0.0f) & 0xffffu;
    unsigned short* at = (unsigned short*)(parts + (size_t)(out >> 6) * 16);
    at[tf_mma_part_u16(out & 63, 0)] = (unsigned short)hi;
    at[tf_mma_part_u16(out & 63, 1)] = (unsigned short)lo;
}

// y[j, row] for x rows j0 .. j0 + 4F - 1 (< n) and tiles tile0 .. tile0 + RT - 1 of a matrix
// of `rows` rows whose tiles' codes are at wq and scale pairs at sb; KW warps along the groups, two
// groups' loads in turn so one is in flight while the other is multiplied. STAGED: the block
// first splits its x rows (at most 4F) into shared memory, a uint4 (h0, h1, l0, l1) for each
// (row, group, k-step m, t), so that a lane reads them once instead of all 32 lanes splitting
// copies (dynamic shared memory: rows x groups x 256 bytes); STAGED 2: x split once a call, at
// xp and xsum (x unused); STAGED 3: split at xp, X summed in place (xsum unused). RELU2: each
// output also relu²'d into act and split into aparts as it is stored (tf_mma_relu2_out; rows a
// multiple of 64), at the rows y's are.
template <int RT, int KW, int STAGED, int PLANT, int F, class SB, int RELU2 = 0>
__device__ __forceinline__ void tf_mma_body(const uint4* __restrict__ wq,
                                            const SB* __restrict__ sb,
                                            const float* __restrict__ x, float* __restrict__ y,
                                            int n, int j0, int tile0, int rows, int cols,
                                            const uint4* __restrict__ xp = nullptr,
                                            const float* __restrict__ xsum = nullptr,
                                            float* __restrict__ act = nullptr,
                                            uint4* __restrict__ aparts = nullptr) {
    __shared__ float red[KW][32][2 * F];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int groups = cols >> 6, tiles = (rows + 15) >> 4;
    const uint4* wp[RT];
    const SB* sp[RT];
#pragma unroll
    for (int r = 0; r < RT; r++) {
        const size_t tg = (size_t)min(tile0 + r, tiles - 1) * groups + w;
        wp[r] = wq + tg * 32 + lane;
        sp[r] = sb + tg * 16 + 2 * g;
    }
    // The lane's x row (its B column's) and those of its D columns (F of them). A lane past
    // the last x row reads the last (its D columns are not stored; columns do not mix).
    const int live = min(4 * F, n - j0);
    const int row = min(F == 1 ? g >> 1 : g, live - 1);
    TfMmaX<STAGED, KW> xr;
    const float* xs[F];
    if constexpr (STAGED >= 2) {
        xr.p = xp + ((size_t)(j0 + row) * groups + w) * 16;
        xr.t = t;
        xr.odd = g & 1;
        if constexpr (STAGED == 2)
#pragma unroll
            for (int c = 0; c < F; c++)
                xs[c] = xsum + (size_t)(j0 + min(F == 1 ? t : 2 * t + c, live - 1)) * groups + w;
    } else if constexpr (STAGED == 1) {
#ifdef TF_HOST_SIMT
        uint4* st = (uint4*)tf_dyn_smem;
#else
        extern __shared__ uint4 st[];
#endif
        for (int i = threadIdx.x; i < live * groups * 16; i += blockDim.x) {
            const int rg = i >> 4, m = (i >> 2) & 3, tt = i & 3;
            st[i] = tf_mma_parts(x + (size_t)(j0 + rg / groups) * cols + 64 * (rg % groups) +
                                 16 * m + 2 * tt);
        }
        __syncthreads();
        xr.p = st + ((size_t)row * groups + w) * 16 + t;
        xr.odd = g & 1;
    } else {
        xr.p = x + (size_t)(j0 + row) * cols + 64 * w + 2 * t;
    }
    float yacc[RT][2 * F];
#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
        for (int o = 0; o < 2 * F; o++) yacc[r][o] = 0.0f;
    const int steps = w < groups ? (groups - 1 - w) / KW + 1 : 0;
    const u32 mask = tf_mma_mask(rows);
    TfMmaGroup<RT, F, SB> a, b;
    if (steps > 0) tf_mma_load<RT, KW, F, STAGED == 2>(a, wp, sp, xs);
    for (int i = 0; i < steps; i += 2) {
        if (i + 1 < steps) tf_mma_load<RT, KW, F, STAGED == 2>(b, wp, sp, xs);
        tf_mma_step<RT, KW, STAGED, PLANT, F>(a, xr, mask, n, yacc);
        if (i + 1 >= steps) break;
        if (i + 2 < steps) tf_mma_load<RT, KW, F, STAGED == 2>(a, wp, sp, xs);
        tf_mma_step<RT, KW, STAGED, PLANT, F>(b, xr, mask, n, yacc);
    }
    // The warps' sums in warp order, a tile at a time.
#pragma unroll
    for (int r = 0; r < RT; r++) {
#pragma unroll
        for (int o = 0; o < 2 * F; o++) red[w][lane][o] = yacc[r][o];
        __syncthreads();
        if (w == 0 && tile0 + r < tiles)
#pragma unroll
            for (int o = 0; o < 2 * F; o++) {
                float sum = red[0][lane][o];
                for (int k = 1; k < KW; k++) sum = sum + red[k][lane][o];
                const int out = 16 * (tile0 + r) + g + 8 * (F == 1 ? o : o >> 1);
                const int j = j0 + (F == 1 ? t : 2 * t + (o & 1));
                if (out < rows && j < n) {
                    y[(size_t)j * rows + out] = sum;
                    if constexpr (RELU2)
                        tf_mma_relu2_out(sum, out, act + (size_t)j * rows,
                                         aparts + (size_t)j * (rows >> 6) * 16);
                }
            }
        __syncthreads();
    }
}

// The codes of a matrix's tiles at W, then their scale pairs (tiles of `rows` rows, `cols`
// columns).
template <class SB>
__device__ __forceinline__ const SB* tf_mma_scales(const u8* W, size_t tiles, int cols) {
    return (const SB*)(W + tiles * (cols >> 6) * 512);
}

// Block (bx, by) takes tiles RT bx .. and x rows 4F by ...
template <int RT, int STAGED, int PLANT, int F, class SB>
__device__ __forceinline__ void tf_mma_mlx4(const u8* __restrict__ W, const float* __restrict__ x,
                                            float* __restrict__ y, int n, int rows, int cols) {
    tf_mma_body<RT, MMA_KW, STAGED, PLANT, F>((const uint4*)W,
                                              tf_mma_scales<SB>(W, (rows + 15) >> 4, cols), x, y,
                                              n, blockIdx.y * 4 * F, blockIdx.x * RT, rows, cols);
}

// tf_mma_mlx4_r{RT}[_staged]: MMA_KW warps a block, RT tiles and 4F x rows a block (the staged
// entries, for one row, F = 1); at one tile, registers for two blocks an SM. NAME reads the f32
// scale pairs, NAME_b16 the compact ones.
#define TF_MMA_ENTRY_SB(NAME, RT, STAGED, PLANT, F, SB)                                        \
    extern "C" __global__ void __launch_bounds__(32 * MMA_KW, RT == 1 ? 2 : 1)                 \
        NAME(const u8* W, const float* x, float* y, int n, int rows, int cols) {               \
        tf_follow();                                                                           \
        tf_mma_mlx4<RT, STAGED, PLANT, F, SB>(W, x, y, n, rows, cols);                         \
    }
#define TF_MMA_ENTRY(NAME, RT, STAGED, PLANT, F)                                               \
    TF_MMA_ENTRY_SB(NAME, RT, STAGED, PLANT, F, float2)                                        \
    TF_MMA_ENTRY_SB(NAME##_b16, RT, STAGED, PLANT, F, u32)
TF_MMA_ENTRY(tf_mma_mlx4_r1, 1, 0, 0, 2)
TF_MMA_ENTRY(tf_mma_mlx4_r2, 2, 0, 0, 2)
TF_MMA_ENTRY(tf_mma_mlx4_r1_staged, 1, 1, 0, 1)
TF_MMA_ENTRY(tf_mma_mlx4_r2_staged, 2, 1, 0, 1)
TF_MMA_ENTRY(tf_plant_mma_mlx4_rowvar, 1, 0, 1, 2)

// tf_mma_mlx4_r{RT}_split[_x4]: the same products of x split once a call (parts xp, sums
// xsum), 8 x rows a block, or 4 (_x4); NAME_b16 the same of compact tiles. Only the tiles
// from .. to - 1 (from a multiple of RT; to one too, or the last tile), RT at a time, the
// block bx taking from + RT bx, then every RT gridDim.x after: a tile's outputs the same
// whichever block takes it, so a product may run as spans, or on fewer blocks than tiles.
#define TF_MMA_SPLIT_ENTRY_SB(NAME, RT, F, SB, PLANT)                                          \
    extern "C" __global__ void __launch_bounds__(32 * MMA_KW, RT == 1 ? 2 : 1)                 \
        NAME(const u8* W, const uint4* xp, const float* xsum, float* y, int n, int rows,       \
             int cols, int from, int to) {                                                     \
        tf_follow();                                                                           \
        const SB* sb = tf_mma_scales<SB>(W, (rows + 15) >> 4, cols);                           \
        for (int t0 = from + (int)blockIdx.x * RT; t0 < to; t0 += (int)gridDim.x * RT)         \
            tf_mma_body<RT, MMA_KW, 2, PLANT, F>((const uint4*)W, sb, nullptr, y, n,           \
                                                 blockIdx.y * 4 * F, t0, rows, cols, xp, xsum); \
    }
#define TF_MMA_SPLIT_ENTRY(NAME, RT, F)                                                        \
    TF_MMA_SPLIT_ENTRY_SB(NAME, RT, F, float2, 0)                                              \
    TF_MMA_SPLIT_ENTRY_SB(NAME##_b16, RT, F, u32, 0)
TF_MMA_SPLIT_ENTRY(tf_mma_mlx4_r1_split, 1, 2)
TF_MMA_SPLIT_ENTRY(tf_mma_mlx4_r2_split, 2, 2)
TF_MMA_SPLIT_ENTRY(tf_mma_mlx4_r1_split_x4, 1, 1)
TF_MMA_SPLIT_ENTRY(tf_mma_mlx4_r2_split_x4, 2, 1)

// tf_mma_mlx4_r{RT}_split_x4 whose outputs are also relu²'d and split as they are stored (act,
// aparts: at y's rows, `rows` a multiple of 64; tf_mma_relu2_out), and (_xin) the products of
// such a split, its X summed in place: the bits of the split products and tf_moe_relu2_split.
template <int RT, int STAGED, int RELU2, class SB>
__device__ __forceinline__ void tf_mma_split_tiles(const u8* __restrict__ W,
                                                   const uint4* __restrict__ xp,
                                                   const float* __restrict__ xsum,
                                                   float* __restrict__ y, int n, int rows,
                                                   int cols, int from, int to,
                                                   float* __restrict__ act = nullptr,
                                                   uint4* __restrict__ aparts = nullptr) {
    const SB* sb = tf_mma_scales<SB>(W, (rows + 15) >> 4, cols);
    for (int t0 = from + (int)blockIdx.x * RT; t0 < to; t0 += (int)gridDim.x * RT)
        tf_mma_body<RT, MMA_KW, STAGED, 0, 1, SB, RELU2>((const uint4*)W, sb, nullptr, y, n,
                                                         blockIdx.y * 4, t0, rows, cols, xp,
                                                         xsum, act, aparts);
}
#define TF_MMA_RELU2_ENTRY_SB(NAME, RT, SB)                                                    \
    extern "C" __global__ void __launch_bounds__(32 * MMA_KW, RT == 1 ? 2 : 1)                 \
        NAME(const u8* W, const uint4* xp, const float* xsum, float* y, int n, int rows,       \
             int cols, int from, int to, float* act, uint4* aparts) {                          \
        tf_follow();                                                                           \
        tf_mma_split_tiles<RT, 2, 1, SB>(W, xp, xsum, y, n, rows, cols, from, to, act, aparts); \
    }
#define TF_MMA_XIN_ENTRY_SB(NAME, RT, SB)                                                      \
    extern "C" __global__ void __launch_bounds__(32 * MMA_KW, RT == 1 ? 2 : 1)                 \
        NAME(const u8* W, const uint4* xp, const float* xsum, float* y, int n, int rows,       \
             int cols, int from, int to) {                                                     \
        tf_follow();                                                                           \
        tf_mma_split_tiles<RT, 3, 0, SB>(W, xp, xsum, y, n, rows, cols, from, to);             \
    }
#define TF_MMA_RELU2_ENTRY(NAME, RT)                                                           \
    TF_MMA_RELU2_ENTRY_SB(NAME, RT, float2)                                                    \
    TF_MMA_RELU2_ENTRY_SB(NAME##_b16, RT, u32)
#define TF_MMA_XIN_ENTRY(NAME, RT)                                                             \
    TF_MMA_XIN_ENTRY_SB(NAME, RT, float2)                                                      \
    TF_MMA_XIN_ENTRY_SB(NAME##_b16, RT, u32)
TF_MMA_RELU2_ENTRY(tf_mma_mlx4_r1_split_x4_relu2, 1)
TF_MMA_RELU2_ENTRY(tf_mma_mlx4_r2_split_x4_relu2, 2)
TF_MMA_XIN_ENTRY(tf_mma_mlx4_r1_split_x4_xin, 1)
TF_MMA_XIN_ENTRY(tf_mma_mlx4_r2_split_x4_xin, 2)

// tf_mma_mlx4_r1_split_x4_b16's loads alone (tf_mma_step), and fewer of them, for
// tf-cuda-mmbench: launched as it is, their y meaningless.
TF_MMA_SPLIT_ENTRY_SB(tf_probe_mma_loads_b16, 1, 1, u32, 2)
TF_MMA_SPLIT_ENTRY_SB(tf_probe_mma_loads_nox_b16, 1, 1, u32, 3)
TF_MMA_SPLIT_ENTRY_SB(tf_probe_mma_loads_scales_b16, 1, 1, u32, 4)
TF_MMA_SPLIT_ENTRY_SB(tf_probe_mma_loads_codes_b16, 1, 1, u32, 5)

// A plain read of n uint4 at p, for tf-cuda-mmbench: thread t of the grid's T issues its D
// loads t, t + T, ... together, then folds them; what DRAM (or L2) gives a read of this many
// bytes with D loads a thread in flight, beside the products' pattern. Nothing is stored but
// for a fold no load is likely to give.
template <int D>
__device__ __forceinline__ void tf_probe_stream(const uint4* __restrict__ p, u64 n, u32* out) {
    const u64 threads = (u64)gridDim.x * blockDim.x;
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    uint4 v[D];
#pragma unroll
    for (int k = 0; k < D; k++)
        v[k] = t + k * threads < n ? __ldg(p + t + k * threads) : make_uint4(0u, 0u, 0u, 0u);
    u32 f = 0u;
#pragma unroll
    for (int k = 0; k < D; k++) f ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    if (f == 0x9e3779b9u) out[blockIdx.x] = f;
}
#define TF_PROBE_STREAM(D)                                                                     \
    extern "C" __global__ void tf_probe_stream_d##D(const uint4* p, u64 n, u32* out) {         \
        tf_follow();                                                                           \
        tf_probe_stream<D>(p, n, out);                                                         \
    }
TF_PROBE_STREAM(1)
TF_PROBE_STREAM(2)
TF_PROBE_STREAM(4)
TF_PROBE_STREAM(8)
TF_PROBE_STREAM(16)

// The tiles' codes alone, read as the one-tile products read them (block T the tile T, warp w
// of KWP its groups w, w + KWP, ..., DEPTH loads a warp in flight), or with the groups' order
// of the tiles in memory swapped (GMAJOR: tile T, group G at G tiles + T), for tf-cuda-mmbench:
// no scales, no x, no reduction; dynamic shared memory (unused) sets the blocks an SM.
template <int KWP, int DEPTH, int GMAJOR>
__device__ __forceinline__ void tf_probe_tiles(const uint4* __restrict__ W, int tiles, int groups,
                                               u32* out) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, T = blockIdx.x;
    u32 f = 0u;
    for (int G0 = w; G0 < groups; G0 += KWP * DEPTH) {
        uint4 v[DEPTH];
#pragma unroll
        for (int k = 0; k < DEPTH; k++) {
            const int G = G0 + k * KWP;
            const size_t at = GMAJOR ? (size_t)G * tiles + T : (size_t)T * groups + G;
            v[k] = G < groups ? __ldg(W + at * 32 + lane) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int k = 0; k < DEPTH; k++) f ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    }
    if (f == 0x9e3779b9u) out[blockIdx.x] = f;
}
#define TF_PROBE_TILES(NAME, DEPTH, GMAJOR)                                                    \
    extern "C" __global__ void __launch_bounds__(32 * MMA_KW)                                  \
        NAME(const uint4* W, int tiles, int groups, u32* out) {                                \
        tf_follow();                                                                           \
        tf_probe_tiles<MMA_KW, DEPTH, GMAJOR>(W, tiles, groups, out);                          \
    }
TF_PROBE_TILES(tf_probe_tiles_d1, 1, 0)
TF_PROBE_TILES(tf_probe_tiles_d2, 2, 0)
TF_PROBE_TILES(tf_probe_tiles_d4, 4, 0)
TF_PROBE_TILES(tf_probe_tiles_d2_gmajor, 2, 1)

// A warp splits group G (of `groups`) of x rows 0 .. live - 1 (at most 8; x: row 0's first
// value of the group, rows `stride` apart) into parts and sums (each at its row 0): lane (g, t)
// the parts of row g, and the sums of rows 2t, 2t + 1 as the eight-row products take X in place
// (tf_mma_group, F = 2: the high and the low parts against a matrix of ones, each its own sum,
// added once). PLANT (a planted control): the sums in f32 from x itself, not from the parts on
// the tensor cores.
template <int PLANT>
__device__ __forceinline__ void tf_mma_split_group(const float* __restrict__ x, size_t stride,
                                                   int live, int G, int groups,
                                                   uint4* __restrict__ parts,
                                                   float* __restrict__ sums) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const float* p = x + min(g, live - 1) * stride + 2 * t;
    const u32 ones[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};
    float hi[4] = {0.0f, 0.0f, 0.0f, 0.0f}, lo[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    uint4* at = parts + ((size_t)g * groups + G) * 16;
    uint4 v[4];
#pragma unroll
    for (int m = 0; m < 4; m++) {
        // Plain loads: a norm's block reads back the row it has just written.
        const float* q = p + 16 * m;
        v[m] = tf_mma_parts_of(*(const float2*)q, *(const float2*)(q + 8));
        tf_mma_16816(hi, ones, v[m].x, v[m].y);
        tf_mma_16816(lo, ones, v[m].z, v[m].w);
    }
    if (g < live)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint4* q = at + tf_mma_part_at(t, h);
            q[0] = h ? make_uint4(v[0].z, v[0].w, v[1].z, v[1].w)
                     : make_uint4(v[0].x, v[0].y, v[1].x, v[1].y);
            q[8] = h ? make_uint4(v[2].z, v[2].w, v[3].z, v[3].w)
                     : make_uint4(v[2].x, v[2].y, v[3].x, v[3].y);
        }
#pragma unroll
    for (int c = 0; c < 2; c++) {
        const int row = 2 * t + c;
        float s = hi[c] + lo[c];
        if (PLANT) {
            const float* q = x + min(row, live - 1) * stride;
            s = 0.0f;
            for (int k = 0; k < 64; k++) s += q[k];
        }
        if (g == 0 && row < live) sums[(size_t)row * groups + G] = s;
    }
}

// Row `row` (of `width`, a multiple of 64) at `src`, split by the block's warps, a group each
// in turn, into parts and sums at that row (every warp of the block calls it).
__device__ __forceinline__ void tf_mma_split_row(const float* src, int row, int width,
                                                 uint4* parts, float* sums) {
    const int groups = width >> 6;
    for (int G = threadIdx.x >> 5; G < groups; G += blockDim.x >> 5)
        tf_mma_split_group<0>(src + 64 * G, width, 1, G, groups,
                              parts + (size_t)row * groups * 16, sums + (size_t)row * groups);
}

// x [n, cols] split: a warp a (group, 8 rows), 4 groups a block (bx), rows 8 by ...
template <int PLANT>
__device__ __forceinline__ void tf_mma_split_rows(const float* x, uint4* parts, float* sums,
                                                  int n, int cols) {
    const int G = 4 * blockIdx.x + (threadIdx.x >> 5), j0 = 8 * blockIdx.y, groups = cols >> 6;
    if (G >= groups) return;  // the whole warp
    tf_mma_split_group<PLANT>(x + (size_t)j0 * cols + 64 * G, cols, min(8, n - j0), G, groups,
                              parts + (size_t)j0 * groups * 16, sums + (size_t)j0 * groups);
}

extern "C" __global__ void tf_mma_split(const float* x, uint4* parts, float* sums, int n,
                                        int cols) {
    tf_follow();
    tf_mma_split_rows<0>(x, parts, sums, n, cols);
}

extern "C" __global__ void tf_plant_mma_split_sums(const float* x, uint4* parts, float* sums,
                                                   int n, int cols) {
    tf_follow();
    tf_mma_split_rows<1>(x, parts, sums, n, cols);
}

// The mma tiles of an MLX 4-bit matrix from its rows layout (units of 32 weights: 4 code words,
// element 8m + e in nibble e of word m, then f32 s and b; the MLX group a multiple of 64, so
// a group's second unit has the first's s and b). A thread per (tile, group, lane): its 4 code
// words, and lanes < 16 the scale pair of the tile's row `lane` (COMPACT: s and b as a bf16
// pair, for matrices whose every s and b is a bf16: tf_mma_scales_wide).
template <int COMPACT>
__device__ __forceinline__ void tf_mma_tile(const u8* src, u8* dst, int rows, int cols) {
    const int groups = cols >> 6, tiles = (rows + 15) >> 4, units = cols >> 5;
    const size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (size_t)tiles * groups * 32) return;
    const int lane = (int)(id & 31);
    const size_t tg = id >> 5;
    const int T = (int)(tg / groups), G = (int)(tg % groups);
    const int g = lane >> 2, t = lane & 3;
    auto unit = [&](int r, int u) {
        return (const u32*)(src + ((size_t)(16 * T + r) * units + u) * 24);
    };
    auto code = [&](int r, int c) -> u32 {
        if (16 * T + r >= rows) return 0u;
        const int e = c & 31;
        return (unit(r, c >> 5)[e >> 3] >> (4 * (e & 7))) & 15u;
    };
    u32 out[4];
    for (int m = 0; m < 4; m++) {
        const int k = 64 * G + 16 * m + 2 * t;
        const int rr[4] = {g, g + 8, g, g + 8}, kk[4] = {k, k, k + 8, k + 8};
        u32 v = 0u;
        for (int r = 0; r < 4; r++)
            v |= code(rr[r], kk[r]) << (4 * r) | code(rr[r], kk[r] + 1) << (4 * (r + 4));
        out[m] = v;
    }
    ((uint4*)dst)[id] = make_uint4(out[0], out[1], out[2], out[3]);
    if (lane < 16) {
        u32 s = 0u, b = 0u;
        if (16 * T + lane < rows) {
            const u32* p = unit(lane, 2 * G);
            s = p[4], b = p[5];
        }
        u8* pairs = dst + (size_t)tiles * groups * 512;
        const size_t at = tg * 16 + 2 * (lane & 7) + (lane >> 3);  // row r beside row r + 8
        if (COMPACT) {
            ((u32*)pairs)[at] = (b & 0xffff0000u) | (s >> 16);
        } else {
            float2 v;
            v.x = __int_as_float((int)s);
            v.y = __int_as_float((int)b) - 128.0f * v.x;  // 128 s is exact: one rounding
            ((float2*)pairs)[at] = v;
        }
    }
}

extern "C" __global__ void tf_mma_tile_mlx4(const u8* src, u8* dst, int rows, int cols) {
    tf_follow();
    tf_mma_tile<0>(src, dst, rows, cols);
}

extern "C" __global__ void tf_mma_tile_mlx4_b16(const u8* src, u8* dst, int rows, int cols) {
    tf_follow();
    tf_mma_tile<1>(src, dst, rows, cols);
}

// *wide = 1 where any s or b of the rows layout's (row, group) pairs, a thread each, is not a
// bf16 (its low 16 bits not zero); untouched otherwise.
extern "C" __global__ void tf_mma_scales_wide(const u8* src, int rows, int cols, u32* wide) {
    tf_follow();
    const size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int groups = cols >> 6, units = cols >> 5;
    if (id >= (size_t)rows * groups) return;
    const u32* p = (const u32*)(src + ((id / groups) * units + 2 * (id % groups)) * 24);
    if (((p[4] | p[5]) & 0xffffu) != 0u) atomicOr(wide, 1u);
}
