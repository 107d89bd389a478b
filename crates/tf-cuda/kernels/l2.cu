// L2 prefetches of the weights a later product reads (src/l2.rs), launched on a stream of
// their own beside the kernels before that product, so the bytes come from DRAM while those
// kernels leave it idle. The bulk copy engine asks L2 for the bytes: nothing comes to the SM
// and nothing is written, so no kernel's result depends on them.

#ifndef TF_HOST_SIMT  // the host emulation (src/l2.rs's tests) records the asks instead
// Asks L2 for `bytes` bytes at p (both multiples of 16).
__device__ __forceinline__ void tf_l2_ask(const u8* p, u32 bytes) {
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
#endif
}
#endif

// Every piece of at most `chunk` bytes of `bytes` bytes at p, thread `t` of `threads` taking
// pieces t, t + threads, ... (a length's last bytes short of a multiple of 16 are left out).
__device__ __forceinline__ void tf_l2_range(const u8* p, u64 bytes, u32 chunk, u64 t,
                                            u64 threads) {
    bytes &= ~15ull;
    for (u64 at = t * chunk; at < bytes; at += threads * chunk)
        tf_l2_ask(p + at, (u32)(bytes - at < chunk ? bytes - at : chunk));
}

// Up to four ranges (`n_i` bytes at `p_i`; 0 for none) over the grid's threads. The asks go
// before the wait: they read nothing another kernel writes.
extern "C" __global__ void tf_l2_prefetch(const u8* p0, const u8* p1, const u8* p2, const u8* p3,
                                          u64 n0, u64 n1, u64 n2, u64 n3, u32 chunk) {
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x, threads = (u64)gridDim.x * blockDim.x;
    tf_l2_range(p0, n0, chunk, t, threads);
    tf_l2_range(p1, n1, chunk, t, threads);
    tf_l2_range(p2, n2, chunk, t, threads);
    tf_l2_range(p3, n3, chunk, t, threads);
    tf_follow();
}
