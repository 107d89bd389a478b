// TensorFold CUDA kernels: shared definitions (prepended to every kernel source).
//
// Compiled by NVRTC with --fmad=false: no multiply-add is contracted unless written as fmaf, so
// each kernel's arithmetic is exactly what its source says. The numerics copy the CPU contract
// (crates/tf-kernels, docs/kernels.md): 16-lane reductions folded by the tree (l, l+8), (l, l+4),
// (l, l+2), (0, 1); the contract exp; correctly rounded division and square root.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define TF_FULL_MASK 0xffffffffu

// Weight storage formats (must match `GpuFormat` in src/weights.rs).
#define FMT_F32 0
#define FMT_F16 1
#define FMT_BF16 2
#define FMT_Q4_0 3
#define FMT_Q4_1 4
#define FMT_Q8_0 5

#ifndef TF_HOST_SIMT  // the host emulation's prelude (src/host_cxx.rs) has its own
// Every kernel's first statement (tf_slices_one's first loads of weights, which nothing writes,
// and the grouped expert products' look-up of their expert, go before it). Inside a round's
// graph, kernels follow each other by programmatic edges (src/graphs.rs): a kernel is launched
// as the blocks of the one before it exit (or as they call tf_lead), before that kernel's
// completion is flushed, so each waits here until the kernels before it have finished and
// their writes are visible. Outside such an edge the wait is a no-op.
__device__ __forceinline__ void tf_follow() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

#ifdef TF_TIMELINE  // the timeline's program (src/timeline.rs), never the served one
#define TF_TIMELINE_CAP 32768
#define TF_TIMELINE_NAME 48
// One launch's stamps: the global timer (ns) before and after its wait, and its kernel's name.
struct TfStamp {
    u64 before, after;
    char name[TF_TIMELINE_NAME];
};
__device__ TfStamp tf_timeline[TF_TIMELINE_CAP];
__device__ u32 tf_timeline_n;

__device__ __forceinline__ u64 tf_now() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ bool tf_first_thread() {
    return (threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) == 0;
}

// Writes record i (if the program holds it).
__device__ __forceinline__ void tf_stamp(u32 i, u64 before, u64 after, const char* name) {
    if (i >= TF_TIMELINE_CAP) return;
    TfStamp& s = tf_timeline[i];
    s.before = before;
    s.after = after;
    int k = 0;
    for (; k < TF_TIMELINE_NAME - 1 && name[k]; k++) s.name[k] = name[k];
    for (; k < TF_TIMELINE_NAME; k++) s.name[k] = 0;
}

// Records a launch takes past its own for its phases (tf_mark); unused ones keep no name.
#define TF_TIMELINE_MARKS 4
// The launch's next record for a phase, and the end of its records (its first thread's).
__shared__ u32 tf_mark_at, tf_mark_end;

// tf_follow, with a launch's first thread stamping the wait into the next free record (taken
// before the wait, so the atomic's trip back overlaps it), its phases' records after it.
__device__ __forceinline__ void tf_follow_stamped(const char* name) {
    const bool first = tf_first_thread();
    const u32 i = first ? atomicAdd(&tf_timeline_n, 1u + TF_TIMELINE_MARKS) : 0;
    const u64 before = first ? tf_now() : 0;
    tf_follow();
    if (!first) return;
    tf_stamp(i, before, tf_now(), name);
    for (u32 m = 1; m <= TF_TIMELINE_MARKS; m++)
        if (i + m < TF_TIMELINE_CAP) tf_timeline[i + m].name[0] = 0;
    tf_mark_at = i + 1;
    tf_mark_end = i + 1 + TF_TIMELINE_MARKS;
}
#define tf_follow() tf_follow_stamped(__func__)

// A phase inside a kernel (after its tf_follow; marks past its first TF_TIMELINE_MARKS are
// dropped): the launch's first thread stamps the timer under `name`, before and after alike,
// so the timeline splits the kernel's time on the path there.
__device__ __forceinline__ void tf_mark(const char* name) {
    if (!tf_first_thread() || tf_mark_at >= tf_mark_end) return;
    const u64 t = tf_now();
    tf_stamp(tf_mark_at++, t, t, name);
}
#endif

