//! Opt-in bf16-activation matmul (AVX512_BF16 `vdpbf16ps`), meant for prefill. It is a
//! separate, named variant: it rounds the activations **and** the dequantized weights to bf16
//! (round to nearest even), so its results differ from [`super::matmul`]'s and it is never
//! chosen silently. Its own arithmetic is fixed: per 32-wide chunk `c` of `k` (zero-padded),
//! lane `l` accumulates the pair `(32c + 2l, 32c + 2l + 1)` with one `vdpbf16ps`, in chunk
//! order; then the canonical 16-lane tree. Row-invariant like the f32 path: threads split
//! output columns, the R×C blocking never changes a sum.

use super::weights::{MatmulError, PackedMatrix};
use super::{avx512, decode, kernel, Out, SimdLevel};
use crate::pool::Pool;
use std::arch::x86_64::*;

/// Whether this CPU can run [`matmul_bf16_activations`] (AVX-512 F/BW/VL and AVX512_BF16).
pub fn bf16_activations_supported() -> bool {
    SimdLevel::Avx512.is_supported() && std::arch::is_x86_feature_detected!("avx512bf16")
}

/// Weight-tile budget per task (bf16 elements, 2 bytes each).
const TILE_BYTES: usize = 24 * 1024;
const R: usize = 6;
const C: usize = 4;

/// `y = x · Wᵀ` like [`super::matmul`], but with `x` and the dequantized weights rounded to
/// bf16 and multiplied by `vdpbf16ps` (f32 accumulation). Errors with
/// `MatmulError::Bf16Unsupported` on CPUs without AVX512_BF16.
pub fn matmul_bf16_activations(
    w: &PackedMatrix,
    x: &[f32],
    n: usize,
    y: &mut [f32],
    pool: &Pool,
) -> Result<(), MatmulError> {
    if !bf16_activations_supported() {
        return Err(MatmulError::Bf16Unsupported);
    }
    let (rows, k) = (w.rows(), w.cols());
    if x.len() != n * k {
        return Err(MatmulError::BadBuffer {
            what: "activations x",
            want: n * k,
            got: x.len(),
        });
    }
    if y.len() != n * rows {
        return Err(MatmulError::BadBuffer {
            what: "output y",
            want: n * rows,
            got: y.len(),
        });
    }
    if n == 0 || rows == 0 {
        return Ok(());
    }
    let kp = k.div_ceil(32) * 32;
    let mut xb = vec![0u16; n * kp];
    for i in 0..n {
        // SAFETY: AVX512_BF16 checked above; slices sized by construction.
        unsafe { to_bf16(&x[i * k..(i + 1) * k], &mut xb[i * kp..(i + 1) * kp]) };
    }
    let mut panel = (TILE_BYTES / (kp * 2)).clamp(1, 16);
    if panel >= C {
        panel -= panel % C;
    }
    let n_panels = rows.div_ceil(panel);
    let n_tasks = n_panels.min(pool.threads() * 4);
    let out = Out {
        ptr: y.as_mut_ptr(),
        stride: rows,
    };
    let (out, xb) = (&out, &xb[..]);
    pool.run(n_tasks, |t| {
        let (p0, p1) = (t * n_panels / n_tasks, (t + 1) * n_panels / n_tasks);
        let (j0, j1) = (p0 * panel, (p1 * panel).min(rows));
        let mut wf = vec![0f32; panel * kp];
        let mut wb = vec![0u16; panel * kp];
        let mut sums = [0f32; R * C];
        let mut jp = j0;
        while jp < j1 {
            let pc = panel.min(j1 - jp);
            if !avx512::decode_rows(w, jp, pc, &mut wf, kp) {
                for c in 0..pc {
                    let row = &mut wf[c * kp..(c + 1) * kp];
                    decode::decode_row_scalar(w, jp + c, row);
                    row[k..].fill(0.0);
                }
            }
            // SAFETY: AVX512_BF16 checked above; slices sized by construction.
            unsafe { to_bf16(&wf[..pc * kp], &mut wb[..pc * kp]) };
            let mut i0 = 0;
            while i0 < n {
                let r = R.min(n - i0);
                let mut c0 = 0;
                while c0 < pc {
                    let c = C.min(pc - c0);
                    let xr = &xb[i0 * kp..(i0 + r) * kp];
                    let wr = &wb[c0 * kp..(c0 + c) * kp];
                    // SAFETY: support checked; `xr` holds r rows and `wr` c rows of kp.
                    unsafe { dispatch(r, c, xr.as_ptr(), wr.as_ptr(), kp, sums.as_mut_ptr()) };
                    for rr in 0..r {
                        for cc in 0..c {
                            out.put(i0 + rr, jp + c0 + cc, sums[rr * c + cc]);
                        }
                    }
                    c0 += c;
                }
                i0 += r;
            }
            jp += pc;
        }
    });
    Ok(())
}

