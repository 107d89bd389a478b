// The Mamba gated norm (mamba.cu) whose rows also come split for the tensor cores' products
// (mma.cu's tf_mma_split_group): each block's warps split its group of the row (gs a multiple
// of 64) from its copy in shared memory (dynamic: 4 gs bytes), the bits tf_mma_split gives
// from out.
extern "C" __global__ void tf_mamba_gated_norm_split(const float* y, const float* z,
                                                     int z_stride, const float* gain, float eps,
                                                     int width, int groups, float* out,
                                                     uint4* parts, float* sums) {
    tf_follow();
    tf_lead();
#ifdef TF_HOST_SIMT
    float* stash = (float*)tf_dyn_smem;
#else
    extern __shared__ float stash[];
#endif
    tf_mamba_gated_norm<0>(y, z, z_stride, gain, eps, width, groups, out, stash);
    __syncthreads();  // the copy, written by the block, is what its warps split
    const int each = width / groups >> 6, cols = width >> 6, i = blockIdx.x;
    for (int G = threadIdx.x >> 5; G < each; G += blockDim.x >> 5)
        tf_mma_split_group<0>(stash + 64 * G, width, 1, blockIdx.y * each + G, cols,
                              parts + (size_t)i * cols * 16, sums + (size_t)i * cols);
}
