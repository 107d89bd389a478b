//! AVX-512 decoders: one per format, each turning 32 packed weights of a row into two
//! registers of f32 with exactly the portable decoders' arithmetic (`decode.rs`).

use super::decode::q4k_scale_min;
use super::weights::FloatType;
use std::arch::x86_64::*;
use std::sync::OnceLock;

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
pub(super) fn f16_table() -> &'static [f32] {
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

/// Rows of equal-sized blocks.
pub(super) struct Blocks<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) row_bytes: usize,
    pub(super) f16: &'static [f32],
}

impl Blocks<'_> {
    #[inline(always)]
    unsafe fn row(&self, j: usize) -> *const u8 {
        self.bytes.as_ptr().add(j * self.row_bytes)
    }
}

/// Q4_0: `d * (q - 8)`.
pub(super) struct Q40<'a>(pub(super) Blocks<'a>);
/// Q4_1: `fma(q, d, m)`.
pub(super) struct Q41<'a>(pub(super) Blocks<'a>);
/// Q8_0: `d * q`.
pub(super) struct Q80<'a>(pub(super) Blocks<'a>);

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
pub(super) struct Q4K<'a>(pub(super) Blocks<'a>);

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
pub(super) struct Q6K<'a>(pub(super) Blocks<'a>);

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
pub(super) struct Mlx<'a, const BITS: usize> {
    pub(super) group_size: usize,
    pub(super) scale_ty: FloatType,
    pub(super) words: &'a [u8],
    pub(super) scales: &'a [u8],
    pub(super) biases: &'a [u8],
    pub(super) cols: usize,
    pub(super) f16: &'static [f32],
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
pub(super) struct Dense<'a, const T: u8> {
    pub(super) bytes: &'a [u8],
    pub(super) cols: usize,
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
