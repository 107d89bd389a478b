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

// The same tree with max_op(acc[l], acc[l + w]).
__device__ __forceinline__ float tf_fold16_max(float v) {
    v = tf_max_op(v, __shfl_down_sync(TF_FULL_MASK, v, 8, 16));
    v = tf_max_op(v, __shfl_down_sync(TF_FULL_MASK, v, 4, 16));
    v = tf_max_op(v, __shfl_down_sync(TF_FULL_MASK, v, 2, 16));
    v = tf_max_op(v, __shfl_down_sync(TF_FULL_MASK, v, 1, 16));
    return v;
}

// Bytes of one stored weight row of `cols` elements.
__device__ __forceinline__ size_t tf_row_bytes(int fmt, int cols) {
    switch (fmt) {
        case FMT_F32: return (size_t)cols * 4;
        case FMT_F16:
        case FMT_BF16: return (size_t)cols * 2;
        case FMT_Q4_0: return (size_t)(cols / 32) * 18;
        case FMT_Q4_1: return (size_t)(cols / 32) * 20;
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
    // FMT_Q8_0
    const u8* b = row + (size_t)(k >> 5) * 34;
    return tf_f16(tf_ld16(b)) * (float)(signed char)b[2 + e];
}
