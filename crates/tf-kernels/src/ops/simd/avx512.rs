//! AVX-512F versions of the primitives; each equals its `portable` twin bit for bit.
//!
//! Safety for every function here: the caller must have checked that the CPU supports AVX-512F
//! (the `Isa` type guarantees it).

use super::portable::{self, EXP_HI, EXP_LO, EXP_POLY, LANES};
use std::arch::x86_64::*;

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
const ROUND_MAGIC: f32 = 12_582_912.0;

#[inline]
fn tail_mask(rem: usize) -> __mmask16 {
    ((1u32 << rem) - 1) as __mmask16
}

/// Folds 16 lanes by the fixed tree (l, l+8), (l, l+4), (l, l+2), (0, 1) with addition.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn fold_add(acc: __m512) -> f32 {
    let lo = _mm512_castps512_ps256(acc);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc)));
    let s8 = _mm256_add_ps(lo, hi);
    let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2));
    _mm_cvtss_f32(s1)
}

/// Folds 16 lanes by the same tree with `max_ps(hi, lo)` (= `portable::max_op(lo, hi)`).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn fold_max(acc: __m512) -> f32 {
    let lo = _mm512_castps512_ps256(acc);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc)));
    let s8 = _mm256_max_ps(hi, lo);
    let s4 = _mm_max_ps(_mm256_extractf128_ps::<1>(s8), _mm256_castps256_ps128(s8));
    let s2 = _mm_max_ps(_mm_movehl_ps(s4, s4), s4);
    let s1 = _mm_max_ss(_mm_shuffle_ps::<1>(s2, s2), s2);
    _mm_cvtss_f32(s1)
}

#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = _mm512_setzero_ps();
    let full = n / LANES * LANES;
    let mut i = 0;
    while i < full {
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), acc);
        i += LANES;
    }
    if n > full {
        let m = tail_mask(n - full);
        let va = _mm512_maskz_loadu_ps(m, pa.add(full));
        let vb = _mm512_maskz_loadu_ps(m, pb.add(full));
        acc = _mm512_mask3_fmadd_ps(va, vb, acc, m);
    }
    fold_add(acc)
}

#[target_feature(enable = "avx512f")]
pub unsafe fn sum(x: &[f32]) -> f32 {
    let n = x.len();
    let p = x.as_ptr();
    let mut acc = _mm512_setzero_ps();
    let full = n / LANES * LANES;
    let mut i = 0;
    while i < full {
        acc = _mm512_add_ps(acc, _mm512_loadu_ps(p.add(i)));
        i += LANES;
    }
    if n > full {
        let m = tail_mask(n - full);
        acc = _mm512_mask_add_ps(acc, m, acc, _mm512_maskz_loadu_ps(m, p.add(full)));
    }
    fold_add(acc)
}

#[target_feature(enable = "avx512f")]
pub unsafe fn max(x: &[f32]) -> f32 {
    let n = x.len();
    let p = x.as_ptr();
    let neg_inf = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut acc = neg_inf;
    let full = n / LANES * LANES;
    let mut i = 0;
    while i < full {
        acc = _mm512_max_ps(_mm512_loadu_ps(p.add(i)), acc);
        i += LANES;
    }
    if n > full {
        let m = tail_mask(n - full);
        acc = _mm512_max_ps(_mm512_mask_loadu_ps(neg_inf, m, p.add(full)), acc);
    }
    fold_max(acc)
}

#[target_feature(enable = "avx512f")]
pub unsafe fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let va = _mm512_set1_ps(a);
    let (px, py) = (x.as_ptr(), y.as_mut_ptr());
    let full = n / LANES * LANES;
    let mut i = 0;
    while i < full {
        let r = _mm512_fmadd_ps(va, _mm512_loadu_ps(px.add(i)), _mm512_loadu_ps(py.add(i)));
        _mm512_storeu_ps(py.add(i), r);
        i += LANES;
    }
    if n > full {
        let m = tail_mask(n - full);
        let r = _mm512_fmadd_ps(
            va,
            _mm512_maskz_loadu_ps(m, px.add(full)),
            _mm512_maskz_loadu_ps(m, py.add(full)),
        );
        _mm512_mask_storeu_ps(py.add(full), m, r);
    }
}

#[target_feature(enable = "avx512f")]
pub unsafe fn scale_mul(x: &[f32], r: f32, w: &[f32], out: &mut [f32]) {
    let n = x.len().min(w.len()).min(out.len());
    let vr = _mm512_set1_ps(r);
    let full = n / LANES * LANES;
    let mut i = 0;
    while i < full {
        let v = _mm512_mul_ps(
            _mm512_loadu_ps(w.as_ptr().add(i)),
            _mm512_mul_ps(_mm512_loadu_ps(x.as_ptr().add(i)), vr),
        );
        _mm512_storeu_ps(out.as_mut_ptr().add(i), v);
        i += LANES;
    }
    portable::scale_mul(&x[full..n], r, &w[full..n], &mut out[full..n]);
}

/// The contract `exp` on 16 lanes (see `portable::exp`).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn exp16(x: __m512) -> __m512 {
    let n = _mm512_sub_ps(
        _mm512_add_ps(
            _mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
            _mm512_set1_ps(ROUND_MAGIC),
        ),
        _mm512_set1_ps(ROUND_MAGIC),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let one = _mm512_set1_ps(1.0);
    p = _mm512_fmadd_ps(p, r, one);
    p = _mm512_fmadd_ps(p, r, one);
    let bits = _mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_cvtps_epi32(n),
        _mm512_set1_epi32(127),
    ));
    let mut res = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
    let hi = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, _mm512_set1_ps(EXP_HI));
    let lo = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(EXP_LO));
    res = _mm512_mask_blend_ps(hi, res, _mm512_set1_ps(f32::INFINITY));
    _mm512_mask_blend_ps(lo, res, _mm512_setzero_ps())
}

