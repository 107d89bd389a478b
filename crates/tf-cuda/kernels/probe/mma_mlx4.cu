// A probe, not part of the program (compile.rs leaves it out): MLX 4-bit (group 64) matrix
// products for 1 to 8 activation rows on the tensor cores, mma.sync m16n8k16 with bf16 inputs
// and f32 accumulation, checked and timed by examples/tf-cuda-mmaprobe.rs. The question it
// answers: does a weight cost fewer instructions this way than in tf_slices (about 4.5 a weight,
// docs/perf.md), enough for the one-row product to reach the memory roofline?
//
// Weights (the probe's own layout, packed by the harness): 16-row tiles; per (tile T, group G of
// 64 columns) 512 bytes, 16 a lane: lane L's u32 m (k-step m: columns 64 G + 16 m ..) holds the 8
// codes of its A fragment, nibble r the low and nibble r + 4 the high half of register r. With
// g = L / 4, t = L % 4 and k = 16 m: register 0 is row g, columns k + 2t, k + 2t + 1; register
// 1 row g + 8, the same columns; registers 2 and 3 the same rows, columns + 8 (the PTX ISA's
// m16n8k16 A layout). Scales and biases: f32 (s, b) for (T, G, row of the tile).
//
// A code becomes the bf16 128 + q by one LOP3 (0x4300 | q) and a shift. SUB = 1 takes the 128
// off in bf16 (exact); SUB = 0 leaves it, and the epilogue's bias becomes b - 128 s (y += s *
// sum + (b - 128 s) X, X the group's sum of x), which costs about 4 bits of the sum's precision.
//
// x (up to 8 rows, the mma's 8 columns) is split by tf_probe_split_x into SPLITS bf16 parts
// (hi, then what hi leaves, ...), laid as the B fragments: record (part, row j, G, t) of 8 u32,
// u32 2m the pair (64 G + 16 m + 2t, + 1) and 2m + 1 the pair 8 columns on; xsum[j, G] the f32
// sum over the group of the parts, ascending columns.
//
// Every output's arithmetic is the same whatever the number of x rows (columns of D do not mix;
// the row check of the harness holds the hardware to this); the KW warps of a block take the
// groups G = w (mod KW) and their sums are added in warp order.

typedef unsigned int u32;

