//! Vector primitives with runtime ISA dispatch; every path equals [`portable`] bit for bit.
//!
//! The operators call these through [`Isa::active`]. Because the SIMD paths reproduce the portable
//! arithmetic exactly (same 16-lane reduction order, same fused multiply-adds, same `exp`), results
//! do not depend on which CPU features are present.

pub mod portable;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

use std::sync::OnceLock;

/// An instruction-set path; only constructible when the CPU supports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Isa(IsaKind);

/// The instruction-set paths this crate implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IsaKind {
    /// Plain Rust; the definition of every primitive.
    Portable,
    /// x86-64 AVX2 + FMA (8 lanes, two registers per 16-lane accumulator).
    Avx2,
    /// x86-64 AVX-512F (16 lanes).
    Avx512,
}

impl Isa {
    /// The portable path, always available.
    pub const PORTABLE: Isa = Isa(IsaKind::Portable);

    /// This path if the running CPU supports it.
    pub fn new(kind: IsaKind) -> Option<Isa> {
        let ok = match kind {
            IsaKind::Portable => true,
            #[cfg(target_arch = "x86_64")]
            IsaKind::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            IsaKind::Avx512 => is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        };
        ok.then_some(Isa(kind))
    }

    /// Which path this is.
    pub fn kind(self) -> IsaKind {
        self.0
    }

    /// Every path the running CPU supports, portable first.
    pub fn available() -> Vec<Isa> {
        [IsaKind::Portable, IsaKind::Avx2, IsaKind::Avx512]
            .into_iter()
            .filter_map(Isa::new)
            .collect()
    }

    /// The path operators use: the widest available, or the one named by `TF_KERNELS_ISA`
    /// (`portable`, `avx2`, `avx512`) when that is available. Chosen once per process.
    pub fn active() -> Isa {
        static ACTIVE: OnceLock<Isa> = OnceLock::new();
        *ACTIVE.get_or_init(|| {
            let wanted = std::env::var("TF_KERNELS_ISA").ok();
            let named = match wanted.as_deref() {
                Some("portable") => Some(IsaKind::Portable),
                Some("avx2") => Some(IsaKind::Avx2),
                Some("avx512") => Some(IsaKind::Avx512),
                _ => None,
            };
            named
                .and_then(Isa::new)
                .or_else(|| Isa::available().last().copied())
                .unwrap_or(Isa::PORTABLE)
        })
    }
}

macro_rules! dispatch {
    ($isa:expr, $name:ident ( $($arg:expr),* )) => {
        match $isa.0 {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: an `Isa` of this kind exists only when the CPU supports it.
            IsaKind::Avx512 => unsafe { avx512::$name($($arg),*) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            IsaKind::Avx2 => unsafe { avx2::$name($($arg),*) },
            _ => portable::$name($($arg),*),
        }
    };
}

/// Dot product over `min(a.len(), b.len())` elements in the 16-lane order.
pub fn dot(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    dispatch!(isa, dot(&a[..n], &b[..n]))
}

/// Sum in the 16-lane order.
pub fn sum(isa: Isa, x: &[f32]) -> f32 {
    dispatch!(isa, sum(x))
}

/// Maximum in the 16-lane order (`-inf` when empty; NaN elements skipped).
pub fn max(isa: Isa, x: &[f32]) -> f32 {
    dispatch!(isa, max(x))
}

/// `y[i] = fma(a, x[i], y[i])` over `min(x.len(), y.len())` elements.
pub fn axpy(isa: Isa, a: f32, x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    dispatch!(isa, axpy(a, &x[..n], &mut y[..n]))
}

/// `out[i] = w[i] * (x[i] * r)` over the common length.
pub fn scale_mul(isa: Isa, x: &[f32], r: f32, w: &[f32], out: &mut [f32]) {
    let n = x.len().min(w.len()).min(out.len());
    dispatch!(isa, scale_mul(&x[..n], r, &w[..n], &mut out[..n]))
}

/// `out[i] = exp(x[i] - shift)` over the common length.
pub fn exp_shifted(isa: Isa, x: &[f32], shift: f32, out: &mut [f32]) {
    let n = x.len().min(out.len());
    dispatch!(isa, exp_shifted(&x[..n], shift, &mut out[..n]))
}

/// `out[i] = silu(gate[i]) * up[i]` over the common length.
pub fn silu_mul(isa: Isa, gate: &[f32], up: &[f32], out: &mut [f32]) {
    let n = gate.len().min(up.len()).min(out.len());
    dispatch!(isa, silu_mul(&gate[..n], &up[..n], &mut out[..n]))
}

/// Checks that `rows` rows of `width` elements at `stride` fit in `base_len` elements.
fn rows_fit(rows: usize, width: usize, stride: usize, base_len: usize) -> bool {
    rows == 0 || (rows - 1) * stride + width <= base_len
}

/// `out[j] = dot(q, base[j*stride ..][..q.len()]) * scale` for `j < out.len()` (attention scores).
/// Panics if the rows do not fit in `base` (callers pass cache slices they sized).
pub fn dot_rows(isa: Isa, q: &[f32], base: &[f32], stride: usize, scale: f32, out: &mut [f32]) {
    assert!(
        rows_fit(out.len(), q.len(), stride, base.len()),
        "dot_rows: rows exceed base"
    );
    dispatch!(isa, dot_rows(q, base, stride, scale, out))
}

/// `acc[d] = fma(p[j], base[j*stride + d], acc[d])` for `j` ascending (attention's weighted sum).
/// Panics if the rows do not fit in `base`.
pub fn axpy_rows(isa: Isa, p: &[f32], base: &[f32], stride: usize, acc: &mut [f32]) {
    assert!(
        rows_fit(p.len(), acc.len(), stride, base.len()),
        "axpy_rows: rows exceed base"
    );
    dispatch!(isa, axpy_rows(p, base, stride, acc))
}
