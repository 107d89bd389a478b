//! Reference dequantizers for the 256-element "k-quant" super-blocks.
//!
//! Element `e` of a super-block is addressed directly (no pointer walking) so each bit's
//! origin can be read off the code. All arithmetic is f32, one rounding per operation in the
//! order written, matching the `gguf` Python package: the sub-block scale `d * sc` is rounded
//! to f32 first, then multiplied by the quant, then the (rounded) min term is subtracted.

use super::dequant::f16_at;

/// The 6-bit scale and min of sub-block `s` (0..8) from the 12 packed bytes of Q4_K/Q5_K.
///
/// Sub-blocks 0..4: scale = low 6 bits of byte s, min = low 6 bits of byte s+4.
/// Sub-blocks 4..8: scale = low nibble of byte s+4 | (top 2 bits of byte s-4) << 4,
/// min = high nibble of byte s+4 | (top 2 bits of byte s) << 4.
fn k4_scale_min(scales: &[u8], s: usize) -> (u8, u8) {
    if s < 4 {
        (scales[s] & 63, scales[s + 4] & 63)
    } else {
        let sc = (scales[s + 4] & 0x0F) | ((scales[s - 4] >> 6) << 4);
        let m = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4);
        (sc, m)
    }
}

/// The 6-bit signed scale of sub-block `i` (0..16) from the 12 packed bytes of Q3_K:
/// low 4 bits = nibble `i / 8` of byte `i % 8`, high 2 bits = bit pair `i / 4` of byte
/// `8 + i % 4`; the 6-bit value minus 32 gives -32..32.
fn q3k_scale(scales: &[u8], i: usize) -> i32 {
    let lo = (scales[i % 8] >> (4 * (i / 8))) & 0x0F;
    let hi = (scales[8 + i % 4] >> (2 * (i / 4))) & 0x03;
    (lo | hi << 4) as i32 - 32
}

/// The 2-bit value of element `e` (0..256) from 64 bytes packed as in Q2_K/Q3_K:
/// each 128-element half uses 32 bytes; element r of a half is bit pair `r / 32` of byte `r % 32`.
fn crumb256(qs: &[u8], e: usize) -> u8 {
    let (h, r) = (e / 128, e % 128);
    (qs[h * 32 + r % 32] >> (2 * (r / 32))) & 0x03
}

/// The 4-bit value of element `e` (0..256) from 128 bytes packed as in Q4_K/Q5_K:
/// sub-block `s = e / 32` uses bytes `(s / 2) * 32 ..`, low nibble for even s, high for odd.
fn nibble256(qs: &[u8], e: usize) -> u8 {
    let s = e / 32;
    (qs[(s / 2) * 32 + e % 32] >> (4 * (s % 2))) & 0x0F
}

/// Q2_K (84 bytes / 256): `scales: [u8; 16]` at 0, `qs: [u8; 64]` at 16, `d: f16` at 80,
/// `dmin: f16` at 82. Sub-block `s = e / 16` has scale `scales[s] & 15`, min `scales[s] >> 4`.
///
/// dl = d * f32(sc); ml = dmin * f32(min); y[e] = (dl * f32(q[e])) - ml, q = [`crumb256`].
pub(crate) fn block_q2_k(b: &[u8], y: &mut [f32]) {
    let scales = &b[0..16];
    let qs = &b[16..80];
    let d = f16_at(b, 80);
    let dmin = f16_at(b, 82);
    for (e, ye) in y.iter_mut().enumerate() {
        let sc = scales[e / 16];
        let dl = d * (sc & 0x0F) as f32;
        let ml = dmin * (sc >> 4) as f32;
        *ye = dl * crumb256(qs, e) as f32 - ml;
    }
}