#ifdef TF_HOST_SIMT
// Host stand-ins (src/probe.rs's emulation test): bf16 rounding to nearest even (finite
// values), and the m16n8k16 product from the PTX ISA's fragment layouts, each lane's D entries
// summed in double and rounded once (the hardware's own summation is not modelled).
static inline u32 tf_probe_bf16(float f) {
    u32 b;
    std::memcpy(&b, &f, 4);
    return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
}
static inline u32 tf_probe_bf16x2(float lo, float hi) {
    return tf_probe_bf16(lo) | tf_probe_bf16(hi) << 16;
}
static inline float tf_probe_bf16_lo(u32 v) { return __int_as_float((int)(v << 16)); }
static inline float tf_probe_bf16_hi(u32 v) { return __int_as_float((int)(v & 0xffff0000u)); }
static inline u32 tf_probe_less128(u32 a) {
    return tf_probe_bf16x2(tf_probe_bf16_lo(a) - 128.0f, tf_probe_bf16_hi(a) - 128.0f);
}
static u32 tf_probe_frag[64][32][6];
static float tf_probe_acc[64][32][4];
static inline void tf_probe_mma(float* d, const u32* a, u32 b0, u32 b1) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int r = 0; r < 4; r++) tf_probe_frag[w][lane][r] = a[r], tf_probe_acc[w][lane][r] = d[r];
    tf_probe_frag[w][lane][4] = b0, tf_probe_frag[w][lane][5] = b1;
    tf_warp_bars[w]->arrive_and_wait();
    // A[i][k]: lane 4 (i % 8) + (k % 8) / 2, register i / 8 + 2 (k / 8), half k % 2.
    auto A = [&](int i, int k) {
        const u32 v = tf_probe_frag[w][4 * (i % 8) + (k % 8) / 2][i / 8 + 2 * (k / 8)];
        return k % 2 ? tf_probe_bf16_hi(v) : tf_probe_bf16_lo(v);
    };
    // B[k][j]: lane 4 j + (k % 8) / 2, register k / 8, half k % 2.
    auto B = [&](int k, int j) {
        const u32 v = tf_probe_frag[w][4 * j + (k % 8) / 2][4 + k / 8];
        return k % 2 ? tf_probe_bf16_hi(v) : tf_probe_bf16_lo(v);
    };
    float out[4];
    for (int r = 0; r < 4; r++) {
        // D entry r of this lane: row lane / 4 + 8 (r / 2), column 2 (lane % 4) + r % 2.
        const int i = lane / 4 + 8 * (r / 2), j = 2 * (lane % 4) + r % 2;
        double acc = tf_probe_acc[w][lane][r];
        for (int k = 0; k < 16; k++) acc += (double)A(i, k) * (double)B(k, j);
        out[r] = (float)acc;
    }
    tf_warp_bars[w]->arrive_and_wait();
    for (int r = 0; r < 4; r++) d[r] = out[r];
}
#else
__device__ __forceinline__ u32 tf_probe_bf16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ float tf_probe_bf16_lo(u32 v) { return __int_as_float((int)(v << 16)); }
__device__ __forceinline__ float tf_probe_bf16_hi(u32 v) {
    return __int_as_float((int)(v & 0xffff0000u));
}
// Both halves less 128, in bf16 (exact for 128 + q).
__device__ __forceinline__ u32 tf_probe_less128(u32 a) {
    asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(a) : "r"(0x3f803f80u), "r"(0xc300c300u));
    return a;
}
__device__ __forceinline__ void tf_probe_mma(float* d, const u32* a, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

// One thread per (x row j, group G): the parts of the group's 64 values and their sum.
template <int SPLITS>
__device__ __forceinline__ void tf_probe_split_x(const float* __restrict__ x, u32* __restrict__ xf,
                                                 float* __restrict__ xsum, int cols, int nt) {
    const int groups = cols >> 6;
    const int id = blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= nt * groups) return;
    const int j = id / groups, G = id % groups;
    const float* xr = x + (size_t)j * cols + 64 * G;
    float sum = 0.0f;
    for (int m = 0; m < 4; m++)
        for (int t = 0; t < 4; t++)
            for (int h = 0; h < 2; h++) {
                const int c = 16 * m + 2 * t + 8 * h;
                float r0 = xr[c], r1 = xr[c + 1];
                for (int s = 0; s < SPLITS; s++) {
                    const u32 p = tf_probe_bf16x2(r0, r1);
                    xf[((((size_t)s * nt + j) * groups + G) * 4 + t) * 8 + 2 * m + h] = p;
                    r0 = r0 - tf_probe_bf16_lo(p);
                    r1 = r1 - tf_probe_bf16_hi(p);
                }
            }
    // The sum of the parts, ascending columns (x minus what the last part leaves).
    for (int c = 0; c < 64; c++) {
        float r = xr[c], part = 0.0f;
        for (int s = 0; s < SPLITS; s++) {
            const float p = tf_probe_bf16_lo(tf_probe_bf16x2(r, 0.0f));
            part = part + p;
            r = r - p;
        }
        sum = sum + part;
    }
    xsum[(size_t)j * groups + G] = sum;
}

// 0x000f000f held in a register the compiler cannot fold (n >= 0, so its sign bit is 0): LOP3
// takes one immediate, 0x43004300, and the mask then needs no move before each use.
__device__ __forceinline__ u32 tf_probe_mask(int n) { return 0x000f000fu | ((u32)n & 0x80000000u); }

// The 4 A registers of k-step word w: bf16 pairs 128 + q (SUB: q); mask: tf_probe_mask.
template <int SUB>
__device__ __forceinline__ void tf_probe_codes(u32 w, u32* a, u32 mask) {
#pragma unroll
    for (int r = 0; r < 4; r++) {
        a[r] = ((w >> (4 * r)) & mask) | 0x43004300u;
        if (SUB) a[r] = tf_probe_less128(a[r]);
    }
}

