//! Portable definitions of the primitives: these ARE the contract; SIMD paths must equal them bit for bit.
//!
//! Reduction order (dot, sum, max): 16 lane accumulators; element `i` goes to lane `i % 16`, in
//! ascending `i`; the tail is padded with the operation's identity (0, or -inf for max). The lanes are
//! then folded by a fixed tree: `l += l + 8` (l < 8), `l += l + 4` (l < 4), `l += l + 2`, `0 += 1`.
//! Products are fused (`mul_add`, one rounding), as the AVX2/FMA and AVX-512 paths do.

/// Number of lane accumulators in every reduction.
pub const LANES: usize = 16;

/// Folds 16 lane values by the fixed tree `(l, l+8)`, `(l, l+4)`, `(l, l+2)`, `(0, 1)` with `op`.
#[inline(always)]
pub fn fold16(mut acc: [f32; LANES], op: impl Fn(f32, f32) -> f32) -> f32 {
    let mut width = LANES / 2;
    while width >= 1 {
        for l in 0..width {
            acc[l] = op(acc[l], acc[l + width]);
        }
        width /= 2;
    }
    acc[0]
}

/// `max` as the SIMD `max_ps(x, acc)` computes it: `x` if `x > acc`, else `acc` (NaN `x` is skipped).
#[inline(always)]
pub fn max_op(acc: f32, x: f32) -> f32 {
    if x > acc {
        x
    } else {
        acc
    }
}

/// Dot product with fused multiply-adds in the 16-lane order.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [0.0f32; LANES];
    for i in 0..n {
        acc[i % LANES] = a[i].mul_add(b[i], acc[i % LANES]);
    }
    fold16(acc, |x, y| x + y)
}

/// Sum of elements in the 16-lane order.
pub fn sum(x: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    for (i, &v) in x.iter().enumerate() {
        acc[i % LANES] += v;
    }
    fold16(acc, |x, y| x + y)
}

/// Maximum in the 16-lane order (`-inf` for an empty slice; NaN elements are skipped).
pub fn max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    for (i, &v) in x.iter().enumerate() {
        acc[i % LANES] = max_op(acc[i % LANES], v);
    }
    fold16(acc, max_op)
}

/// `y[i] = fma(a, x[i], y[i])`.
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi = a.mul_add(xi, *yi);
    }
}

/// `out[i] = w[i] * (x[i] * r)`, two roundings (the RMSNorm output step).
pub fn scale_mul(x: &[f32], r: f32, w: &[f32], out: &mut [f32]) {
    for ((o, &xi), &wi) in out.iter_mut().zip(x).zip(w) {
        *o = wi * (xi * r);
    }
}

/// `out[i] = exp(x[i] - shift)` with [`exp`].
pub fn exp_shifted(x: &[f32], shift: f32, out: &mut [f32]) {
    for (o, &xi) in out.iter_mut().zip(x) {
        *o = exp(xi - shift);
    }
}

/// `out[i] = silu(gate[i]) * up[i]` with [`silu`].
pub fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = silu(g) * u;
    }
}

/// Inputs above this return `+inf` from [`exp`] (`ln(2^127.5)`, so `2^n` stays a normal float).
pub const EXP_HI: f32 = 88.376_26;
/// Inputs below this return `0` from [`exp`] (`ln` of the smallest normal float).
pub const EXP_LO: f32 = -87.336_54;
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// `ln 2` split so that `n * LN2_HI` is exact for |n| <= 128.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Adding and subtracting 1.5 * 2^23 rounds to the nearest integer, ties to even.
const ROUND_MAGIC: f32 = 12_582_912.0;
/// Taylor coefficients 1/k! for k = 7 down to 2.
pub(crate) const EXP_POLY: [f32; 6] = [
    1.0 / 5040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
];

/// The contract's `exp`: `2^n * p(r)`, `n = round(x log2 e)`, `r = x - n ln 2` (two fmas), `p` the
/// degree-7 Taylor polynomial evaluated by Horner with fmas. NaN stays NaN; `x > EXP_HI` gives
/// `+inf`; `x < EXP_LO` gives `0` (no subnormal results). Within 2 ulp of the true value.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x > EXP_HI {
        return f32::INFINITY;
    }
    if x < EXP_LO {
        return 0.0;
    }
    let n = (x * LOG2E + ROUND_MAGIC) - ROUND_MAGIC;
    let r = (-n).mul_add(LN2_HI, x);
    let r = (-n).mul_add(LN2_LO, r);
    let mut p = EXP_POLY[0];
    for &c in &EXP_POLY[1..] {
        p = p.mul_add(r, c);
    }
    p = p.mul_add(r, 1.0);
    p = p.mul_add(r, 1.0);
    let bits = ((n as i32 + 127) as u32) << 23;
    p * f32::from_bits(bits)
}

/// The contract's SiLU: `x / (1 + exp(-x))` with [`exp`], one division.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + exp(-x))
}

/// `out[j] = dot(q, base[j*stride ..][..q.len()]) * scale` for each `j` (attention scores).
pub fn dot_rows(q: &[f32], base: &[f32], stride: usize, scale: f32, out: &mut [f32]) {
    for (j, o) in out.iter_mut().enumerate() {
        *o = dot(q, &base[j * stride..][..q.len()]) * scale;
    }
}

/// `acc[d] = fma(p[j], base[j*stride + d], acc[d])` for `j` ascending (attention's weighted sum).
pub fn axpy_rows(p: &[f32], base: &[f32], stride: usize, acc: &mut [f32]) {
    let n = acc.len();
    for (j, &pj) in p.iter().enumerate() {
        axpy(pj, &base[j * stride..][..n], acc);
    }
}
