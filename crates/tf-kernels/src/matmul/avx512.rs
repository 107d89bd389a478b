//! AVX-512 paths: per-format decoders that dequantize 32 weights into two registers with
//! exactly the scalar decoders' arithmetic, a fused decode-and-multiply kernel for few rows,
//! and row decoding into the L1 tile for many rows. Everything unsafe here is reached only
//! through `columns`, which the dispatcher calls after checking AVX-512 support.

use super::avx512_units::*;
use super::kernel;
use super::weights::{FloatType, PackedMatrix, WeightData};
use super::{Out, SimdLevel};
use std::arch::x86_64::*;
use tf_formats::gguf::GgmlType;

/// Rows at most for which the fused kernel is used (more rows go through the tile); the
/// kernel takes up to `FUSED_R` rows per pass, re-decoding the weights for each pass.
pub(super) const FUSED_MAX_N: usize = 8;
/// Activation rows per fused pass.
const FUSED_R: usize = 4;

/// Work done with a format's decoder (the matmul, or decoding rows for another kernel).
pub(super) trait Job {
    /// SAFETY: AVX-512 (F/BW/VL), FMA and F16C are available.
    unsafe fn go<D: Unit>(self, d: &D);
}

/// Calls `job.go` with the AVX-512 decoder of `w`'s format. Returns false (doing nothing) when
/// the format has no AVX-512 decoder here.
pub(super) fn dispatch<J: Job>(w: &PackedMatrix, job: J) -> bool {
    assert!(SimdLevel::Avx512.is_supported());
    let cols = w.cols();
    if !cols.is_multiple_of(32) {
        return false;
    }
    // SAFETY (all arms): AVX-512 support asserted above; the decoders' buffers were validated
    // against (rows, cols) by `PackedMatrix::new`, and only rows < `rows` are decoded.
    match *w.data() {
        WeightData::Gguf { ty, bytes } => {
            let blocks = Blocks {
                bytes,
                row_bytes: cols / ty.block_size() * ty.type_size(),
                f16: f16_table(),
            };
            match ty {
                GgmlType::Q4_0 => unsafe { job.go(&Q40(blocks)) },
                GgmlType::Q4_1 => unsafe { job.go(&Q41(blocks)) },
                GgmlType::Q8_0 => unsafe { job.go(&Q80(blocks)) },
                GgmlType::Q4K => unsafe { job.go(&Q4K(blocks)) },
                GgmlType::Q6K => unsafe { job.go(&Q6K(blocks)) },
                _ => return false,
            }
        }
        WeightData::MlxAffine {
            bits,
            group_size,
            scale_ty,
            words,
            scales,
            biases,
        } if (bits == 4 || bits == 8) && group_size.is_multiple_of(32) => {
            if bits == 4 {
                unsafe {
                    job.go(&Mlx::<4> {
                        group_size,
                        scale_ty,
                        words,
                        scales,
                        biases,
                        cols,
                        f16: f16_table(),
                    })
                }
            } else {
                unsafe {
                    job.go(&Mlx::<8> {
                        group_size,
                        scale_ty,
                        words,
                        scales,
                        biases,
                        cols,
                        f16: f16_table(),
                    })
                }
            }
        }
        WeightData::Dense { ty, bytes } => match ty {
            FloatType::F32 => unsafe { job.go(&Dense::<0> { bytes, cols }) },
            FloatType::F16 => unsafe { job.go(&Dense::<1> { bytes, cols }) },
            FloatType::BF16 => unsafe { job.go(&Dense::<2> { bytes, cols }) },
        },
        _ => return false,
    }
    true
}

/// Computes output columns `[j0, j1)` for all `n` rows with the AVX-512 decoders. Returns
/// false (doing nothing) when the format has no AVX-512 decoder here.
#[allow(clippy::too_many_arguments)]
pub(super) fn columns(
    w: &PackedMatrix,
    x: &[f32],
    n: usize,
    tile: &mut [f32],
    kp: usize,
    panel: usize,
    j0: usize,
    j1: usize,
    out: &Out,
) -> bool {
    let (rows, cols) = (w.rows(), w.cols());
    assert!(x.len() >= n * cols && j1 <= rows && tile.len() >= panel * kp && kp >= cols);
    dispatch(
        w,
        Args {
            x,
            n,
            k: cols,
            tile,
            kp,
            panel,
            j0,
            j1,
            out,
        },
    )
}

impl Job for Args<'_> {
    unsafe fn go<D: Unit>(self, d: &D) {
        run(d, self)
    }
}

/// Decodes weight rows `[j0, j0 + count)` into `tile` (rows `kp` apart; zeros past `cols`).
/// Returns false (doing nothing) when the format has no AVX-512 decoder here.
pub(super) fn decode_rows(
    w: &PackedMatrix,
    j0: usize,
    count: usize,
    tile: &mut [f32],
    kp: usize,
) -> bool {
    assert!(j0 + count <= w.rows() && kp >= w.cols() && tile.len() >= count * kp);
    dispatch(
        w,
        DecodeRows {
            j0,
            count,
            k: w.cols(),
            tile,
            kp,
        },
    )
}

struct DecodeRows<'a> {
    j0: usize,
    count: usize,
    k: usize,
    tile: &'a mut [f32],
    kp: usize,
}