#[target_feature(enable = "avx512f")]
pub unsafe fn exp_shifted(x: &[f32], shift: f32, out: &mut [f32]) {
    let n = x.len().min(out.len());
    let vs = _mm512_set1_ps(shift);
    let full = n / LANES * LANES;
    let mut i = 0;
    while i < full {
        let v = exp16(_mm512_sub_ps(_mm512_loadu_ps(x.as_ptr().add(i)), vs));
        _mm512_storeu_ps(out.as_mut_ptr().add(i), v);
        i += LANES;
    }
    if n > full {
        let m = tail_mask(n - full);
        let v = exp16(_mm512_sub_ps(
            _mm512_maskz_loadu_ps(m, x.as_ptr().add(full)),
            vs,
        ));
        _mm512_mask_storeu_ps(out.as_mut_ptr().add(full), m, v);
    }
}

#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn silu_mul16(g: __m512, u: __m512) -> __m512 {
    let neg = _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(g),
        _mm512_set1_epi32(i32::MIN),
    ));
    let e = exp16(neg);
    let s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0), e));
    _mm512_mul_ps(s, u)
}

#[target_feature(enable = "avx512f")]
pub unsafe fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    let n = gate.len().min(up.len()).min(out.len());
    let full = n / LANES * LANES;
    let mut i = 0;
    while i < full {
        let v = silu_mul16(
            _mm512_loadu_ps(gate.as_ptr().add(i)),
            _mm512_loadu_ps(up.as_ptr().add(i)),
        );
        _mm512_storeu_ps(out.as_mut_ptr().add(i), v);
        i += LANES;
    }
    if n > full {
        let m = tail_mask(n - full);
        let v = silu_mul16(
            _mm512_maskz_loadu_ps(m, gate.as_ptr().add(full)),
            _mm512_maskz_loadu_ps(m, up.as_ptr().add(full)),
        );
        _mm512_mask_storeu_ps(out.as_mut_ptr().add(full), m, v);
    }
}

#[target_feature(enable = "avx512f")]
pub unsafe fn dot_rows(q: &[f32], base: &[f32], stride: usize, scale: f32, out: &mut [f32]) {
    let n = q.len();
    for (j, o) in out.iter_mut().enumerate() {
        *o = dot(q, &base[j * stride..][..n]) * scale;
    }
}

/// Keeps up to four 16-lane accumulators in registers across all rows; each lane still sees
/// `fma(p[j], v[j], acc)` for `j` ascending, so the result equals `portable::axpy_rows`.
#[target_feature(enable = "avx512f")]
pub unsafe fn axpy_rows(p: &[f32], base: &[f32], stride: usize, acc: &mut [f32]) {
    let n = acc.len();
    let rows = p.len();
    if rows > 0 {
        assert!(base.len() >= (rows - 1) * stride + n);
    }
    const BLOCK: usize = 4 * LANES;
    let mut start = 0;
    while start < n {
        let width = (n - start).min(BLOCK);
        let masks: [__mmask16; 4] = std::array::from_fn(|c| {
            let lo = c * LANES;
            if width >= lo + LANES {
                0xFFFF
            } else if width > lo {
                tail_mask(width - lo)
            } else {
                0
            }
        });
        let pa = acc.as_mut_ptr().add(start);
        if width == BLOCK {
            // Four full registers: the common head_dim 64 / 128 case, no masks in the loop.
            let (mut a0, mut a1, mut a2, mut a3) = (
                _mm512_loadu_ps(pa),
                _mm512_loadu_ps(pa.add(LANES)),
                _mm512_loadu_ps(pa.add(2 * LANES)),
                _mm512_loadu_ps(pa.add(3 * LANES)),
            );
            for (j, &pj) in p.iter().enumerate() {
                let vp = _mm512_set1_ps(pj);
                let pv = base.as_ptr().add(j * stride + start);
                a0 = _mm512_fmadd_ps(vp, _mm512_loadu_ps(pv), a0);
                a1 = _mm512_fmadd_ps(vp, _mm512_loadu_ps(pv.add(LANES)), a1);
                a2 = _mm512_fmadd_ps(vp, _mm512_loadu_ps(pv.add(2 * LANES)), a2);
                a3 = _mm512_fmadd_ps(vp, _mm512_loadu_ps(pv.add(3 * LANES)), a3);
            }
            _mm512_storeu_ps(pa, a0);
            _mm512_storeu_ps(pa.add(LANES), a1);
            _mm512_storeu_ps(pa.add(2 * LANES), a2);
            _mm512_storeu_ps(pa.add(3 * LANES), a3);
            start += width;
            continue;
        }
        let mut a: [__m512; 4] =
            std::array::from_fn(|c| _mm512_maskz_loadu_ps(masks[c], pa.add(c * LANES)));
        for (j, &pj) in p.iter().enumerate() {
            let vp = _mm512_set1_ps(pj);
            let pv = base.as_ptr().add(j * stride + start);
            for c in 0..4 {
                if masks[c] != 0 {
                    let v = _mm512_maskz_loadu_ps(masks[c], pv.add(c * LANES));
                    a[c] = _mm512_fmadd_ps(vp, v, a[c]);
                }
            }
        }
        for c in 0..4 {
            _mm512_mask_storeu_ps(pa.add(c * LANES), masks[c], a[c]);
        }
        start += width;
    }
}
