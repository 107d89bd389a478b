//! Matrix products over packed (quantized) weights: `y[i, j] = Σ_k x[i, k] · W[j, k]`.
//!
//! Row invariance (the kernel contract): every output row is bit-identical whatever the
//! number of rows in the call, whatever the other rows hold, and whatever the thread count
//! or SIMD level. Threads split output columns `j`; each `(i, j)` sum uses the canonical
//! arithmetic documented in `kernel` and docs/kernels.md.

#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_units;
#[cfg(target_arch = "x86_64")]
mod bf16;
mod decode;
mod kernel;
mod level;
mod weights;

#[cfg(target_arch = "x86_64")]
pub use bf16::{bf16_activations_supported, matmul_bf16_activations};
pub use level::SimdLevel;
pub use weights::{bf16_to_f32, f16_to_f32, FloatType, MatmulError, PackedMatrix, WeightData};

use crate::pool::Pool;
use std::cell::RefCell;

/// Bytes of decoded weight tile a task keeps (sized to stay in L1 with the activations).
const TILE_BYTES: usize = 24 * 1024;

/// `y[i * rows + j] = Σ_k x[i * cols + k] · W[j, k]` for `i < n`, with the best SIMD level
/// of this CPU. `x` is `[n, cols]`, `y` is `[n, rows]`, both row-major.
pub fn matmul(
    w: &PackedMatrix,
    x: &[f32],
    n: usize,
    y: &mut [f32],
    pool: &Pool,
) -> Result<(), MatmulError> {
    matmul_with_level(SimdLevel::detect(), w, x, n, y, pool)
}

/// [`matmul`] at an explicit SIMD level (for tests and benches; results equal every level's).
pub fn matmul_with_level(
    level: SimdLevel,
    w: &PackedMatrix,
    x: &[f32],
    n: usize,
    y: &mut [f32],
    pool: &Pool,
) -> Result<(), MatmulError> {
    if !level.is_supported() {
        return Err(MatmulError::LevelUnsupported(level));
    }
    let (rows, cols) = (w.rows(), w.cols());
    if x.len() != n * cols {
        return Err(MatmulError::BadBuffer {
            what: "activations x",
            want: n * cols,
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
    if cols == 0 {
        y.fill(0.0);
        return Ok(());
    }
    let kp = cols.div_ceil(16) * 16;
    let (_, cmax) = kernel::blocking(level);
    // Weight rows per decoded panel: a choice of loop order only, never of arithmetic.
    let mut panel = (TILE_BYTES / (kp * 4)).clamp(1, 16);
    if panel >= cmax {
        panel -= panel % cmax;
    }
    let n_panels = rows.div_ceil(panel);
    let n_tasks = n_panels.min(pool.threads() * 4);
    let out = Out {
        ptr: y.as_mut_ptr(),
        stride: rows,
    };
    let out = &out;
    pool.run(n_tasks, |t| {
        let (p0, p1) = (t * n_panels / n_tasks, (t + 1) * n_panels / n_tasks);
        let j0 = p0 * panel;
        let j1 = (p1 * panel).min(rows);
        TILE.with(|tile| {
            let mut tile = tile.borrow_mut();
            if tile.len() < panel * kp {
                tile.resize(panel * kp, 0.0);
            }
            #[cfg(target_arch = "x86_64")]
            if level == SimdLevel::Avx512
                && avx512::columns(w, x, n, &mut tile, kp, panel, j0, j1, out)
            {
                return;
            }
            columns(level, w, x, n, &mut tile, kp, panel, j0, j1, out);
        });
    });
    Ok(())
}

/// The output matrix, shared by tasks that write disjoint columns.
pub(crate) struct Out {
    ptr: *mut f32,
    stride: usize,
}
// SAFETY: tasks write disjoint elements (each owns a column range of every row), and the
// `&mut [f32]` it points into is borrowed for the whole `pool.run` call.
unsafe impl Sync for Out {}

impl Out {
    /// Writes `y[i, j]`. Callers pass `i < n`, `j` inside their own column range.
    #[inline(always)]
    pub(crate) fn put(&self, i: usize, j: usize, v: f32) {
        // SAFETY: see the `Sync` impl; indices are within `n * rows` by construction.
        unsafe { *self.ptr.add(i * self.stride + j) = v }
    }
}

thread_local! {
    static TILE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Decodes a weight row at `level` (scalar code; at AVX2 compiled with FMA/F16C enabled).
fn decode_row(level: SimdLevel, w: &PackedMatrix, row: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if level != SimdLevel::Scalar && level.is_supported() {
        /// SAFETY: caller checked AVX2/FMA/F16C support.
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn with_fma(w: &PackedMatrix, row: usize, out: &mut [f32]) {
            decode::decode_row_scalar(w, row, out)
        }
        // SAFETY: the level (AVX2 or AVX-512, both including FMA and F16C) is supported.
        unsafe { with_fma(w, row, out) };
        return;
    }
    let _ = level;
    decode::decode_row_scalar(w, row, out)
}

/// Computes output columns `[j0, j1)` for all `n` rows, panel by panel, through the tile.
#[allow(clippy::too_many_arguments)]
fn columns(
    level: SimdLevel,
    w: &PackedMatrix,
    x: &[f32],
    n: usize,
    tile: &mut [f32],
    kp: usize,
    panel: usize,
    j0: usize,
    j1: usize,
    out: &Out,
) {
    let k = w.cols();
    let (rmax, cmax) = kernel::blocking(level);
    let mut sums = [0f32; kernel::MAX_R * kernel::MAX_C];
    let mut jp = j0;
    while jp < j1 {
        let pc = panel.min(j1 - jp);
        for c in 0..pc {
            let row = &mut tile[c * kp..(c + 1) * kp];
            decode_row(level, w, jp + c, row);
            row[k..].fill(0.0);
        }
        let mut i0 = 0;
        while i0 < n {
            let r = rmax.min(n - i0);
            let xr = &x[i0 * k..(i0 + r) * k];
            let mut c0 = 0;
            while c0 < pc {
                let c = cmax.min(pc - c0);
                kernel::tile_dot(
                    level,
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

/// Dequantizes weight row `row` into `out` (`out.len() == cols`): the exact values the
/// matmul multiplies by (used for token embeddings).
pub fn embedding_row(w: &PackedMatrix, row: usize, out: &mut [f32]) -> Result<(), MatmulError> {
    if row >= w.rows() {
        return Err(MatmulError::RowOutOfRange {
            row,
            rows: w.rows(),
        });
    }
    if out.len() != w.cols() {
        return Err(MatmulError::BadBuffer {
            what: "embedding output",
            want: w.cols(),
            got: out.len(),
        });
    }
    decode::decode_row_scalar(w, row, out);
    Ok(())
}
