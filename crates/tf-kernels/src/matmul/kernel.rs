//! Dense f32 micro-kernels over a decoded weight tile: `R` activation rows × `C` weight rows.
//!
//! The canonical arithmetic (identical at every level, so results are bit-identical across
//! levels): each output `(i, j)` owns 16 f32 lanes; for every 16-wide chunk `c` of the input
//! dimension, in order, lane `l` does `acc[l] = fma(x[16c + l], w[16c + l], acc[l])` (a
//! partial last chunk reads zeros past the end); then `acc` is summed by the fixed tree
//! `l + (l+8)`, `+ (l+4)`, `+ (l+2)`, `+ (l+1)`. `R` and `C` only choose how many of these
//! independent sums run side by side; they never change one sum's arithmetic.

// Register arrays read clearest indexed by (r, c).
#![allow(clippy::needless_range_loop)]

use super::level::SimdLevel;

/// Largest `R` (activation rows per micro-kernel call) at any level.
pub(crate) const MAX_R: usize = 6;
/// Largest `C` (weight rows per micro-kernel call) at any level.
pub(crate) const MAX_C: usize = 4;

/// The (R, C) blocking a level uses.
pub(crate) fn blocking(level: SimdLevel) -> (usize, usize) {
    match level {
        SimdLevel::Scalar => (1, 1),
        SimdLevel::Avx2 => (2, 2),
        SimdLevel::Avx512 => (MAX_R, MAX_C),
    }
}

