// Synthetic weights filled on the device: the generator of tf_formats::checkpoint::synthetic,
// bit for bit (splitmix64 draws of (tensor key, index); values center + q * 2^exp; scales
// (1 + m/16) * 2^e built from bits). Integer arithmetic only, except one exact f32 add.

__device__ __forceinline__ u64 tf_mix64(u64 z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Draw i of the stream `key`.
__device__ __forceinline__ u64 tf_rand64(u64 key, u64 i) {
    return tf_mix64(key + (i + 1ull) * 0x9E3779B97F4A7C15ull);
}

// Kinds: 0 f32, 1 f16, 2 bf16 (FloatKind).
__device__ __forceinline__ u32 tf_synth_scale_bits(int kind, u32 m, int e, int neg) {
    m &= 15u;
    u32 s = neg ? 1u : 0u;
    if (kind == 0) return (s << 31) | ((u32)(e + 127) << 23) | (m << 19);
    if (kind == 2) return (s << 15) | ((u32)(e + 127) << 7) | (m << 3);
    if (e >= -14) return (s << 15) | ((u32)(e + 15) << 10) | (m << 6);
    int sh = e + 20;
    return (s << 15) | ((16u + m) << (sh > 0 ? sh : 0));
}

// 2^e as an f32 (normal range).
__device__ __forceinline__ float tf_synth_pow2(int e) {
    int b = e + 127;
    b = b < 1 ? 1 : (b > 254 ? 254 : b);
    return __int_as_float(b << 23);
}

#ifndef TF_SYNTH_HOST
// f32 -> IEEE half bits, round to nearest even (the host test supplies its own).
__device__ __forceinline__ u32 tf_synth_f16_rn(float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}
#endif

// f32 -> the bits of `kind` (round to nearest even).
__device__ __forceinline__ u32 tf_synth_round(float v, int kind) {
    u32 u = (u32)__float_as_int(v);
    if (kind == 0) return u;
    if (kind == 2) return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    return tf_synth_f16_rn(v);
}

// The f32 value of `kind` bits.
__device__ __forceinline__ float tf_synth_widen(u32 bits, int kind) {
    if (kind == 0) return __int_as_float((int)bits);
    if (kind == 2) return tf_bf16((u16)bits);
    return tf_f16((u16)bits);
}

// Byte i (0..3, little-endian) of the field bits.
__device__ __forceinline__ u8 tf_synth_byte(u32 bits, int i) { return (u8)(bits >> (8 * i)); }

// Packed blocks (BlockLayout): block b takes stream bytes b*stream_bytes .. into its first
// stream_bytes bytes, then the scale (and min/bias) fields, drawn once per group_blocks blocks.
// The fields are written over the stream where they overlap (the min/bias field last). A thread
// a byte, so a warp's stores are consecutive bytes; bytes of no field are left as they are.
extern "C" __global__ void tf_synth_blocks(u8* out, u64 nblocks, u64 key, u64 scale_key,
                                           int block_bytes, int stream_bytes, int group_blocks,
                                           int scale_off, int scale_kind, int scale_exp,
                                           int min_off, int min_kind, int min_exp, int min_neg) {
    tf_follow();
    const u64 total = nblocks * (u64)block_bytes, stride = (u64)gridDim.x * blockDim.x;
    const int scale_w = scale_kind == 0 ? 4 : 2, min_w = min_kind == 0 ? 4 : 2;
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        const u64 b = t / (u64)block_bytes;
        const int k = (int)(t - b * (u64)block_bytes);
        const bool in_scale = k >= scale_off && k < scale_off + scale_w;
        const bool in_min = min_off >= 0 && k >= min_off && k < min_off + min_w;
        if (in_scale || in_min) {
            const u32 m = (u32)(tf_rand64(scale_key, b / (u64)group_blocks) >> 60);
            out[t] = in_min ? tf_synth_byte(tf_synth_scale_bits(min_kind, m, min_exp, min_neg),
                                            k - min_off)
                            : tf_synth_byte(tf_synth_scale_bits(scale_kind, m, scale_exp, 0),
                                            k - scale_off);
        } else if (k < stream_bytes) {
            const u64 o = b * (u64)stream_bytes + (u64)k;
            out[t] = (u8)(tf_rand64(key, o >> 3) >> (8ull * (o & 7ull)));
        }
    }
}

// Dense values: element i = center + q_i * 2^exp stored as `store_kind`, written as `out_kind`
// (the stored value widened when out_kind is f32 and store_kind is not).
extern "C" __global__ void tf_synth_dense(u8* out, u64 n, u64 key, int out_kind, int store_kind,
                                          u32 center_bits, int qbits, int exp) {
    tf_follow();
    u64 stride = (u64)gridDim.x * blockDim.x;
    float center = __int_as_float((int)center_bits);
    float step = tf_synth_pow2(exp);
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        u64 r = tf_rand64(key, i);
        long long q = (long long)(r >> (64 - qbits)) - (1ll << (qbits - 1));
        float v = center + (float)q * step;
        u32 bits = tf_synth_round(v, store_kind);
        if (out_kind != store_kind) bits = tf_synth_round(tf_synth_widen(bits, store_kind), out_kind);
        if (out_kind == 0) ((u32*)out)[i] = bits;
        else ((u16*)out)[i] = (u16)bits;
    }
}
