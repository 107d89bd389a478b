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
