//! AVX2 + FMA versions of the primitives; each equals its `portable` twin bit for bit.
//!
//! A 16-lane accumulator is two 8-lane registers (`lo` = lanes 0..8, `hi` = lanes 8..16).
//! Safety for every function here: the caller must have checked AVX2 and FMA support (the `Isa`
//! type guarantees it).

use super::portable::{self, EXP_HI, EXP_LO, EXP_POLY, LANES};
use std::arch::x86_64::*;

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
const ROUND_MAGIC: f32 = 12_582_912.0;
const W: usize = 8;

/// Copies the `< 16` trailing elements into a 16-element block padded with `pad`.
#[inline]
fn padded_tail(x: &[f32], pad: f32) -> [f32; LANES] {
    let mut buf = [pad; LANES];
    buf[..x.len()].copy_from_slice(x);
    buf
}

/// Folds (lo, hi) by the fixed tree (l, l+8), (l, l+4), (l, l+2), (0, 1) with addition.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn fold_add(lo: __m256, hi: __m256) -> f32 {
    let s8 = _mm256_add_ps(lo, hi);
    let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2));
    _mm_cvtss_f32(s1)
}

/// Folds (lo, hi) by the same tree with `max_ps(hi, lo)` (= `portable::max_op(lo, hi)`).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn fold_max(lo: __m256, hi: __m256) -> f32 {
    let s8 = _mm256_max_ps(hi, lo);
    let s4 = _mm_max_ps(_mm256_extractf128_ps::<1>(s8), _mm256_castps256_ps128(s8));
    let s2 = _mm_max_ps(_mm_movehl_ps(s4, s4), s4);
    let s1 = _mm_max_ss(_mm_shuffle_ps::<1>(s2, s2), s2);
    _mm_cvtss_f32(s1)
}

#[inline]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let full = n / LANES * LANES;
    let mut i = 0;
    while i < full {
        let (pa, pb) = (a.as_ptr().add(i), b.as_ptr().add(i));
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(pa), _mm256_loadu_ps(pb), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(W)), _mm256_loadu_ps(pb.add(W)), hi);
        i += LANES;
    }
    if n > full {
        let ta = padded_tail(&a[full..n], 0.0);
        let tb = padded_tail(&b[full..n], 0.0);
        lo = _mm256_fmadd_ps(
            _mm256_loadu_ps(ta.as_ptr()),
            _mm256_loadu_ps(tb.as_ptr()),
            lo,
        );
        hi = _mm256_fmadd_ps(
            _mm256_loadu_ps(ta.as_ptr().add(W)),
            _mm256_loadu_ps(tb.as_ptr().add(W)),
            hi,
        );
    }
    fold_add(lo, hi)
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn sum(x: &[f32]) -> f32 {
    let n = x.len();
    let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let full = n / LANES * LANES;
    let mut i = 0;
    while i < full {
        let p = x.as_ptr().add(i);
        lo = _mm256_add_ps(lo, _mm256_loadu_ps(p));
        hi = _mm256_add_ps(hi, _mm256_loadu_ps(p.add(W)));
        i += LANES;
    }
    if n > full {
        let t = padded_tail(&x[full..n], 0.0);
        lo = _mm256_add_ps(lo, _mm256_loadu_ps(t.as_ptr()));
        hi = _mm256_add_ps(hi, _mm256_loadu_ps(t.as_ptr().add(W)));
    }
    fold_add(lo, hi)
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn max(x: &[f32]) -> f32 {
    let n = x.len();
    let (mut lo, mut hi) = (
        _mm256_set1_ps(f32::NEG_INFINITY),
        _mm256_set1_ps(f32::NEG_INFINITY),
    );
    let full = n / LANES * LANES;
    let mut i = 0;
    while i < full {
        let p = x.as_ptr().add(i);
        lo = _mm256_max_ps(_mm256_loadu_ps(p), lo);
        hi = _mm256_max_ps(_mm256_loadu_ps(p.add(W)), hi);
        i += LANES;
    }
    if n > full {
        let t = padded_tail(&x[full..n], f32::NEG_INFINITY);
        lo = _mm256_max_ps(_mm256_loadu_ps(t.as_ptr()), lo);
        hi = _mm256_max_ps(_mm256_loadu_ps(t.as_ptr().add(W)), hi);
    }
    fold_max(lo, hi)
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let va = _mm256_set1_ps(a);
    let full = n / W * W;
    let mut i = 0;
    while i < full {
        let py = y.as_mut_ptr().add(i);
        let r = _mm256_fmadd_ps(va, _mm256_loadu_ps(x.as_ptr().add(i)), _mm256_loadu_ps(py));
        _mm256_storeu_ps(py, r);
        i += W;
    }
    portable::axpy(a, &x[full..n], &mut y[full..n]);
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn scale_mul(x: &[f32], r: f32, w: &[f32], out: &mut [f32]) {
    let n = x.len().min(w.len()).min(out.len());
    let vr = _mm256_set1_ps(r);
    let full = n / W * W;
    let mut i = 0;
    while i < full {
        let v = _mm256_mul_ps(
            _mm256_loadu_ps(w.as_ptr().add(i)),
            _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(i)), vr),
        );
        _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
        i += W;
    }
    portable::scale_mul(&x[full..n], r, &w[full..n], &mut out[full..n]);
}