impl Job for DecodeRows<'_> {
    unsafe fn go<D: Unit>(self, d: &D) {
        decode_into(d, self)
    }
}

/// SAFETY: AVX-512 available; rows in range and `tile` large enough (checked by caller).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
unsafe fn decode_into<D: Unit>(d: &D, a: DecodeRows) {
    for c in 0..a.count {
        let t = a.tile.as_mut_ptr().add(c * a.kp);
        let row = d.row(a.j0 + c);
        for u in 0..a.k / 32 {
            let (w0, w1) = d.unit(row, u);
            _mm512_storeu_ps(t.add(32 * u), w0);
            _mm512_storeu_ps(t.add(32 * u + 16), w1);
        }
        a.tile[c * a.kp + a.k..(c + 1) * a.kp].fill(0.0);
    }
}

struct Args<'a> {
    x: &'a [f32],
    n: usize,
    k: usize,
    tile: &'a mut [f32],
    kp: usize,
    panel: usize,
    j0: usize,
    j1: usize,
    out: &'a Out,
}

/// SAFETY: AVX-512 available; `a` consistent with the decoder's matrix (checked by caller).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
unsafe fn run<D: Unit>(d: &D, a: Args) {
    let Args {
        x,
        n,
        k,
        tile,
        kp,
        panel,
        j0,
        j1,
        out,
    } = a;
    let units = k / 32;
    if n <= FUSED_MAX_N {
        let mut sums = [0f32; 4 * FUSED_R];
        let mut j = j0;
        while j < j1 {
            // Past the range end, repeat the last row (its results are discarded).
            let rows = [
                d.row(j),
                d.row((j + 1).min(j1 - 1)),
                d.row((j + 2).min(j1 - 1)),
                d.row((j + 3).min(j1 - 1)),
            ];
            let mut i0 = 0;
            while i0 < n {
                let r = FUSED_R.min(n - i0);
                let xp = x[i0 * k..].as_ptr();
                match r {
                    1 => fused::<D, 1>(d, rows, xp, k, sums.as_mut_ptr()),
                    2 => fused::<D, 2>(d, rows, xp, k, sums.as_mut_ptr()),
                    3 => fused::<D, 3>(d, rows, xp, k, sums.as_mut_ptr()),
                    _ => fused::<D, 4>(d, rows, xp, k, sums.as_mut_ptr()),
                }
                for i in 0..r {
                    for c in 0..4.min(j1 - j) {
                        out.put(i0 + i, j + c, sums[i * 4 + c]);
                    }
                }
                i0 += r;
            }
            j += 4;
        }
        return;
    }
    let (rmax, cmax) = kernel::blocking(SimdLevel::Avx512);
    // Activation rows per block: keep them and the tile within ~40 KiB of L1 (a loop-order
    // choice from the shape, never from n; it does not change any sum's arithmetic).
    let rmax = ((40 * 1024 - (panel * kp * 4).min(40 * 1024)) / (k * 4)).clamp(2, rmax);
    let mut sums = [0f32; kernel::MAX_R * kernel::MAX_C];
    let mut jp = j0;
    while jp < j1 {
        let pc = panel.min(j1 - jp);
        for c in 0..pc {
            let t = tile.as_mut_ptr().add(c * kp);
            let row = d.row(jp + c);
            for u in 0..units {
                let (w0, w1) = d.unit(row, u);
                _mm512_storeu_ps(t.add(32 * u), w0);
                _mm512_storeu_ps(t.add(32 * u + 16), w1);
            }
            tile[c * kp + k..(c + 1) * kp].fill(0.0);
        }
        let mut i0 = 0;
        while i0 < n {
            let r = rmax.min(n - i0);
            let xr = &x[i0 * k..(i0 + r) * k];
            let mut c0 = 0;
            while c0 < pc {
                let c = cmax.min(pc - c0);
                kernel::tile_dot(
                    SimdLevel::Avx512,
                    xr,
                    k,
                    r,
                    &tile[c0 * kp..(c0 + c) * kp],
                    kp,
                    c,
                    &mut sums,
                );
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
}

/// Fused decode-and-multiply: `R` activation rows by 4 weight rows, canonical arithmetic.
/// SAFETY: AVX-512 available; `x` has `R` rows of `k` (a multiple of 32); rows in range;
/// `out` has `4 * R` slots.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
unsafe fn fused<D: Unit, const R: usize>(
    d: &D,
    rows: [D::Row; 4],
    x: *const f32,
    k: usize,
    out: *mut f32,
) {
    let mut acc = [[_mm512_setzero_ps(); 4]; R];
    for u in 0..k / 32 {
        let w = [
            d.unit(rows[0], u),
            d.unit(rows[1], u),
            d.unit(rows[2], u),
            d.unit(rows[3], u),
        ];
        for (r, a) in acc.iter_mut().enumerate() {
            let x0 = _mm512_loadu_ps(x.add(r * k + 32 * u));
            let x1 = _mm512_loadu_ps(x.add(r * k + 32 * u + 16));
            for (c, ac) in a.iter_mut().enumerate() {
                *ac = _mm512_fmadd_ps(x0, w[c].0, *ac);
                *ac = _mm512_fmadd_ps(x1, w[c].1, *ac);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        for (c, ac) in a.iter().enumerate() {
            *out.add(4 * r + c) = kernel::hsum512(*ac);
        }
    }
}
