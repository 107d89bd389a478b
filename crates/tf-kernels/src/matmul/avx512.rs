//! AVX-512 paths: per-format decoders that dequantize 32 weights into two registers with
//! exactly the scalar decoders' arithmetic, a fused decode-and-multiply kernel for few rows,
//! and row decoding into the L1 tile for many rows. Everything unsafe here is reached only
//! through `columns`, which the dispatcher calls after checking AVX-512 support.

use super::decode::q4k_scale_min;
use super::kernel;
use super::weights::{FloatType, PackedMatrix, WeightData};
use super::{Out, SimdLevel};
use std::arch::x86_64::*;
use std::sync::OnceLock;
use tf_formats::gguf::GgmlType;

/// Rows at most for which the fused kernel is used (more rows go through the tile); the
/// kernel takes up to `FUSED_R` rows per pass, re-decoding the weights for each pass.
pub(super) const FUSED_MAX_N: usize = 8;
/// Activation rows per fused pass.
const FUSED_R: usize = 4;

/// A format's decoder: the 32 weights `[32u, 32u + 32)` of a weight row.
pub(super) trait Unit {
    /// Per-row state (base pointers) computed once per row.
    type Row: Copy;
    /// SAFETY: `j` is a row of the matrix.
    unsafe fn row(&self, j: usize) -> Self::Row;
    /// SAFETY: AVX-512F/BW, F16C and FMA are available; `u < cols / 32`.
    unsafe fn unit(&self, r: Self::Row, u: usize) -> (__m512, __m512);
}

/// Every f16 bit pattern widened to f32 (256 KiB, built once): a scale's conversion becomes
/// one broadcast load, keeping the two vector ports free for the weights.
fn f16_table() -> &'static [f32] {
    static TABLE: OnceLock<Box<[f32]>> = OnceLock::new();
    TABLE.get_or_init(|| (0..=u16::MAX).map(super::weights::f16_to_f32).collect())
}

/// The f16 at `p` (little-endian), widened through the table.
#[inline(always)]
unsafe fn f16_at(tab: &[f32], p: *const u8) -> f32 {
    *tab.get_unchecked(std::ptr::read_unaligned(p as *const u16) as usize)
}

/// Element `i` of a scale/bias buffer, widened (f16 through the table).
#[inline(always)]
unsafe fn scale_at(tab: &[f32], ty: FloatType, bytes: &[u8], i: usize) -> f32 {
    match ty {
        FloatType::F16 => f16_at(tab, bytes.as_ptr().add(2 * i)),
        _ => ty.read(bytes, i),
    }
}

#[allow(dead_code)]
#[inline(always)]
unsafe fn f16x2(p: *const u8) -> __m128 {
    _mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(p as *const i32)))
}

#[inline(always)]
unsafe fn u8x16(p: *const u8) -> __m512i {
    _mm512_cvtepu8_epi32(_mm_loadu_si128(p as *const __m128i))
}

/// `[0.0, 1.0, ..., 15.0]`: the 4-bit codes, for building per-block lookup tables.
#[inline(always)]
unsafe fn iota16() -> __m512 {
    _mm512_setr_ps(
        0., 1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15.,
    )
}

/// The f16 pair at `p` widened and spread: (`[p[0]; 16]`, `[p[1]; 16]`).
#[allow(dead_code)]
#[inline(always)]
unsafe fn f16_pair_splat(p: *const u8) -> (__m512, __m512) {
    let v = _mm512_cvtph_ps(_mm256_set1_epi32(std::ptr::read_unaligned(p as *const i32)));
    (_mm512_moveldup_ps(v), _mm512_movehdup_ps(v))
}

/// Rows of equal-sized blocks.
struct Blocks<'a> {
    bytes: &'a [u8],
    row_bytes: usize,
    f16: &'static [f32],
}

impl Blocks<'_> {
    #[inline(always)]
    unsafe fn row(&self, j: usize) -> *const u8 {
        self.bytes.as_ptr().add(j * self.row_bytes)
    }
}

/// Q4_0: `d * (q - 8)`.
struct Q40<'a>(Blocks<'a>);
/// Q4_1: `fma(q, d, m)`.
struct Q41<'a>(Blocks<'a>);
/// Q8_0: `d * q`.
struct Q80<'a>(Blocks<'a>);