/// The contract `exp` on 8 lanes (see `portable::exp`).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp8(x: __m256) -> __m256 {
    let n = _mm256_sub_ps(
        _mm256_add_ps(
            _mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
            _mm256_set1_ps(ROUND_MAGIC),
        ),
        _mm256_set1_ps(ROUND_MAGIC),
    );
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let one = _mm256_set1_ps(1.0);
    p = _mm256_fmadd_ps(p, r, one);
    p = _mm256_fmadd_ps(p, r, one);
    let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    let mut res = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
    let hi = _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(EXP_HI));
    let lo = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXP_LO));
    res = _mm256_blendv_ps(res, _mm256_set1_ps(f32::INFINITY), hi);
    _mm256_blendv_ps(res, _mm256_setzero_ps(), lo)
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn exp_shifted(x: &[f32], shift: f32, out: &mut [f32]) {
    let n = x.len().min(out.len());
    let vs = _mm256_set1_ps(shift);
    let full = n / W * W;
    let mut i = 0;
    while i < full {
        let v = exp8(_mm256_sub_ps(_mm256_loadu_ps(x.as_ptr().add(i)), vs));
        _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
        i += W;
    }
    portable::exp_shifted(&x[full..n], shift, &mut out[full..n]);
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    let n = gate.len().min(up.len()).min(out.len());
    let sign = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN));
    let one = _mm256_set1_ps(1.0);
    let full = n / W * W;
    let mut i = 0;
    while i < full {
        let g = _mm256_loadu_ps(gate.as_ptr().add(i));
        let e = exp8(_mm256_xor_ps(g, sign));
        let s = _mm256_div_ps(g, _mm256_add_ps(one, e));
        let v = _mm256_mul_ps(s, _mm256_loadu_ps(up.as_ptr().add(i)));
        _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
        i += W;
    }
    portable::silu_mul(&gate[full..n], &up[full..n], &mut out[full..n]);
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_rows(q: &[f32], base: &[f32], stride: usize, scale: f32, out: &mut [f32]) {
    let n = q.len();
    for (j, o) in out.iter_mut().enumerate() {
        *o = dot(q, &base[j * stride..][..n]) * scale;
    }
}

/// Keeps up to eight 8-lane accumulators in registers across all rows (full 8-lane chunks only;
/// the remainder goes through `portable::axpy_rows`); equals `portable::axpy_rows` bit for bit.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn axpy_rows(p: &[f32], base: &[f32], stride: usize, acc: &mut [f32]) {
    let n = acc.len();
    let rows = p.len();
    if rows > 0 {
        assert!(base.len() >= (rows - 1) * stride + n);
    }
    const BLOCK: usize = 8 * W;
    let full = n / W * W;
    let mut start = 0;
    while start < full {
        let chunks = ((full - start) / W).min(BLOCK / W);
        let pa = acc.as_mut_ptr().add(start);
        let mut a: [__m256; 8] = [_mm256_setzero_ps(); 8];
        for (c, r) in a.iter_mut().enumerate().take(chunks) {
            *r = _mm256_loadu_ps(pa.add(c * W));
        }
        for (j, &pj) in p.iter().enumerate() {
            let vp = _mm256_set1_ps(pj);
            let pv = base.as_ptr().add(j * stride + start);
            for (c, r) in a.iter_mut().enumerate().take(chunks) {
                *r = _mm256_fmadd_ps(vp, _mm256_loadu_ps(pv.add(c * W)), *r);
            }
        }
        for (c, r) in a.iter().enumerate().take(chunks) {
            _mm256_storeu_ps(pa.add(c * W), *r);
        }
        start += chunks * W;
    }
    if full < n {
        portable::axpy_rows(p, &base[full.min(base.len())..], stride, &mut acc[full..]);
    }
}