// One group's weights for a lane: the codes of RT tiles and (s, c) of its rows g and g + 8,
// c = b - 128 s (SUB: b), so the epilogue is y += s * sum + c * X.
template <int RT>
struct TfProbeGroup {
    uint4 q[RT];
    float2 lo[RT], hi[RT];
};

// Loads the group at wp, sp and moves them KW groups on.
template <int SUB, int RT, int KW>
__device__ __forceinline__ void tf_probe_load(TfProbeGroup<RT>& d, const uint4** wp,
                                              const float2** sp) {
#pragma unroll
    for (int r = 0; r < RT; r++) {
        d.q[r] = __ldg(wp[r]);
        float2 a = __ldg(sp[r]), b = __ldg(sp[r] + 8);
        if (!SUB) a.y = fmaf(-128.0f, a.x, a.y), b.y = fmaf(-128.0f, b.x, b.y);
        d.lo[r] = a, d.hi[r] = b;
        wp[r] += 32 * KW, sp[r] += 16 * KW;
    }
}

// One group: B fragments of its x parts (at xp) and sums (at xsp), then RT tiles' mma and
// epilogue into yacc; xp and xsp move KW groups on.
template <int SPLITS, int SUB, int RT, int KW>
__device__ __forceinline__ void tf_probe_group(const TfProbeGroup<RT>& d, const uint4** xp,
                                               const float** xsp, bool col, u32 has, u32 mask,
                                               float (*yacc)[4]) {
    u32 b[SPLITS][8];
#pragma unroll
    for (int s = 0; s < SPLITS; s++) {
        const uint4 u0 = col ? __ldg(xp[s]) : make_uint4(0, 0, 0, 0);
        const uint4 u1 = col ? __ldg(xp[s] + 1) : make_uint4(0, 0, 0, 0);
        xp[s] += 8 * KW;
        b[s][0] = u0.x, b[s][1] = u0.y, b[s][2] = u0.z, b[s][3] = u0.w;
        b[s][4] = u1.x, b[s][5] = u1.y, b[s][6] = u1.z, b[s][7] = u1.w;
    }
    float X[2];
#pragma unroll
    for (int c = 0; c < 2; c++) X[c] = has >> c & 1 ? __ldg(xsp[c]) : 0.0f, xsp[c] += KW;
#pragma unroll
    for (int r = 0; r < RT; r++) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const u32 words[4] = {d.q[r].x, d.q[r].y, d.q[r].z, d.q[r].w};
#pragma unroll
        for (int m = 0; m < 4; m++) {
            u32 a[4];
            tf_probe_codes<SUB>(words[m], a, mask);
#pragma unroll
            for (int s = SPLITS - 1; s >= 0; s--) tf_probe_mma(acc, a, b[s][2 * m], b[s][2 * m + 1]);
        }
        // acc: D[g][2t], D[g][2t + 1], D[g + 8][2t], D[g + 8][2t + 1].
#pragma unroll
        for (int v = 0; v < 4; v++) {
            const float2 sc = v < 2 ? d.lo[r] : d.hi[r];
            yacc[r][v] = fmaf(sc.x, acc[v], fmaf(sc.y, X[v & 1], yacc[r][v]));
        }
    }
}

