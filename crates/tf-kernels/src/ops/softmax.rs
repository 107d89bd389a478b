//! Softmax and log-softmax over rows of logits (for the sampler and scoring).
//!
//! Per row: `m = max(x)` (16-lane order), `e_i = exp(x_i - m)` (contract `exp`),
//! `s = sum(e)` (16-lane order); softmax `e_i / s` (one division); log-softmax
//! `(x_i - m) - ln(s)` with `ln` in f64 rounded to f32.

use super::error::{check_len, OpError};
use super::simd::{self, Isa};

fn rows_check(op: &'static str, x: &[f32], width: usize, out: &[f32]) -> Result<(), OpError> {
    if width == 0 || !x.len().is_multiple_of(width) {
        return Err(OpError::Shape {
            op,
            detail: format!(
                "length {} is not a positive multiple of width {width}",
                x.len()
            ),
        });
    }
    check_len(op, "out", x.len(), out.len())
}

/// Softmax of each row of `width` logits.
pub fn softmax(x: &[f32], width: usize, out: &mut [f32]) -> Result<(), OpError> {
    rows_check("softmax", x, width, out)?;
    let isa = Isa::active();
    for (xr, or) in x.chunks_exact(width).zip(out.chunks_exact_mut(width)) {
        let m = simd::max(isa, xr);
        simd::exp_shifted(isa, xr, m, or);
        let s = simd::sum(isa, or);
        for v in or.iter_mut() {
            *v /= s;
        }
    }
    Ok(())
}

/// Log-softmax of each row of `width` logits.
pub fn log_softmax(x: &[f32], width: usize, out: &mut [f32]) -> Result<(), OpError> {
    rows_check("log_softmax", x, width, out)?;
    let isa = Isa::active();
    for (xr, or) in x.chunks_exact(width).zip(out.chunks_exact_mut(width)) {
        let m = simd::max(isa, xr);
        simd::exp_shifted(isa, xr, m, or);
        let ln_s = (simd::sum(isa, or) as f64).ln() as f32;
        for (o, &v) in or.iter_mut().zip(xr) {
            *o = (v - m) - ln_s;
        }
    }
    Ok(())
}

/// `ln(sum_i exp(x_i))` of one row, computed as `m + ln(s)` with the softmax steps above.
pub fn log_sum_exp(x: &[f32], scratch: &mut Vec<f32>) -> f32 {
    let isa = Isa::active();
    scratch.resize(x.len(), 0.0);
    let m = simd::max(isa, x);
    simd::exp_shifted(isa, x, m, scratch);
    m + (simd::sum(isa, scratch) as f64).ln() as f32
}
