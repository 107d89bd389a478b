//! Reference dequantizers: plain scalar Rust, one block at a time, written for clarity.
//!
//! Each block function states the block layout (as in ggml's block structs) and the exact
//! f32 arithmetic, which is the one the `gguf` Python package's numpy dequantizer performs:
//! every `*` and `+`/`-` below is one IEEE f32 operation rounded to nearest-even, in the
//! order written (Rust never fuses them into an FMA). f16/bf16 to f32 conversions are exact.
//! The fast kernels are tested against these, so they must stay obviously right.

use half::f16;

use super::dequant_k;
use super::error::GgufError;
use super::types::GgmlType;

/// Dequantizes `n_elements` values of type `ty` from `data` (exactly their bytes) into a new vector.
pub fn dequantize(ty: GgmlType, data: &[u8], n_elements: usize) -> Result<Vec<f32>, GgufError> {
    check_sizes(ty, data.len(), n_elements)?;
    let mut out = vec![0f32; n_elements];
    dequantize_into(ty, data, &mut out)?;
    Ok(out)
}

/// Dequantizes `data` of type `ty` into `out`, whose length is the element count.
pub fn dequantize_into(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), GgufError> {
    check_sizes(ty, data.len(), out.len())?;
    let block_fn: fn(&[u8], &mut [f32]) = match ty {
        GgmlType::F32 => block_f32,
        GgmlType::F16 => block_f16,
        GgmlType::BF16 => block_bf16,
        GgmlType::Q4_0 => block_q4_0,
        GgmlType::Q4_1 => block_q4_1,
        GgmlType::Q5_0 => block_q5_0,
        GgmlType::Q5_1 => block_q5_1,
        GgmlType::Q8_0 => block_q8_0,
        GgmlType::Q2K => dequant_k::block_q2_k,
        GgmlType::Q3K => dequant_k::block_q3_k,
        GgmlType::Q4K => dequant_k::block_q4_k,
        GgmlType::Q5K => dequant_k::block_q5_k,
        GgmlType::Q6K => dequant_k::block_q6_k,
        GgmlType::Q8K => dequant_k::block_q8_k,
        GgmlType::Q8_1
        | GgmlType::I8
        | GgmlType::I16
        | GgmlType::I32
        | GgmlType::I64
        | GgmlType::F64 => return Err(GgufError::UnsupportedDequant { ty }),
    };
    let blocks = data.chunks_exact(ty.type_size());
    let outs = out.chunks_exact_mut(ty.block_size());
    for (block, y) in blocks.zip(outs) {
        block_fn(block, y);
    }
    Ok(())
}

/// Whether [`dequantize`] has a reference for `ty`.
pub fn has_dequantizer(ty: GgmlType) -> bool {
    !matches!(
        ty,
        GgmlType::Q8_1
            | GgmlType::I8
            | GgmlType::I16
            | GgmlType::I32
            | GgmlType::I64
            | GgmlType::F64
    )
}

/// Checks that `n_elements` is whole blocks and `n_bytes` is exactly their size.
fn check_sizes(ty: GgmlType, n_bytes: usize, n_elements: usize) -> Result<(), GgufError> {
    let block_size = ty.block_size();
    if n_elements % block_size != 0 {
        return Err(GgufError::PartialBlock {
            ty,
            n_elements,
            block_size,
        });
    }
    let expected = (n_elements / block_size).checked_mul(ty.type_size());
    if expected != Some(n_bytes) {
        return Err(GgufError::DataSizeMismatch {
            ty,
            n_elements,
            expected: expected.unwrap_or(usize::MAX),
            actual: n_bytes,
        });
    }
    Ok(())
}

/// Reads the little-endian f16 at byte `at` of `b` as f32 (exact).
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// The 4-bit value of element `j` (0..32) of a 32-element block packed in 16 bytes:
/// elements 0..16 are the low nibbles of bytes 0..16, elements 16..32 their high nibbles.
fn nibble32(qs: &[u8], j: usize) -> u8 {
    if j < 16 {
        qs[j] & 0x0F
    } else {
        qs[j - 16] >> 4
    }
}

/// F32: 4 bytes, the value itself (bit copy).
fn block_f32(b: &[u8], y: &mut [f32]) {
    y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
}

/// F16: 2 bytes, IEEE half; y = the half widened to f32 (exact).
fn block_f16(b: &[u8], y: &mut [f32]) {
    y[0] = f16_at(b, 0);
}

/// BF16: 2 bytes, the top half of an f32; y = bits << 16 (exact, NaN payloads kept).
fn block_bf16(b: &[u8], y: &mut [f32]) {
    y[0] = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
}

/// Q4_0 (18 bytes / 32 elements): `d: f16` at 0, `qs: [u8; 16]` at 2 (see [`nibble32`]).
///
/// y[j] = d * f32(q[j] - 8): one rounding.
fn block_q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for (j, yj) in y.iter_mut().enumerate() {
        let q = nibble32(qs, j) as i32 - 8;
        *yj = d * q as f32;
    }
}

/// Q4_1 (20 bytes / 32 elements): `d: f16` at 0, `m: f16` at 2, `qs: [u8; 16]` at 4.
///
/// y[j] = (d * f32(q[j])) + m: the product is rounded, then the sum (no FMA).
fn block_q4_1(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qs = &b[4..20];
    for (j, yj) in y.iter_mut().enumerate() {
        let q = nibble32(qs, j) as f32;
        *yj = d * q + m;
    }
}

/// The fifth bit of element `j` of a Q5 block: bit `j` of the little-endian u32 `qh`.
fn q5_high_bit(qh: u32, j: usize) -> u8 {
    ((qh >> j) & 1) as u8
}

/// Q5_0 (22 bytes / 32 elements): `d: f16` at 0, `qh: u32` at 2, `qs: [u8; 16]` at 6.
///
/// q[j] = nibble | (bit j of qh) << 4, in 0..32; y[j] = d * f32(q[j] - 16): one rounding.
fn block_q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for (j, yj) in y.iter_mut().enumerate() {
        let q = (nibble32(qs, j) | q5_high_bit(qh, j) << 4) as i32 - 16;
        *yj = d * q as f32;
    }
}

/// Q5_1 (24 bytes / 32 elements): `d: f16` at 0, `m: f16` at 2, `qh: u32` at 4, `qs` at 8.
///
/// q[j] as in Q5_0 (0..32, no offset); y[j] = (d * f32(q[j])) + m: two roundings.
fn block_q5_1(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for (j, yj) in y.iter_mut().enumerate() {
        let q = nibble32(qs, j) | q5_high_bit(qh, j) << 4;
        *yj = d * q as f32 + m;
    }
}

/// Q8_0 (34 bytes / 32 elements): `d: f16` at 0, `qs: [i8; 32]` at 2.
///
/// y[j] = f32(qs[j]) * d: one rounding.
fn block_q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (yj, &q) in y.iter_mut().zip(&b[2..34]) {
        *yj = q as i8 as f32 * d;
    }
}