// Lets the next kernel of the round's graph launch now, its blocks then waiting in tf_follow:
// called right after tf_follow by the one-block-a-row kernels a product follows (the norms,
// the gated norm, attention, the experts' gather, relu² and combine), so the product's blocks
// are resident when they finish; in the served program (TF_LEAD_ALL below) by every kernel.
// What the next kernel reads before its wait was written two kernels back or earlier. Every
// kernel leading measured slower or even with the tf_slices products (sessions 11 and 13),
// even in session 48, and 0.7% shorter alone and 0.1-0.7% beside x split side by side on an
// H100 (session 49).
__device__ __forceinline__ void tf_lead() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

#ifdef TF_LEAD_ALL  // every kernel leads right after its wait (unless TF_CUDA_LEAD_ALL=0)
#ifdef TF_TIMELINE
#undef tf_follow
#define tf_follow() (tf_follow_stamped(__func__), tf_lead())
#else
#define tf_follow() (tf_follow(), tf_lead())
#endif
#endif
#endif

#if !defined(TF_TIMELINE) || defined(TF_HOST_SIMT)
// tf_mark outside the timeline's program: nothing.
__device__ __forceinline__ void tf_mark(const char*) {}
#endif

__device__ __forceinline__ float tf_bits(u32 b) { return __int_as_float((int)b); }

