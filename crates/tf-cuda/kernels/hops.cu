// Probes of what a step's kernel boundaries cost (src/hops.rs): a launch that does nothing but
// wait for the kernel before it, and grid-wide barriers among resident blocks, the boundary a
// persistent kernel would have in place of a launch.

// Waits for the kernel before it; with `lead`, lets the next launch first (tf_lead).
extern "C" __global__ void tf_hop(int lead) {
    tf_follow();
    if (lead) tf_lead();
}

// A barrier among all blocks of a launch whose blocks are all resident (a cooperative launch):
// each block's first thread reads the generation, then arrives on `count` (acquire-release, so
// the block's writes before it, ordered by the block barrier, go out first); the last to arrive
// resets the count and moves the generation on (release), the others spin on it (acquire).
__device__ __forceinline__ void tf_grid_barrier(u32* count, u32* gen) {
    __syncthreads();  // the block's work before the barrier is done
    if (threadIdx.x == 0) {
        u32 g, old;
        asm volatile("ld.relaxed.gpu.u32 %0, [%1];" : "=r"(g) : "l"(gen) : "memory");
        asm volatile("atom.acq_rel.gpu.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(count) : "memory");
        if (old == gridDim.x - 1) {
            asm volatile("st.relaxed.gpu.u32 [%0], 0;" ::"l"(count) : "memory");
            asm volatile("st.release.gpu.u32 [%0], %1;" ::"l"(gen), "r"(g + 1) : "memory");
        } else {
            u32 now;
            do {
                asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(now) : "l"(gen) : "memory");
            } while (now == g);
        }
    }
    __syncthreads();
}

// `rounds` grid barriers in a row (`count` zero before the launch; it is zero after).
extern "C" __global__ void tf_hop_barriers(u32* count, u32* gen, int rounds) {
    tf_follow();
    for (int r = 0; r < rounds; r++) tf_grid_barrier(count, gen);
}