impl Unit for Q40<'_> {
    type Row = *const u8;
    #[inline(always)]
    unsafe fn row(&self, j: usize) -> *const u8 {
        self.0.row(j)
    }
    #[inline(always)]
    unsafe fn unit(&self, r: *const u8, u: usize) -> (__m512, __m512) {
        let blk = r.add(u * 18);
        let d = _mm512_set1_ps(f16_at(self.0.f16, blk));
        // The block's 16 possible weights d * (q - 8), then a lookup by nibble (the
        // permutation reads only the low 4 bits of each index lane).
        let t = _mm512_mul_ps(_mm512_sub_ps(iota16(), _mm512_set1_ps(8.0)), d);
        let q = u8x16(blk.add(2));
        (
            _mm512_permutexvar_ps(q, t),
            _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), t),
        )
    }
}

impl Unit for Q41<'_> {
    type Row = *const u8;
    #[inline(always)]
    unsafe fn row(&self, j: usize) -> *const u8 {
        self.0.row(j)
    }
    #[inline(always)]
    unsafe fn unit(&self, r: *const u8, u: usize) -> (__m512, __m512) {
        let blk = r.add(u * 20);
        // The block's 16 possible weights fma(q, d, m), then a lookup by nibble (the
        // permutation reads only the low 4 bits of each index lane).
        let d = _mm512_set1_ps(f16_at(self.0.f16, blk));
        let m = _mm512_set1_ps(f16_at(self.0.f16, blk.add(2)));
        let t = _mm512_fmadd_ps(iota16(), d, m);
        let q = u8x16(blk.add(4));
        (
            _mm512_permutexvar_ps(q, t),
            _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), t),
        )
    }
}

impl Unit for Q80<'_> {
    type Row = *const u8;
    #[inline(always)]
    unsafe fn row(&self, j: usize) -> *const u8 {
        self.0.row(j)
    }
    #[inline(always)]
    unsafe fn unit(&self, r: *const u8, u: usize) -> (__m512, __m512) {
        let blk = r.add(u * 34);
        let d = _mm512_set1_ps(f16_at(self.0.f16, blk));
        let q0 = _mm512_cvtepi8_epi32(_mm_loadu_si128(blk.add(2) as *const __m128i));
        let q1 = _mm512_cvtepi8_epi32(_mm_loadu_si128(blk.add(18) as *const __m128i));
        (
            _mm512_mul_ps(_mm512_cvtepi32_ps(q0), d),
            _mm512_mul_ps(_mm512_cvtepi32_ps(q1), d),
        )
    }
}

/// Q4_K (256-element blocks, 32-element sub-blocks with 6-bit scale and min).
struct Q4K<'a>(Blocks<'a>);

impl Unit for Q4K<'_> {
    type Row = *const u8;
    #[inline(always)]
    unsafe fn row(&self, j: usize) -> *const u8 {
        self.0.row(j)
    }
    #[inline(always)]
    unsafe fn unit(&self, r: *const u8, u: usize) -> (__m512, __m512) {
        let blk = std::slice::from_raw_parts(r.add((u / 8) * 144), 144);
        let s = u % 8;
        let (sc, mn) = q4k_scale_min(s, &blk[4..16]);
        let d1 = f16_at(self.0.f16, blk.as_ptr()) * sc as f32;
        let m1 = f16_at(self.0.f16, blk.as_ptr().add(2)) * mn as f32;
        let (d1, negm) = (_mm512_set1_ps(d1), _mm512_set1_ps(-m1));
        let q = blk.as_ptr().add(16 + 32 * (s / 2));
        let sh = _mm_cvtsi32_si128(4 * (s % 2) as i32);
        let mask = _mm512_set1_epi32(0xF);
        let q0 = _mm512_and_si512(_mm512_srl_epi32(u8x16(q), sh), mask);
        let q1 = _mm512_and_si512(_mm512_srl_epi32(u8x16(q.add(16)), sh), mask);
        (
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(q0), d1, negm),
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(q1), d1, negm),
        )
    }
}

/// Q6_K (256-element blocks, 16-element groups with an 8-bit scale).
struct Q6K<'a>(Blocks<'a>);