/// Computes `out[r * c + cc] = Σ_k x[r * k + k'] * tile[cc * kp + k']` for `r` rows and `c`
/// weight rows with the canonical arithmetic. `tile` rows are `kp` long (`kp` a multiple of
/// 16, `kp >= k`) and zero past `k`. `r`, `c` must be within the level's blocking.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tile_dot(
    level: SimdLevel,
    x: &[f32],
    k: usize,
    r: usize,
    tile: &[f32],
    kp: usize,
    c: usize,
    out: &mut [f32],
) {
    let (rmax, cmax) = blocking(level);
    assert!(
        r >= 1 && r <= rmax && c >= 1 && c <= cmax,
        "tile_dot blocking {r}x{c}"
    );
    assert!(
        kp.is_multiple_of(16)
            && kp >= k
            && x.len() >= r * k
            && tile.len() >= c * kp
            && out.len() >= r * c
    );
    match level {
        SimdLevel::Scalar => tile_scalar(x, k, tile, out),
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => {
            assert!(level.is_supported());
            // SAFETY: the CPU supports AVX2/FMA (checked above); the bounds were asserted.
            unsafe { x86::avx2_dispatch(r, c, x.as_ptr(), k, tile.as_ptr(), kp, out.as_mut_ptr()) }
        }
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512 => {
            assert!(level.is_supported());
            // SAFETY: the CPU supports AVX-512 (checked above); the bounds were asserted.
            unsafe {
                x86::avx512_dispatch(r, c, x.as_ptr(), k, tile.as_ptr(), kp, out.as_mut_ptr())
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        _ => unreachable!("non-x86 levels are never supported"),
    }
}

/// The fixed 16-lane reduction tree.
#[inline(always)]
pub(crate) fn hsum16(a: &[f32; 16]) -> f32 {
    let mut s8 = [0f32; 8];
    for l in 0..8 {
        s8[l] = a[l] + a[l + 8];
    }
    let s4 = [s8[0] + s8[4], s8[1] + s8[5], s8[2] + s8[6], s8[3] + s8[7]];
    let s2 = [s4[0] + s4[2], s4[1] + s4[3]];
    s2[0] + s2[1]
}

/// Portable path: one row by one weight row.
fn tile_scalar(x: &[f32], k: usize, tile: &[f32], out: &mut [f32]) {
    let mut acc = [0f32; 16];
    let kp = k.div_ceil(16) * 16;
    for ch in (0..kp).step_by(16) {
        for l in 0..16 {
            let xv = x.get(ch + l).copied().filter(|_| ch + l < k).unwrap_or(0.0);
            acc[l] = xv.mul_add(tile[ch + l], acc[l]);
        }
    }
    out[0] = hsum16(&acc);
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::hsum512;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Canonical tree over a zmm (lanes l+8, then l+4, l+2, l+1).
    #[inline(always)]
    pub(crate) unsafe fn hsum512(a: __m512) -> f32 {
        let lo = _mm512_castps512_ps256(a);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
        hsum256_pair(lo, hi)
    }

    /// Canonical tree over 16 lanes held as two ymm (lanes 0..8 and 8..16).
    #[inline(always)]
    unsafe fn hsum256_pair(lo: __m256, hi: __m256) -> f32 {
        let s8 = _mm256_add_ps(lo, hi);
        let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
        _mm_cvtss_f32(s1)
    }

    /// AVX-512 micro-kernel. SAFETY: caller guarantees AVX-512F and that `x` has `R` rows
    /// of `k`, `t` has `C` rows of `kp` (zero-padded past `k`), `out` has `R * C` slots.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
    unsafe fn k512<const R: usize, const C: usize>(
        x: *const f32,
        k: usize,
        t: *const f32,
        kp: usize,
        out: *mut f32,
    ) {
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        let full = k / 16;
        for ch in 0..full {
            let mut wv = [_mm512_setzero_ps(); C];
            for (c, w) in wv.iter_mut().enumerate() {
                *w = _mm512_loadu_ps(t.add(c * kp + ch * 16));
            }
            for (r, a) in acc.iter_mut().enumerate() {
                let xv = _mm512_loadu_ps(x.add(r * k + ch * 16));
                for c in 0..C {
                    a[c] = _mm512_fmadd_ps(xv, wv[c], a[c]);
                }
            }
        }
        let rem = k % 16;
        if rem != 0 {
            let m: __mmask16 = (1u16 << rem) - 1;
            for (r, a) in acc.iter_mut().enumerate() {
                let xv = _mm512_maskz_loadu_ps(m, x.add(r * k + full * 16));
                for c in 0..C {
                    a[c] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(t.add(c * kp + full * 16)), a[c]);
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            for c in 0..C {
                *out.add(r * C + c) = hsum512(a[c]);
            }
        }
    }

    /// AVX2 micro-kernel: 16 lanes as two ymm per output. SAFETY: as [`k512`], with AVX2+FMA.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn k256<const R: usize, const C: usize>(
        x: *const f32,
        k: usize,
        t: *const f32,
        kp: usize,
        out: *mut f32,
    ) {
        let z = _mm256_setzero_ps();
        let mut acc = [[(z, z); C]; R];
        let full = k / 16;
        let rem = k % 16;
        let chunks = full + usize::from(rem != 0);
        let mut tail: [f32; 16];
        for ch in 0..chunks {
            for (r, a) in acc.iter_mut().enumerate() {
                let xp = if ch < full {
                    x.add(r * k + ch * 16)
                } else {
                    tail = [0f32; 16];
                    std::ptr::copy_nonoverlapping(x.add(r * k + full * 16), tail.as_mut_ptr(), rem);
                    tail.as_ptr()
                };
                let (x0, x1) = (_mm256_loadu_ps(xp), _mm256_loadu_ps(xp.add(8)));
                for c in 0..C {
                    let wp = t.add(c * kp + ch * 16);
                    a[c].0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(wp), a[c].0);
                    a[c].1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(wp.add(8)), a[c].1);
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            for c in 0..C {
                *out.add(r * C + c) = hsum256_pair(a[c].0, a[c].1);
            }
        }
    }

    macro_rules! dispatch {
        ($f:ident, $r:expr, $c:expr, $args:tt; $(($rr:literal, $cc:literal)),*) => {
            match ($r, $c) {
                $( ($rr, $cc) => dispatch!(@call $f, $rr, $cc, $args), )*
                _ => unreachable!(),
            }
        };
        (@call $f:ident, $rr:literal, $cc:literal, ($($a:expr),*)) => {
            $f::<$rr, $cc>($($a),*)
        };
    }

    /// SAFETY: as [`k512`]; `r <= 6`, `c <= 4`.
    pub(super) unsafe fn avx512_dispatch(
        r: usize,
        c: usize,
        x: *const f32,
        k: usize,
        t: *const f32,
        kp: usize,
        out: *mut f32,
    ) {
        dispatch!(k512, r, c, (x, k, t, kp, out);
            (1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (2, 2), (2, 3), (2, 4),
            (3, 1), (3, 2), (3, 3), (3, 4), (4, 1), (4, 2), (4, 3), (4, 4),
            (5, 1), (5, 2), (5, 3), (5, 4), (6, 1), (6, 2), (6, 3), (6, 4))
    }

    /// SAFETY: as [`k256`]; `r <= 2`, `c <= 2`.
    pub(super) unsafe fn avx2_dispatch(
        r: usize,
        c: usize,
        x: *const f32,
        k: usize,
        t: *const f32,
        kp: usize,
        out: *mut f32,
    ) {
        dispatch!(k256, r, c, (x, k, t, kp, out); (1, 1), (1, 2), (2, 1), (2, 2))
    }
}