// IEEE half bits to f32 (exact).
__device__ __forceinline__ float tf_f16(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// bfloat16 bits to f32 (exact).
__device__ __forceinline__ float tf_bf16(u16 h) { return __int_as_float(((u32)h) << 16); }

// Little-endian u16 at a 2-byte aligned address.
__device__ __forceinline__ u16 tf_ld16(const u8* p) { return *(const u16*)p; }

// The contract's exp (tf_kernels::ops::simd::portable::exp), bit for bit.
__device__ __forceinline__ float tf_exp(float x) {
    if (isnan(x)) return x;
    if (x > tf_bits(0x42b0c0a5u)) return __int_as_float(0x7f800000);  // EXP_HI
    if (x < tf_bits(0xc2aeac4fu)) return 0.0f;                        // EXP_LO
    const float magic = tf_bits(0x4b400000u);                           // 1.5 * 2^23
    float n = (x * tf_bits(0x3fb8aa3bu) + magic) - magic;               // round(x log2 e)
    float r = fmaf(-n, tf_bits(0x3f318000u), x);                        // LN2_HI
    r = fmaf(-n, tf_bits(0xb95e8083u), r);                              // LN2_LO
    float p = tf_bits(0x39500d01u);                                     // 1/5040
    p = fmaf(p, r, tf_bits(0x3ab60b61u));                               // 1/720
    p = fmaf(p, r, tf_bits(0x3c088889u));                               // 1/120
    p = fmaf(p, r, tf_bits(0x3d2aaaabu));                               // 1/24
    p = fmaf(p, r, tf_bits(0x3e2aaaabu));                               // 1/6
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    u32 bits = ((u32)((int)n + 127)) << 23;
    return p * __int_as_float((int)bits);
}

// The contract's SiLU: x / (1 + exp(-x)), one correctly rounded division.
__device__ __forceinline__ float tf_silu(float x) { return x / (1.0f + tf_exp(-x)); }

// max as the CPU's max_op(acc, x): x if x > acc, else acc.
__device__ __forceinline__ float tf_max_op(float acc, float x) { return x > acc ? x : acc; }

// Folds the 16 lane values of each half-warp by the fixed tree; the result is valid in lane 0 of
// the half-warp. Every lane of the warp must call it.
__device__ __forceinline__ float tf_fold16_sum(float v) {
    v = v + __shfl_down_sync(TF_FULL_MASK, v, 8, 16);
    v = v + __shfl_down_sync(TF_FULL_MASK, v, 4, 16);
    v = v + __shfl_down_sync(TF_FULL_MASK, v, 2, 16);
    v = v + __shfl_down_sync(TF_FULL_MASK, v, 1, 16);
    return v;
}

// The RMSNorm scale of a sum of squares ss over n elements: 1 / sqrt(ss / n + eps), division
// and square root correctly rounded (the CPU contract's).
__device__ __forceinline__ float tf_inv_rms(float ss, int n, float eps) {
    return 1.0f / sqrtf(ss / (float)n + eps);
}

// Elements a block stages per step of tf_block_sumsq16 (a multiple of 16).
#define TF_SQ_CHUNK 2048

// sum over k < width of a row's squares in the 16-lane order (lane l: fmaf(v, v, acc) for k = l
// mod 16 ascending, then tf_fold16_sum), returned to every thread of the block. The block stages
// the row into shared memory TF_SQ_CHUNK elements at a time (stage(c0, len, chunk) writes its
// elements c0 .. c0 + len - 1 to chunk[0 ..]); the 16 chains then read shared memory. Every
// thread of the block must call it.
template <class Stage>
__device__ __forceinline__ float tf_staged_sumsq16(Stage stage, int width) {
    __shared__ float sq_chunk[TF_SQ_CHUNK];
    __shared__ float sq_sum;
    float acc = 0.0f;
    for (int c0 = 0; c0 < width; c0 += TF_SQ_CHUNK) {
        const int len = min(TF_SQ_CHUNK, width - c0);
        stage(c0, len, sq_chunk);
        __syncthreads();
        if (c0 == 0) tf_mark("~sumsq:staged");
        if (threadIdx.x < 16) {
#pragma unroll 8
            for (int k = threadIdx.x; k < len; k += 16) acc = fmaf(sq_chunk[k], sq_chunk[k], acc);
        }
        __syncthreads();
    }
    if (threadIdx.x < 32) {
        const float ss = tf_fold16_sum(acc);
        if (threadIdx.x == 0) sq_sum = ss;
    }
    __syncthreads();
    tf_mark("~sumsq:summed");
    return sq_sum;
}

// tf_staged_sumsq16 of v(k) (element k, any expression), read by the whole block a chunk at a
// time, so a chunk's loads are in flight together.
template <class V>
__device__ __forceinline__ float tf_block_sumsq16(V v, int width) {
    return tf_staged_sumsq16(
        [&](int c0, int len, float* chunk) {
#pragma unroll 4
            for (int k = threadIdx.x; k < len; k += blockDim.x) chunk[k] = v(c0 + k);
        },
        width);
}

// Elements a thread holds for tf_held_sumsq16 (rows of at most TF_HOLD * blockDim.x).
#define TF_HOLD 8

// tf_staged_sumsq16 (the bits of tf_block_sumsq16) of the first `width` elements of a row whose
// element threadIdx.x + j blockDim.x each thread holds in h[j]: its loads, issued together by
// the caller, need no second trip for a second chunk.
__device__ __forceinline__ float tf_held_sumsq16(const float (&h)[TF_HOLD], int width) {
    return tf_staged_sumsq16(
        [&](int c0, int len, float* chunk) {
#pragma unroll
            for (int j = 0; j < TF_HOLD; j++) {
                const int k = (int)(threadIdx.x + j * blockDim.x) - c0;
                if (k >= 0 && k < len) chunk[k] = h[j];
            }
        },
        width);
}

// The same tree with max_op(acc[l], acc[l + w]).
__device__ __forceinline__ float tf_fold16_max(float v) {
    v = tf_max_op(v, __shfl_down_sync(TF_FULL_MASK, v, 8, 16));
    v = tf_max_op(v, __shfl_down_sync(TF_FULL_MASK, v, 4, 16));
    v = tf_max_op(v, __shfl_down_sync(TF_FULL_MASK, v, 2, 16));
    v = tf_max_op(v, __shfl_down_sync(TF_FULL_MASK, v, 1, 16));
    return v;
}

// ---- quant formats begin (src/quant.rs; its tests compile this section for the host) ----
// K-quants and MLX affine. MLX is stored re-laid: per 32-element unit, the
// unit's 4 * bits bytes of the row's packed bit stream, then its group's scale and bias widened
// to f32 (exact), so one decoder per width serves every group size and scale dtype.
#define FMT_Q4_K 6
#define FMT_Q6_K 7
#define FMT_MLX2 8
#define FMT_MLX3 9
#define FMT_MLX4 10
#define FMT_MLX5 11
#define FMT_MLX6 12
#define FMT_MLX8 13
// Planted controls (never chosen by GpuFormat): a base format decoded wrongly on purpose.
#define FMT_PLANT_Q4_K 64  // Q4_K with the (scale, min) pair of the neighbouring sub-block
#define FMT_PLANT_Q6_K 65  // Q6_K with every 16-group of a quadrant taking the first one's scale
#define FMT_PLANT_MLX4 66  // MLX 4-bit with the two nibbles of each byte swapped
#define FMT_PLANT_MLX4_FMA 67  // MLX 4-bit as fmaf(s, q, b): one rounding where the CPU has two

// Bits per weight of an MLX format id (0 for other formats).
__host__ __device__ constexpr int tf_mlx_bits(int fmt) {
    return fmt == FMT_PLANT_MLX4 || fmt == FMT_PLANT_MLX4_FMA ? 4
           : fmt == FMT_MLX8                         ? 8
           : (fmt >= FMT_MLX2 && fmt <= FMT_MLX6) ? fmt - FMT_MLX2 + 2
                                                     : 0;
}

// Whether a format id is one of this section's (real or planted).
__host__ __device__ constexpr bool tf_is_quant_format(int fmt) {
    return (fmt >= FMT_Q4_K && fmt <= FMT_MLX8) ||
           (fmt >= FMT_PLANT_Q4_K && fmt <= FMT_PLANT_MLX4_FMA);
}

// Bytes of one stored row of `cols` elements of this section's formats.
__device__ __forceinline__ size_t tf_quant_row_bytes(int fmt, int cols) {
    if (fmt == FMT_Q4_K || fmt == FMT_PLANT_Q4_K) return (size_t)(cols / 256) * 144;
    if (fmt == FMT_Q6_K || fmt == FMT_PLANT_Q6_K) return (size_t)(cols / 256) * 210;
    return (size_t)(cols / 32) * (4 * tf_mlx_bits(fmt) + 8);
}

// Q4_K (tf_kernels matmul::decode::decode_q4_k): 256-element super-blocks of 144 bytes (f16 d,
// f16 dmin, 12 bytes of packed 6-bit (scale, min) pairs, 128 bytes of nibbles). Element e is
// nibble (e >> 5) & 1 of byte 32 * (e >> 6) + (e & 31); its sub-block j = e >> 5 has
// d1 = d * sc, m1 = dmin * m (both exact), and w = fmaf(d1, q, -m1).
template <bool PLANT>
__device__ __forceinline__ float tf_decode_q4_k(const u8* row, int k) {
    const u8* b = row + (size_t)(k >> 8) * 144;
    const int e = k & 255;
    int j = e >> 5;
    const u8 byte = b[16 + 32 * (j >> 1) + (e & 31)];
    const int q = (j & 1) ? (byte >> 4) : (byte & 15);
    if (PLANT) j ^= 1;
    const u8* s = b + 4;
    int sc, m;
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
    const float d1 = tf_f16(tf_ld16(b)) * (float)sc;
    const float m1 = tf_f16(tf_ld16(b + 2)) * (float)m;
    return fmaf(d1, (float)q, -m1);
}

// Q6_K (tf_kernels matmul::decode::decode_q6_k): 256-element super-blocks of 210 bytes (128
// bytes of low nibbles, 64 of 2-bit highs, 16 signed 8-bit scales, f16 d). Element e lies in
// half h = e >> 7, quadrant qd = (e >> 5) & 3, lane l = e & 31; ds = d * sc (exact), w = ds * q.
template <bool PLANT>
__device__ __forceinline__ float tf_decode_q6_k(const u8* row, int k) {
    const u8* b = row + (size_t)(k >> 8) * 210;
    const int e = k & 255;
    const int h = e >> 7, qd = (e >> 5) & 3, l = e & 31;
    const u8 lo = b[64 * h + 32 * (qd & 1) + l];
    const u8 hi = b[128 + 32 * h + l];
    const int q = (((lo >> (4 * (qd >> 1))) & 15) | (((hi >> (2 * qd)) & 3) << 4)) - 32;
    const int is = PLANT ? 0 : (l >> 4);
    const float ds = tf_f16(tf_ld16(b + 208)) * (float)(signed char)b[192 + 8 * h + is + 2 * qd];
    return ds * (float)q;
}

// MLX affine (tf_kernels matmul::decode::decode_mlx_row) in the re-laid units of src/quant.rs:
// unit u = k >> 5 is 4 * B bytes of packed bits (element k at bits [k * B, k * B + B) of the
// row's little-endian stream), then the f32 scale, then the f32 bias; w = (s * q) + b, two
// roundings (no fma: --fmad=false). A last element's second byte, when read, is the scale's
// first byte, and the mask drops it. PLANT 1 swaps nibbles, PLANT 2 fuses s * q + b (controls).
template <int B, int PLANT>
__device__ __forceinline__ float tf_decode_mlx(const u8* row, int k) {
    const u8* p = row + (size_t)(k >> 5) * (4 * B + 8);
    const int bit = (k & 31) * B;
    u32 v = p[bit >> 3];
    if (8 % B != 0) v |= (u32)p[(bit >> 3) + 1] << 8;
    int sh = bit & 7;
    if (PLANT == 1) sh ^= 4;
    const u32 q = (v >> sh) & ((1u << B) - 1u);
    const float s = *(const float*)(p + 4 * B);
    const float bias = *(const float*)(p + 4 * B + 4);
    if (PLANT == 2) return fmaf(s, (float)q, bias);
    return s * (float)q + bias;
}

// Element k of a stored row of one of this section's formats.
template <int FMT>
__device__ __forceinline__ float tf_decode_quant(const u8* row, int k) {
    if constexpr (FMT == FMT_Q4_K) return tf_decode_q4_k<false>(row, k);
    if constexpr (FMT == FMT_PLANT_Q4_K) return tf_decode_q4_k<true>(row, k);
    if constexpr (FMT == FMT_Q6_K) return tf_decode_q6_k<false>(row, k);
    if constexpr (FMT == FMT_PLANT_Q6_K) return tf_decode_q6_k<true>(row, k);
    if constexpr (FMT == FMT_PLANT_MLX4) return tf_decode_mlx<4, 1>(row, k);
    if constexpr (FMT == FMT_PLANT_MLX4_FMA) return tf_decode_mlx<4, 2>(row, k);
    if constexpr (FMT >= FMT_MLX2 && FMT <= FMT_MLX8)
        return tf_decode_mlx<tf_mlx_bits(FMT), 0>(row, k);
    return 0.0f;
}
// ---- quant formats end ----

// Bytes of one stored weight row of `cols` elements.
__device__ __forceinline__ size_t tf_row_bytes(int fmt, int cols) {
    switch (fmt) {
        case FMT_F32: return (size_t)cols * 4;
        case FMT_F16:
        case FMT_BF16: return (size_t)cols * 2;
        case FMT_Q4_0: return (size_t)(cols / 32) * 18;
        case FMT_Q4_1: return (size_t)(cols / 32) * 20;
        case FMT_Q4_K:
        case FMT_Q6_K:
        case FMT_MLX2:
        case FMT_MLX3:
        case FMT_MLX4:
        case FMT_MLX5:
        case FMT_MLX6:
        case FMT_MLX8:
        case FMT_PLANT_Q4_K:
        case FMT_PLANT_Q6_K:
        case FMT_PLANT_MLX4:
        case FMT_PLANT_MLX4_FMA: return tf_quant_row_bytes(fmt, cols);
        default: return (size_t)(cols / 32) * 34;  // FMT_Q8_0
    }
}

// Element k of a stored row, decoded with the CPU's arithmetic (tf_kernels matmul::decode).
template <int FMT>
__device__ __forceinline__ float tf_decode(const u8* row, int k) {
    if (FMT == FMT_F32) return ((const float*)row)[k];
    if (FMT == FMT_F16) return tf_f16(((const u16*)row)[k]);
    if (FMT == FMT_BF16) return tf_bf16(((const u16*)row)[k]);
    const int e = k & 31;
    if (FMT == FMT_Q4_0) {
        const u8* b = row + (size_t)(k >> 5) * 18;
        const u8 q = b[2 + (e & 15)];
        const int v = e < 16 ? (q & 15) : (q >> 4);
        return tf_f16(tf_ld16(b)) * (float)(v - 8);
    }
    if (FMT == FMT_Q4_1) {
        const u8* b = row + (size_t)(k >> 5) * 20;
        const u8 q = b[4 + (e & 15)];
        const int v = e < 16 ? (q & 15) : (q >> 4);
        return fmaf(tf_f16(tf_ld16(b)), (float)v, tf_f16(tf_ld16(b + 2)));
    }
    if constexpr (tf_is_quant_format(FMT)) return tf_decode_quant<FMT>(row, k);
    // FMT_Q8_0
    const u8* b = row + (size_t)(k >> 5) * 34;
    return tf_f16(tf_ld16(b)) * (float)(signed char)b[2 + e];
}

// Asynchronous 16-byte copies from device to shared memory (cp.async, sm_80 on; a plain copy
// before), committed as a group and waited for by groups.
__device__ __forceinline__ void tf_cp_async16(void* smem, const void* gmem) {
#if __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
#else
    *(uint4*)smem = *(const uint4*)gmem;
#endif
}
__device__ __forceinline__ void tf_cp_async_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void tf_cp_async_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}
