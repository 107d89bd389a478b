//! RMSNorm: plain, zero-centred gain, and the grouped gated variant used by Mamba2 mixers.
//!
//! Arithmetic per row of width `n` (all f32):
//! `ss = dot(x, x)` in the 16-lane order of [`simd::portable`](super::simd::portable);
//! `r = 1 / sqrt(ss / n + eps)` (correctly rounded sqrt and division);
//! `y[i] = g[i] * (x[i] * r)` (two roundings, as transformers' `weight * (x * rsqrt(var + eps))`).

use super::error::{check_len, OpError};
use super::simd::{self, Isa};

/// How a checkpoint's stored norm weight becomes the multiplicative gain `g`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormWeightKind {
    /// `g = w` (llama, mistral, qwen, ...).
    Gain,
    /// `g = 1 + w`, added in f32 (Gemma-style zero-centred weights; mlx may store `1 + w` already).
    ZeroCentred,
}

/// The gain vector for `kind`; compute once at load and pass it to [`rms_norm`].
pub fn norm_gain(weight: &[f32], kind: NormWeightKind) -> Vec<f32> {
    match kind {
        NormWeightKind::Gain => weight.to_vec(),
        NormWeightKind::ZeroCentred => weight.iter().map(|&w| 1.0 + w).collect(),
    }
}

fn check_eps(op: &'static str, eps: f32) -> Result<(), OpError> {
    if eps.is_finite() && eps >= 0.0 {
        Ok(())
    } else {
        Err(OpError::Param {
            op,
            param: "eps",
            value: eps as f64,
            why: "must be finite and >= 0",
        })
    }
}

/// `1 / sqrt(ss / n + eps)`: the inverse RMS of a row whose sum of squares is `ss`.
#[inline]
fn inv_rms(ss: f32, n: usize, eps: f32) -> f32 {
    1.0 / (ss / n as f32 + eps).sqrt()
}

/// RMSNorm of `n_rows` rows of width `gain.len()`: `out = gain * (x * inv_rms(x))`.
pub fn rms_norm(
    x: &[f32],
    gain: &[f32],
    eps: f32,
    n_rows: usize,
    out: &mut [f32],
) -> Result<(), OpError> {
    const OP: &str = "rms_norm";
    let width = gain.len();
    if width == 0 {
        return Err(OpError::Shape {
            op: OP,
            detail: "gain (row width) is empty".into(),
        });
    }
    check_eps(OP, eps)?;
    check_len(OP, "x", n_rows * width, x.len())?;
    check_len(OP, "out", n_rows * width, out.len())?;
    let isa = Isa::active();
    for (xr, or) in x.chunks_exact(width).zip(out.chunks_exact_mut(width)) {
        let r = inv_rms(simd::dot(isa, xr, xr), width, eps);
        simd::scale_mul(isa, xr, r, gain, or);
    }
    Ok(())
}

/// In-place RMSNorm of `n_rows` rows of width `gain.len()`; same arithmetic as [`rms_norm`].
pub fn rms_norm_inplace(
    x: &mut [f32],
    gain: &[f32],
    eps: f32,
    n_rows: usize,
) -> Result<(), OpError> {
    const OP: &str = "rms_norm_inplace";
    let width = gain.len();
    if width == 0 {
        return Err(OpError::Shape {
            op: OP,
            detail: "gain (row width) is empty".into(),
        });
    }
    check_eps(OP, eps)?;
    check_len(OP, "x", n_rows * width, x.len())?;
    let isa = Isa::active();
    for xr in x.chunks_exact_mut(width) {
        let r = inv_rms(simd::dot(isa, xr, xr), width, eps);
        for (v, &g) in xr.iter_mut().zip(gain) {
            *v = g * (*v * r);
        }
    }
    Ok(())
}

/// Grouped gated RMSNorm (Mamba2): `h = x * silu(z)`, then each of `n_groups` equal groups of a
/// row is normalised by its own RMS, then multiplied by `gain` (width = `gain.len()`).
///
/// `silu` is the contract's [`silu`](super::activation::silu); `h` is rounded to f32 before the
/// sum of squares (as transformers' `MambaRMSNormGated` and mlx-lm do with f32 inputs).
pub fn rms_norm_gated(
    x: &[f32],
    z: &[f32],
    gain: &[f32],
    eps: f32,
    n_groups: usize,
    n_rows: usize,
    out: &mut [f32],
) -> Result<(), OpError> {
    const OP: &str = "rms_norm_gated";
    let width = gain.len();
    if width == 0 || n_groups == 0 || !width.is_multiple_of(n_groups) {
        return Err(OpError::Shape {
            op: OP,
            detail: format!("width {width} must be a positive multiple of n_groups {n_groups}"),
        });
    }
    check_eps(OP, eps)?;
    check_len(OP, "x", n_rows * width, x.len())?;
    check_len(OP, "z", n_rows * width, z.len())?;
    check_len(OP, "out", n_rows * width, out.len())?;
    let isa = Isa::active();
    let gs = width / n_groups;
    let rows = x
        .chunks_exact(width)
        .zip(z.chunks_exact(width))
        .zip(out.chunks_exact_mut(width));
    for ((xr, zr), or) in rows {
        simd::silu_mul(isa, zr, xr, or);
        for (hg, gg) in or.chunks_exact_mut(gs).zip(gain.chunks_exact(gs)) {
            let r = inv_rms(simd::dot(isa, hg, hg), gs, eps);
            for (v, &g) in hg.iter_mut().zip(gg) {
                *v = g * (*v * r);
            }
        }
    }
    Ok(())
}
