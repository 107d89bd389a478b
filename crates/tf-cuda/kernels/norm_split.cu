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
    __syncthreads();  // the row, written by the block, is what its warps split
    tf_mma_split_row(row, blockIdx.x, width, parts, sums);
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

// tf_mamba_gated_norm whose rows also come split for the tensor cores' products (mma.cu's
// tf_mma_split_group): block (row, group) then splits its group's columns (width / groups, a
// multiple of 64), read back from out, a 64-column group a warp in turn: the bits tf_mma_split
// gives from out.
extern "C" __global__ void tf_mamba_gated_norm_split(const float* y, const float* z, int z_stride,
                                                     const float* gain, float eps, int width,
                                                     int groups, float* out, uint4* parts,
                                                     float* sums) {
    tf_follow();
    tf_lead();
    tf_mamba_gated_norm<0>(y, z, z_stride, gain, eps, width, groups, out);
    __syncthreads();  // the group, written by the block, is what its warps split
    const int all = width >> 6, per = all / groups, i = blockIdx.x;
    for (int G = blockIdx.y * per + (threadIdx.x >> 5); G < (blockIdx.y + 1) * per;
         G += blockDim.x >> 5)
        tf_mma_split_group<0>(out + (size_t)i * width + 64 * G, width, 1, G, all,
                              parts + (size_t)i * all * 16, sums + (size_t)i * all);
}
