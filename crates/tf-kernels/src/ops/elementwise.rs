//! Element-wise operators: residual add, multiply, scale, logit softcap.
//!
//! All are one f32 operation per element (no fma), so any split into rows gives the same bits.

use super::error::{check_len, OpError};

pub use super::attention::softcap;

/// Residual add in place: `acc[i] += x[i]`.
pub fn add_inplace(acc: &mut [f32], x: &[f32]) -> Result<(), OpError> {
    check_len("add_inplace", "x", acc.len(), x.len())?;
    for (a, &v) in acc.iter_mut().zip(x) {
        *a += v;
    }
    Ok(())
}

/// `out[i] = a[i] + b[i]`.
pub fn add(a: &[f32], b: &[f32], out: &mut [f32]) -> Result<(), OpError> {
    check_len("add", "b", a.len(), b.len())?;
    check_len("add", "out", a.len(), out.len())?;
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = x + y;
    }
    Ok(())
}

/// `acc[i] *= x[i]`.
pub fn mul_inplace(acc: &mut [f32], x: &[f32]) -> Result<(), OpError> {
    check_len("mul_inplace", "x", acc.len(), x.len())?;
    for (a, &v) in acc.iter_mut().zip(x) {
        *a *= v;
    }
    Ok(())
}

/// `x[i] *= s`.
pub fn scale_inplace(x: &mut [f32], s: f32) {
    for v in x.iter_mut() {
        *v *= s;
    }
}

/// Logit softcap in place: `x[i] = cap * tanh(x[i] / cap)` (see [`softcap`]).
pub fn softcap_inplace(x: &mut [f32], cap: f32) -> Result<(), OpError> {
    if !(cap.is_finite() && cap > 0.0) {
        return Err(OpError::Param {
            op: "softcap",
            param: "cap",
            value: cap as f64,
            why: "must be finite and > 0",
        });
    }
    for v in x.iter_mut() {
        *v = softcap(*v, cap);
    }
    Ok(())
}
