//! Portable dequantization of one weight row into f32 — the exact values every kernel uses.
//!
//! Each format's arithmetic (see docs/kernels.md) rounds at most once per element, and the
//! SIMD decoders in `decode_x86` compute bit-identical values.

use super::weights::{f16_to_f32, FloatType, PackedMatrix, WeightData};
use tf_formats::gguf::GgmlType;

/// Little-endian u16 at `b[i..i + 2]`.
#[inline(always)]
pub(crate) fn le16(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

/// The 6-bit (scale, min) pair `j` (0..8) of a Q4_K block's 12 packed scale bytes.
#[inline(always)]
pub(crate) fn q4k_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// The byte range of row `row` in a buffer of equal-sized rows.
#[inline(always)]
pub(crate) fn row_bytes(bytes: &[u8], row: usize, row_len: usize) -> &[u8] {
    &bytes[row * row_len..(row + 1) * row_len]
}

/// Dequantizes row `row` of `w` into `out[..w.cols()]` (portable code). `row < w.rows()`
/// and `out.len() >= w.cols()` are the caller's to check.
#[inline(always)]
pub(crate) fn decode_row_scalar(w: &PackedMatrix, row: usize, out: &mut [f32]) {
    let cols = w.cols();
    let out = &mut out[..cols];
    match *w.data() {
        WeightData::Dense { ty, bytes } => {
            let rb = row_bytes(bytes, row, cols * ty.size());
            for (k, o) in out.iter_mut().enumerate() {
                *o = ty.read(rb, k);
            }
        }
        WeightData::Gguf { ty, bytes } => {
            let nb = cols / ty.block_size();
            let rb = row_bytes(bytes, row, nb * ty.type_size());
            for (b, blk) in rb.chunks_exact(ty.type_size()).enumerate() {
                let o = &mut out[b * ty.block_size()..(b + 1) * ty.block_size()];
                match ty {
                    GgmlType::Q4_0 => decode_q4_0(blk, o),
                    GgmlType::Q4_1 => decode_q4_1(blk, o),
                    GgmlType::Q8_0 => decode_q8_0(blk, o),
                    GgmlType::Q4K => decode_q4_k(blk, o),
                    GgmlType::Q6K => decode_q6_k(blk, o),
                    // PackedMatrix::new admits only the five formats above.
                    _ => o.fill(f32::NAN),
                }
            }
        }
        WeightData::MlxAffine {
            bits,
            group_size,
            scale_ty,
            words,
            scales,
            biases,
        } => decode_mlx_row(
            bits, group_size, scale_ty, words, scales, biases, cols, row, out,
        ),
    }
}

/// Q4_0: `w = d * (q - 8)` (exact: an f16 times a 4-bit integer fits f32).
#[inline(always)]
pub(crate) fn decode_q4_0(blk: &[u8], o: &mut [f32]) {
    let d = f16_to_f32(le16(blk, 0));
    for j in 0..16 {
        let q = blk[2 + j];
        o[j] = d * ((q & 0xF) as i32 - 8) as f32;
        o[j + 16] = d * ((q >> 4) as i32 - 8) as f32;
    }
}

/// Q4_1: `w = fma(d, q, m)` (= `d * q + m` rounded once, since `d * q` is exact).
#[inline(always)]
pub(crate) fn decode_q4_1(blk: &[u8], o: &mut [f32]) {
    let d = f16_to_f32(le16(blk, 0));
    let m = f16_to_f32(le16(blk, 2));
    for j in 0..16 {
        let q = blk[4 + j];
        o[j] = d.mul_add((q & 0xF) as f32, m);
        o[j + 16] = d.mul_add((q >> 4) as f32, m);
    }
}

/// Q8_0: `w = d * q` (exact).
#[inline(always)]
pub(crate) fn decode_q8_0(blk: &[u8], o: &mut [f32]) {
    let d = f16_to_f32(le16(blk, 0));
    for j in 0..32 {
        o[j] = d * (blk[2 + j] as i8) as f32;
    }
}

/// Q4_K: per 32-element sub-block `d1 = d * sc`, `m1 = dmin * m` (both exact), then
/// `w = fma(d1, q, -m1)` (= `d1 * q - m1` rounded once).
#[inline(always)]
pub(crate) fn decode_q4_k(blk: &[u8], o: &mut [f32]) {
    let d = f16_to_f32(le16(blk, 0));
    let dmin = f16_to_f32(le16(blk, 2));
    let scales = &blk[4..16];
    let qs = &blk[16..144];
    for c in 0..4 {
        let (sc1, m1) = q4k_scale_min(2 * c, scales);
        let (sc2, m2) = q4k_scale_min(2 * c + 1, scales);
        let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
        let q = &qs[32 * c..32 * c + 32];
        for l in 0..32 {
            o[64 * c + l] = d1.mul_add((q[l] & 0xF) as f32, -m1);
            o[64 * c + 32 + l] = d2.mul_add((q[l] >> 4) as f32, -m2);
        }
    }
}

/// Q6_K: per 16-element group `ds = d * sc` (exact), then `w = ds * q` (rounded once).
#[inline(always)]
pub(crate) fn decode_q6_k(blk: &[u8], o: &mut [f32]) {
    let ql = &blk[0..128];
    let qh = &blk[128..192];
    let sc = &blk[192..208];
    let d = f16_to_f32(le16(blk, 208));
    for h in 0..2 {
        let (ql, qh, sc) = (&ql[64 * h..], &qh[32 * h..], &sc[8 * h..]);
        let o = &mut o[128 * h..128 * h + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            o[l] = (d * (sc[is] as i8) as f32) * q1 as f32;
            o[l + 32] = (d * (sc[is + 2] as i8) as f32) * q2 as f32;
            o[l + 64] = (d * (sc[is + 4] as i8) as f32) * q3 as f32;
            o[l + 96] = (d * (sc[is + 6] as i8) as f32) * q4 as f32;
        }
    }
}

/// MLX affine, any width 2..=8: element `k` is bits `[k*bits, (k+1)*bits)` of the row's
/// little-endian bit stream; `w = (scale * q) + bias` per group, two f32 operations (the
/// product is exact for f16/bf16 scales; for f32 scales this is MLX's own f32 arithmetic).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn decode_mlx_row(
    bits: u8,
    group_size: usize,
    scale_ty: FloatType,
    words: &[u8],
    scales: &[u8],
    biases: &[u8],
    cols: usize,
    row: usize,
    out: &mut [f32],
) {
    let bits = bits as usize;
    let wb = row_bytes(words, row, cols * bits / 8);
    let groups = cols / group_size;
    let mask = (1u32 << bits) - 1;
    for g in 0..groups {
        let s = scale_ty.read(scales, row * groups + g);
        let b = scale_ty.read(biases, row * groups + g);
        let span = g * group_size..(g + 1) * group_size;
        for (k, o) in span.clone().zip(&mut out[span]) {
            let bit = k * bits;
            let lo = wb[bit / 8] as u32;
            let hi = wb.get(bit / 8 + 1).copied().unwrap_or(0) as u32;
            let q = ((lo | (hi << 8)) >> (bit % 8)) & mask;
            *o = s * q as f32 + b;
        }
    }
}
