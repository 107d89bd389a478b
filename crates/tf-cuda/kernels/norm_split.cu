// RMSNorm (ops.cu's, the residual add first where ADD: x + o, or x + (o + s)) whose rows also
// come split for the tensor cores' products (mma.cu's tf_mma_split_row): the norm's bits in y,
// then each warp a group of its block's row into parts and sums, the bits tf_mma_split gives
// from that y. The row's width a multiple of 64; rows of at most TF_NORM_STASH elements are
// split from a copy in shared memory (dynamic: 4 width bytes), wider ones from y.
#define TF_NORM_STASH 6144

template <int ADD>
__device__ __forceinline__ void tf_norm_split(float* __restrict__ x, const float* __restrict__ o,
                                              const float* __restrict__ g, float* __restrict__ y,
                                              uint4* __restrict__ parts, float* __restrict__ sums,
                                              int width, float eps,
                                              const float* __restrict__ s = nullptr) {
#ifdef TF_HOST_SIMT
    float* stash = (float*)tf_dyn_smem;
#else
    extern __shared__ float stash[];
#endif
    const float* row = y + (size_t)blockIdx.x * width;
    if (width <= TF_NORM_STASH) {
        tf_rms_norm<0, ADD, true>(x, o, g, y, width, eps, stash, s);
        row = stash;
    } else {
        tf_rms_norm<0, ADD>(x, o, g, y, width, eps, nullptr, s);
    }
    tf_mark("~norm:written");
    __syncthreads();  // the row, written by the block, is what its warps split
    tf_mma_split_row(row, blockIdx.x, width, parts, sums);
    tf_mark("~norm:split");
}

extern "C" __global__ void tf_rms_norm_split(const float* x, const float* g, float* y,
                                             uint4* parts, float* sums, int width, float eps) {
    tf_follow();
    tf_lead();
    tf_norm_split<0>((float*)x, nullptr, g, y, parts, sums, width, eps);
}

extern "C" __global__ void tf_add_rms_norm_split(float* x, const float* o, const float* g,
                                                 float* y, uint4* parts, float* sums, int width,
                                                 float eps) {
    tf_follow();
    tf_lead();
    tf_norm_split<1>(x, o, g, y, parts, sums, width, eps);
}

extern "C" __global__ void tf_add2_rms_norm_split(float* x, const float* o, const float* s,
                                                  const float* g, float* y, uint4* parts,
                                                  float* sums, int width, float eps) {
    tf_follow();
    tf_lead();
    tf_norm_split<2>(x, o, g, y, parts, sums, width, eps, s);
}

// The sum of squares of a segment of `len` elements (a multiple of 64, at most TF_HOLD
// blockDim.x) whose element threadIdx.x + j blockDim.x each thread holds in e[j], returned to
// every thread: tf_held_sumsq16's bits, each lane's chain of elements staged as one run
// (`runs`: 16 (len / 16 + 4) floats of shared memory) so that it reads four at a time. Every
// thread of the block must call it.
__device__ __forceinline__ float tf_runs_sumsq16(const float (&e)[TF_HOLD], int len,
                                                 float* runs) {
    __shared__ float sq_sum;
    const int run = (len >> 4) + 4;
#pragma unroll
    for (int j = 0; j < TF_HOLD; j++) {
        const int k = threadIdx.x + j * blockDim.x;
        if (k < len) runs[(k & 15) * run + (k >> 4)] = e[j];
    }
    __syncthreads();
    tf_mark("~sumsq:staged");
    if (threadIdx.x < 32) {
        // Lane l's chain: elements l, l + 16, .. ascending, as tf_staged_sumsq16 sums them.
        float acc = 0.0f;
        if (threadIdx.x < 16) {
            const float4* p = (const float4*)(runs + threadIdx.x * run);
#pragma unroll 4
            for (int q = 0; q < len >> 6; q++) {
                const float4 v = p[q];
                acc = fmaf(v.x, v.x, acc);
                acc = fmaf(v.y, v.y, acc);
                acc = fmaf(v.z, v.z, acc);
                acc = fmaf(v.w, v.w, acc);
            }
        }
        const float ss = tf_fold16_sum(acc);
        if (threadIdx.x == 0) sq_sum = ss;
    }
    __syncthreads();
    tf_mark("~sumsq:summed");
    return sq_sum;
}