/// Q3_K (110 bytes / 256): `hmask: [u8; 32]` at 0, `qs: [u8; 64]` at 32, `scales: [u8; 12]`
/// at 96, `d: f16` at 108.
///
/// q[e] = crumb256(qs, e) - 4 when bit `e / 32` of `hmask[e % 32]` is 0 (else no offset), so
/// -4..4; dl = d * f32(q3k_scale(e / 16)); y[e] = dl * f32(q[e]).
pub(crate) fn block_q3_k(b: &[u8], y: &mut [f32]) {
    let hmask = &b[0..32];
    let qs = &b[32..96];
    let scales = &b[96..108];
    let d = f16_at(b, 108);
    for (e, ye) in y.iter_mut().enumerate() {
        let high = (hmask[e % 32] >> (e / 32)) & 1;
        let q = crumb256(qs, e) as i32 - if high == 0 { 4 } else { 0 };
        let dl = d * q3k_scale(scales, e / 16) as f32;
        *ye = dl * q as f32;
    }
}

/// Q4_K (144 bytes / 256): `d: f16` at 0, `dmin: f16` at 2, `scales: [u8; 12]` at 4,
/// `qs: [u8; 128]` at 16. Sub-block `s = e / 32` has 6-bit scale/min from [`k4_scale_min`].
///
/// y[e] = ((d * f32(sc)) * f32(q[e])) - (dmin * f32(min)), q = [`nibble256`].
pub(crate) fn block_q4_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..16];
    let qs = &b[16..144];
    for (e, ye) in y.iter_mut().enumerate() {
        let (sc, m) = k4_scale_min(scales, e / 32);
        let dl = d * sc as f32;
        let ml = dmin * m as f32;
        *ye = dl * nibble256(qs, e) as f32 - ml;
    }
}

/// Q5_K (176 bytes / 256): `d: f16` at 0, `dmin: f16` at 2, `scales: [u8; 12]` at 4,
/// `qh: [u8; 32]` at 16, `qs: [u8; 128]` at 48.
///
/// q[e] = nibble256(qs, e) | (bit `e / 32` of `qh[e % 32]`) << 4, in 0..32;
/// y[e] = ((d * f32(sc)) * f32(q[e])) - (dmin * f32(min)), scale/min as Q4_K.
pub(crate) fn block_q5_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
    for (e, ye) in y.iter_mut().enumerate() {
        let s = e / 32;
        let (sc, m) = k4_scale_min(scales, s);
        let q = nibble256(qs, e) | ((qh[e % 32] >> s) & 1) << 4;
        let dl = d * sc as f32;
        let ml = dmin * m as f32;
        *ye = dl * q as f32 - ml;
    }
}

/// Q6_K (210 bytes / 256): `ql: [u8; 128]` at 0, `qh: [u8; 64]` at 128,
/// `scales: [i8; 16]` at 192, `d: f16` at 208.
///
/// In half `h = e / 128`, element `r = e % 128`: low 4 bits = nibble `r / 64` of
/// `ql[h*64 + r%64]`, high 2 bits = bit pair `r / 32` of `qh[h*32 + r%32]`;
/// q = that 6-bit value - 32; y[e] = (d * f32(scales[e / 16])) * f32(q).
pub(crate) fn block_q6_k(b: &[u8], y: &mut [f32]) {
    let ql = &b[0..128];
    let qh = &b[128..192];
    let scales = &b[192..208];
    let d = f16_at(b, 208);
    for (e, ye) in y.iter_mut().enumerate() {
        let (h, r) = (e / 128, e % 128);
        let lo = (ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0x0F;
        let hi = (qh[h * 32 + r % 32] >> (2 * (r / 32))) & 0x03;
        let q = (lo | hi << 4) as i32 - 32;
        let dl = d * scales[e / 16] as i8 as f32;
        *ye = dl * q as f32;
    }
}

/// Q8_K (292 bytes / 256): `d: f32` at 0, `qs: [i8; 256]` at 4, `bsums: [i16; 16]` at 260
/// (sums of each 16 quants, used only by dot products, ignored here).
///
/// y[e] = d * f32(qs[e]): one rounding.
pub(crate) fn block_q8_k(b: &[u8], y: &mut [f32]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (ye, &q) in y.iter_mut().zip(&b[4..260]) {
        *ye = d * q as i8 as f32;
    }
}