// y[j, row] for j < nt <= 8. Block: RT row tiles, KW warps along the groups (warp w takes
// G = w + i KW, i = 0, 1, ..., two groups' loads in turn so one is in flight while the other is
// multiplied).
template <int SPLITS, int SUB, int RT, int KW>
__device__ __forceinline__ void tf_probe_mma_mlx4(const uint4* __restrict__ wq,
                                                  const float2* __restrict__ sb,
                                                  const uint4* __restrict__ xf,
                                                  const float* __restrict__ xsum,
                                                  float* __restrict__ y, int rows, int cols,
                                                  int nt) {
    __shared__ float red[KW][RT][32][4];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int groups = cols >> 6, tiles = rows >> 4;
    const int tile0 = blockIdx.x * RT;
    const bool col = g < nt;  // this lane's B column is an x row
    // Bit c: column 2t + c is an x row (its group sums are read).
    const u32 has = (2 * t < nt ? 1u : 0u) | (2 * t + 1 < nt ? 2u : 0u);
    // Step 0's addresses (group w); step i adds i KW groups.
    const uint4* wp[RT];
    const float2* sp[RT];
#pragma unroll
    for (int r = 0; r < RT; r++) {
        const size_t tg = (size_t)min(tile0 + r, tiles - 1) * groups + w;
        wp[r] = wq + tg * 32 + lane;
        sp[r] = sb + tg * 16 + g;
    }
    const uint4* xp[SPLITS];
#pragma unroll
    for (int s = 0; s < SPLITS; s++)
        xp[s] = xf + 2 * ((((size_t)s * nt + (col ? g : 0)) * groups + w) * 4 + t);
    const float* xsp[2];
#pragma unroll
    for (int c = 0; c < 2; c++) xsp[c] = xsum + (size_t)(has >> c & 1 ? 2 * t + c : 0) * groups + w;
    float yacc[RT][4];
#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
        for (int v = 0; v < 4; v++) yacc[r][v] = 0.0f;
    const int steps = w < groups ? (groups - 1 - w) / KW + 1 : 0;
    const u32 mask = tf_probe_mask(rows);
    TfProbeGroup<RT> a, b;
    if (steps > 0) tf_probe_load<SUB, RT, KW>(a, wp, sp);
    for (int i = 0; i < steps; i += 2) {
        if (i + 1 < steps) tf_probe_load<SUB, RT, KW>(b, wp, sp);
        tf_probe_group<SPLITS, SUB, RT, KW>(a, xp, xsp, col, has, mask, yacc);
        if (i + 1 >= steps) break;
        if (i + 2 < steps) tf_probe_load<SUB, RT, KW>(a, wp, sp);
        tf_probe_group<SPLITS, SUB, RT, KW>(b, xp, xsp, col, has, mask, yacc);
    }
#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
        for (int v = 0; v < 4; v++) red[w][r][lane][v] = yacc[r][v];
    __syncthreads();
    if (w != 0) return;
#pragma unroll
    for (int r = 0; r < RT; r++) {
        const int tile = tile0 + r;
        if (tile >= tiles) break;
#pragma unroll
        for (int v = 0; v < 4; v++) {
            float sum = red[0][r][lane][v];
            for (int k = 1; k < KW; k++) sum = sum + red[k][r][lane][v];
            const int row = 16 * tile + g + 8 * (v >> 1), j = 2 * t + (v & 1);
            if (j < nt) y[(size_t)j * rows + row] = sum;
        }
    }
}

#define TF_PROBE_SPLIT(SPLITS)                                                                 \
    extern "C" __global__ void tf_probe_split_x##SPLITS(const float* x, u32* xf, float* xsum,  \
                                                        int cols, int nt) {                    \
        tf_probe_split_x<SPLITS>(x, xf, xsum, cols, nt);                                       \
    }
TF_PROBE_SPLIT(2)
TF_PROBE_SPLIT(3)

// tf_probe_mma_s{SPLITS}_u{SUB}_r{RT}_k{KW}: 32 * KW threads a block, a block per RT tiles.
#define TF_PROBE_MMA(SPLITS, SUB, RT, KW)                                                      \
    extern "C" __global__ void __launch_bounds__(32 * KW)                                      \
        tf_probe_mma_s##SPLITS##_u##SUB##_r##RT##_k##KW(                                       \
            const uint4* wq, const float2* sb, const uint4* xf, const float* xsum, float* y,    \
            int rows, int cols, int nt) {                                                      \
        tf_probe_mma_mlx4<SPLITS, SUB, RT, KW>(wq, sb, xf, xsum, y, rows, cols, nt);           \
    }
TF_PROBE_MMA(2, 0, 2, 4)
TF_PROBE_MMA(3, 0, 2, 4)
TF_PROBE_MMA(2, 1, 2, 4)
TF_PROBE_MMA(3, 1, 2, 4)
TF_PROBE_MMA(2, 0, 4, 4)
TF_PROBE_MMA(2, 0, 2, 8)
TF_PROBE_MMA(2, 0, 1, 8)
TF_PROBE_MMA(2, 0, 1, 16)
TF_PROBE_MMA(3, 1, 1, 16)