impl Unit for Q6K<'_> {
    type Row = *const u8;
    #[inline(always)]
    unsafe fn row(&self, j: usize) -> *const u8 {
        self.0.row(j)
    }
    #[inline(always)]
    unsafe fn unit(&self, r: *const u8, u: usize) -> (__m512, __m512) {
        let blk = std::slice::from_raw_parts(r.add((u / 8) * 210), 210);
        let (h, qq) = ((u % 8) / 4, u % 4);
        let d = f16_at(self.0.f16, blk.as_ptr().add(208));
        let ql = blk.as_ptr().add(64 * h + (qq & 1) * 32);
        let qh = blk.as_ptr().add(128 + 32 * h);
        let shl = _mm_cvtsi32_si128(4 * (qq >> 1) as i32);
        let shh = _mm_cvtsi32_si128(2 * qq as i32);
        let half = |c: usize| {
            let lv = _mm512_and_si512(
                _mm512_srl_epi32(u8x16(ql.add(16 * c)), shl),
                _mm512_set1_epi32(0xF),
            );
            let hv = _mm512_and_si512(
                _mm512_srl_epi32(u8x16(qh.add(16 * c)), shh),
                _mm512_set1_epi32(3),
            );
            let q = _mm512_sub_epi32(
                _mm512_or_si512(lv, _mm512_slli_epi32(hv, 4)),
                _mm512_set1_epi32(32),
            );
            let ds = d * (blk[192 + 8 * h + 2 * qq + c] as i8) as f32;
            _mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(ds))
        };
        (half(0), half(1))
    }
}

/// MLX affine 4- and 8-bit (`BITS`) with a group size that is a multiple of 32.
struct Mlx<'a, const BITS: usize> {
    group_size: usize,
    scale_ty: FloatType,
    words: &'a [u8],
    scales: &'a [u8],
    biases: &'a [u8],
    cols: usize,
    f16: &'static [f32],
}

impl<const BITS: usize> Unit for Mlx<'_, BITS> {
    /// (packed words of the row, index of the row's first group)
    type Row = (*const u8, usize);
    #[inline(always)]
    unsafe fn row(&self, j: usize) -> (*const u8, usize) {
        (
            self.words.as_ptr().add(j * self.cols * BITS / 8),
            j * (self.cols / self.group_size),
        )
    }
    #[inline(always)]
    unsafe fn unit(&self, (p, g0): (*const u8, usize), u: usize) -> (__m512, __m512) {
        let g = g0 + 32 * u / self.group_size;
        let s = _mm512_set1_ps(scale_at(self.f16, self.scale_ty, self.scales, g));
        let b = _mm512_set1_ps(scale_at(self.f16, self.scale_ty, self.biases, g));
        let p = p.add(u * 4 * BITS);
        let (q0, q1) = if BITS == 8 {
            (u8x16(p), u8x16(p.add(16)))
        } else {
            // Element e is nibble e % 2 of byte e / 2: duplicate bytes, shift odd lanes by 4.
            let dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
            let sh = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
            let mask = _mm512_set1_epi32(0xF);
            let nib = |q: *const u8| {
                let v = _mm_shuffle_epi8(_mm_loadl_epi64(q as *const __m128i), dup);
                _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(v), sh), mask)
            };
            (nib(p), nib(p.add(8)))
        };
        (
            _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q0), s), b),
            _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q1), s), b),
        )
    }
}

/// Dense rows (a multiple of 32 columns) of f32 / f16 / bf16 (`T` = 0 / 1 / 2).
struct Dense<'a, const T: u8> {
    bytes: &'a [u8],
    cols: usize,
}

impl<const T: u8> Unit for Dense<'_, T> {
    type Row = *const u8;
    #[inline(always)]
    unsafe fn row(&self, j: usize) -> *const u8 {
        let size = if T == 0 { 4 } else { 2 };
        self.bytes.as_ptr().add(j * self.cols * size)
    }
    #[inline(always)]
    unsafe fn unit(&self, r: *const u8, u: usize) -> (__m512, __m512) {
        match T {
            0 => {
                let p = r.add(128 * u) as *const f32;
                (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)))
            }
            1 => {
                let p = r.add(64 * u);
                (
                    _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)),
                    _mm512_cvtph_ps(_mm256_loadu_si256(p.add(32) as *const __m256i)),
                )
            }
            _ => {
                let p = r.add(64 * u);
                let w = |q: *const u8| {
                    let v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(q as *const __m256i));
                    _mm512_castsi512_ps(_mm512_slli_epi32(v, 16))
                };
                (w(p), w(p.add(32)))
            }
        }
    }
}

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