/// Rounds `src` to bf16 (nearest even) into `dst`, zero-filling `dst` past `src.len()`.
/// SAFETY: AVX512_BF16 and AVX-512F available; `dst.len()` a multiple of 32, `>= src.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn to_bf16(src: &[f32], dst: &mut [u16]) {
    assert!(dst.len().is_multiple_of(32) && dst.len() >= src.len());
    let mut buf = [0f32; 32];
    for (ch, d) in dst.chunks_exact_mut(32).enumerate() {
        let s = &src[(32 * ch).min(src.len())..(32 * ch + 32).min(src.len())];
        let p = if s.len() == 32 {
            s.as_ptr()
        } else {
            buf.fill(0.0);
            buf[..s.len()].copy_from_slice(s);
            buf.as_ptr()
        };
        let v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(p.add(16)), _mm512_loadu_ps(p));
        _mm512_storeu_si512(
            d.as_mut_ptr() as *mut _,
            std::mem::transmute::<__m512bh, __m512i>(v),
        );
    }
}

/// SAFETY: AVX512_BF16 available; `x` has `R` rows and `t` `C` rows of `kp` bf16 (a multiple
/// of 32); `out` has `R * C` slots.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn kbf<const RR: usize, const CC: usize>(
    x: *const u16,
    t: *const u16,
    kp: usize,
    out: *mut f32,
) {
    let mut acc = [[_mm512_setzero_ps(); CC]; RR];
    for ch in 0..kp / 32 {
        let mut wv = [std::mem::transmute::<__m512i, __m512bh>(_mm512_setzero_si512()); CC];
        for (c, v) in wv.iter_mut().enumerate() {
            *v = std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                t.add(c * kp + 32 * ch) as *const _,
            ));
        }
        for (r, a) in acc.iter_mut().enumerate() {
            let xv = std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                x.add(r * kp + 32 * ch) as *const _,
            ));
            for (ac, wc) in a.iter_mut().zip(&wv) {
                *ac = _mm512_dpbf16_ps(*ac, xv, *wc);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        for (c, ac) in a.iter().enumerate() {
            *out.add(r * CC + c) = kernel::hsum512(*ac);
        }
    }
}

macro_rules! dispatch_rc {
    ($r:expr, $c:expr, $args:tt; $(($rr:literal, $cc:literal)),*) => {
        match ($r, $c) {
            $( ($rr, $cc) => dispatch_rc!(@call $rr, $cc, $args), )*
            _ => unreachable!("bf16 blocking"),
        }
    };
    (@call $rr:literal, $cc:literal, ($($a:expr),*)) => { kbf::<$rr, $cc>($($a),*) };
}

/// SAFETY: as [`kbf`]; `1 <= r <= 6`, `1 <= c <= 4`.
unsafe fn dispatch(r: usize, c: usize, x: *const u16, t: *const u16, kp: usize, out: *mut f32) {
    dispatch_rc!(r, c, (x, t, kp, out);
        (1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (2, 2), (2, 3), (2, 4),
        (3, 1), (3, 2), (3, 3), (3, 4), (4, 1), (4, 2), (4, 3), (4, 4),
        (5, 1), (5, 2), (5, 3), (5, 4), (6, 1), (6, 2), (6, 3), (6, 4))
}