// The block's warps split groups G0 .. G1 - 1 of a row of `groups` 64-column groups from
// `share` (the row's values from column 64 G0 on) into the row's parts and sums (every warp
// of the block calls it, after the barrier that follows the share's writes).
__device__ __forceinline__ void tf_mma_split_share(const float* share, int G0, int G1, int groups,
                                                   uint4* parts, float* sums) {
    for (int G = G0 + (int)(threadIdx.x >> 5); G < G1; G += (int)(blockDim.x >> 5))
        tf_mma_split_group<0>(share + 64 * (G - G0), 64, 1, G, groups, parts, sums);
    tf_mark("~norm:split");
}

// The block's share [lo, hi) of a held segment normed: out[k] = gv (e r), also into share[k -
// lo], each e first given to keep(k, e); then the barrier after which its warps split it.
template <class Keep>
__device__ __forceinline__ void tf_norm_share(const float (&e)[TF_HOLD], const float (&gv)[TF_HOLD],
                                              float r, int lo, int hi, float* __restrict__ out,
                                              float* share, Keep keep) {
#pragma unroll
    for (int j = 0; j < TF_HOLD; j++) {
        const int k = threadIdx.x + j * blockDim.x;
        if (k >= lo && k < hi) {
            keep(k, e[j]);
            const float v = gv[j] * (e[j] * r);
            out[k] = v;
            share[k - lo] = v;
        }
    }
    __syncthreads();  // the share, written by the block, is what its warps split
    tf_mark("~norm:written");
}

// A block's share of a segment split over gridDim.x blocks: the segment's 64-column groups
// from `first`, `each` of them, give this block [G0, G1).
struct TfShare {
    int G0, G1;
    __device__ TfShare(int first, int each)
        : G0(first + (int)(blockIdx.x * each / gridDim.x)),
          G1(first + (int)((blockIdx.x + 1) * each / gridDim.x)) {}
};

// The split norm of row blockIdx.y over gridDim.x blocks, for rounds of few rows: every block
// loads the whole row (width <= TF_HOLD blockDim.x) and sums its squares (tf_runs_sumsq16),
// then writes x, y and the split of its own share of the row's groups. x is read from `x` and
// written to `xo`, another buffer, since one block may still be reading the row when another
// writes it. Dynamic shared memory: the runs, then the share (64 ceil(groups / gridDim.x)
// floats).
template <int ADD>
__device__ __forceinline__ void tf_norm_split_wide(const float* __restrict__ x,
                                                   float* __restrict__ xo,
                                                   const float* __restrict__ o,
                                                   const float* __restrict__ s,
                                                   const float* __restrict__ g,
                                                   float* __restrict__ y, uint4* __restrict__ parts,
                                                   float* __restrict__ sums, int width, float eps) {
#ifdef TF_HOST_SIMT
    float* runs = (float*)tf_dyn_smem;
#else
    extern __shared__ float runs[];
#endif
    const int row = blockIdx.y, groups = width >> 6;
    const TfShare sh(0, groups);
    const int lo = 64 * sh.G0, hi = 64 * sh.G1;
    float* share = runs + 16 * ((width >> 4) + 4);
    const size_t at = (size_t)row * width;
    float e[TF_HOLD], gv[TF_HOLD];
#pragma unroll
    for (int j = 0; j < TF_HOLD; j++) {
        const int k = threadIdx.x + j * blockDim.x;
        const size_t i = at + k;
        e[j] = k >= width ? 0.0f
               : ADD == 2 ? x[i] + (o[i] + s[i])
               : ADD      ? x[i] + o[i]
                          : x[i];
        gv[j] = k >= lo && k < hi ? g[k] : 0.0f;
    }
    const float r = tf_inv_rms(tf_runs_sumsq16(e, width, runs), width, eps);
    tf_norm_share(e, gv, r, lo, hi, y + at, share, [&](int k, float v) {
        if (ADD) xo[at + k] = v;
    });
    tf_mma_split_share(share, sh.G0, sh.G1, groups, parts + at / 4, sums + at / 64);
}

