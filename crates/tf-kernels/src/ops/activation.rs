//! Activations: SwiGLU (`silu(gate) * up`), squared ReLU, and the contract's scalar `silu`.
//!
//! `silu(x) = x / (1 + exp(-x))` with the contract `exp` of [`simd::portable::exp`] (a fixed
//! polynomial, within 2 ulp of the true value, identical on every ISA path), one division.

use super::error::check_len;
use super::error::OpError;
use super::simd::{self, Isa};

pub use super::simd::portable::{exp, silu};

/// SwiGLU over whole buffers: `out[i] = silu(gate[i]) * up[i]` (element-wise, so any row split
/// gives the same bits).
pub fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) -> Result<(), OpError> {
    check_len("silu_mul", "up", gate.len(), up.len())?;
    check_len("silu_mul", "out", gate.len(), out.len())?;
    simd::silu_mul(Isa::active(), gate, up, out);
    Ok(())
}

/// SwiGLU on a fused `[gate | up]` layout: each of `n_rows` input rows holds `2 * width` values
/// (gate first); `out` gets `n_rows * width`.
pub fn silu_mul_fused(
    gate_up: &[f32],
    width: usize,
    n_rows: usize,
    out: &mut [f32],
) -> Result<(), OpError> {
    check_len(
        "silu_mul_fused",
        "gate_up",
        n_rows * 2 * width,
        gate_up.len(),
    )?;
    check_len("silu_mul_fused", "out", n_rows * width, out.len())?;
    if width == 0 {
        return Ok(());
    }
    let isa = Isa::active();
    for (gu, o) in gate_up
        .chunks_exact(2 * width)
        .zip(out.chunks_exact_mut(width))
    {
        let (g, u) = gu.split_at(width);
        simd::silu_mul(isa, g, u, o);
    }
    Ok(())
}

/// Squared ReLU: `out[i] = max(x[i], 0)^2` (one multiply).
pub fn relu2(x: &[f32], out: &mut [f32]) -> Result<(), OpError> {
    check_len("relu2", "out", x.len(), out.len())?;
    for (o, &v) in out.iter_mut().zip(x) {
        let r = if v > 0.0 { v } else { 0.0 };
        *o = r * r;
    }
    Ok(())
}

/// SiLU in place: `x[i] = silu(x[i])`.
pub fn silu_inplace(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = silu(*v);
    }
}