extern "C" __global__ void tf_rms_norm_split_wide(const float* x, const float* g, float* y,
                                                  uint4* parts, float* sums, int width,
                                                  float eps) {
    tf_follow();
    tf_lead();
    tf_norm_split_wide<0>(x, nullptr, nullptr, nullptr, g, y, parts, sums, width, eps);
}

extern "C" __global__ void tf_add_rms_norm_split_wide(const float* x, float* xo, const float* o,
                                                      const float* g, float* y, uint4* parts,
                                                      float* sums, int width, float eps) {
    tf_follow();
    tf_lead();
    tf_norm_split_wide<1>(x, xo, o, nullptr, g, y, parts, sums, width, eps);
}

extern "C" __global__ void tf_add2_rms_norm_split_wide(const float* x, float* xo, const float* o,
                                                       const float* s, const float* g, float* y,
                                                       uint4* parts, float* sums, int width,
                                                       float eps) {
    tf_follow();
    tf_lead();
    tf_norm_split_wide<2>(x, xo, o, s, g, y, parts, sums, width, eps);
}

// The Mamba gated norm (mamba.cu's tf_mamba_gated_norm: h = silu(z) y, each group normed by its
// own RMS, times the gains) of row blockIdx.z, group blockIdx.y over gridDim.x blocks, its rows
// split for the tensor cores' products: every block holds the whole group (gs = width / groups
// a multiple of 64, at most TF_HOLD blockDim.x) and sums its squares (tf_runs_sumsq16, the
// same bits), then writes and splits its share of the group's 64-column groups. Dynamic shared
// memory as tf_norm_split_wide's, of a group.
extern "C" __global__ void tf_mamba_gated_norm_split_wide(const float* y, const float* z,
                                                          int z_stride, const float* gain,
                                                          float eps, int width, int groups,
                                                          float* out, uint4* parts,
                                                          float* sums) {
    tf_follow();
    tf_lead();
#ifdef TF_HOST_SIMT
    float* runs = (float*)tf_dyn_smem;
#else
    extern __shared__ float runs[];
#endif
    const int i = blockIdx.z, grp = blockIdx.y, gs = width / groups, each = gs >> 6;
    const TfShare sh(grp * each, each);
    const int lo = 64 * sh.G0 - grp * gs, hi = 64 * sh.G1 - grp * gs;  // within the group
    float* share = runs + 16 * ((gs >> 4) + 4);
    const size_t at = (size_t)i * width + (size_t)grp * gs;
    const float* zr = z + (size_t)i * z_stride + (size_t)grp * gs;
    const float* gr = gain + (size_t)grp * gs;
    float h[TF_HOLD], gv[TF_HOLD];
#pragma unroll
    for (int j = 0; j < TF_HOLD; j++) {
        const int k = threadIdx.x + j * blockDim.x;
        h[j] = k < gs ? tf_silu(zr[k]) * y[at + k] : 0.0f;
        gv[j] = k >= lo && k < hi ? gr[k] : 0.0f;
    }
    const float r = tf_inv_rms(tf_runs_sumsq16(h, gs, runs), gs, eps);
    tf_norm_share(h, gv, r, lo, hi, out + at, share, [](int, float) {});
    const size_t row = (size_t)i * width;
    tf_mma_split_share(share, sh.G0, sh.G1, width >> 6, parts + row / 4, sums + row / 64);
}
