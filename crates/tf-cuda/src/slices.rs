//! Matmuls in the GPU's own order (kernels/slices.cu): MLX 4-bit and bf16 weights.
//!
//! `tf_mmv` and `tf_mmq` give the CPU's bits, which ties a weight row to 16 threads and costs
//! many instructions a weight at one activation row. `tf_slices` sums in an order of its own,
//! fixed whatever the row count (so a row's bits never depend on the other rows of a call); its
//! bits are not the CPU's, and [`reference`] is that order on the host, bit for bit, for the
//! contract suite and the benchmark.

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::ops::{grid, i32_of, need};
use crate::weights::{GpuFormat, GpuMatrix};
use cudarc::driver::{CudaSlice, LaunchConfig};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Largest |GPU - CPU| logit a forward through `tf_slices` may show on the fixtures and stay
/// a pass of the device checks (with every top-1 equal); measured values are in
/// docs/receipts/cuda.md.
pub const FIDELITY_TOLERANCE: f64 = 1e-3;

static LAUNCHES: AtomicUsize = AtomicUsize::new(0);

/// Launches in the GPU's own order (`tf_slices` and [`crate::mma`]) so far in this process:
/// how a checker knows a forward took that order, so that its logits are held to fidelity
/// against the CPU, not to the CPU's bits.
pub fn launches() -> usize {
    LAUNCHES.load(Ordering::Relaxed)
}

/// Counts one launch in the GPU's own order (see [`launches`]).
pub(crate) fn count_launch() {
    LAUNCHES.fetch_add(1, Ordering::Relaxed);
}

/// Kernel entry points defined in kernels/slices.cu: each of `tf_slices_*` for any row count,
/// and its `_one` twin (one activation row: the row held whole in shared memory, row groups a
/// warp in turn).
pub const KERNEL_NAMES: [&str; 8] = [
    "tf_slices_mlx4",
    "tf_slices_mlx4_one",
    "tf_slices_bf16",
    "tf_slices_bf16_one",
    PLANT_ROW_VARIANT,
    "tf_plant_slices_mlx4_rowvar_one",
    PLANT_LANE_SUM,
    "tf_plant_slices_mlx4_sum_one",
];

/// Planted control: units in descending order when a call has several rows.
pub const PLANT_ROW_VARIANT: &str = "tf_plant_slices_mlx4_rowvar";
/// Planted control: a lane's four chains added in another order (accurate and row-invariant;
/// only a comparison with [`reference`] catches it).
pub const PLANT_LANE_SUM: &str = "tf_plant_slices_mlx4_sum";

/// Weight rows a warp takes (`SL_RJ` in kernels/slices.cu).
const ROWS_PER_WARP: usize = 2;

/// Weight rows a warp of the one-row entries takes (`tf_slice_one_rows` in kernels/slices.cu).
fn one_row_rows(format: GpuFormat) -> usize {
    match format {
        GpuFormat::Bf16 => 2,
        _ => 4,
    }
}

/// Most columns a `tf_slices` matrix may have: the one-row entry holds its activation row in
/// shared memory (128 KiB at most).
const MAX_COLS: usize = 32768;

/// The `tf_slices` kernel for a matrix of `format` with `cols` columns, if it has one.
pub fn kernel(format: GpuFormat, cols: usize) -> Option<&'static str> {
    match format {
        _ if !cols.is_multiple_of(32) || cols > MAX_COLS => None,
        GpuFormat::Mlx4 => Some("tf_slices_mlx4"),
        GpuFormat::Bf16 => Some("tf_slices_bf16"),
        _ => None,
    }
}

/// `y[i, j] = Σ_k x[i, k] · W[j, k]` for `i < n` through the `tf_slices` entry `kernel` (its
/// `_one` twin when `n` is 1: the same bits), with [`groups_per_warp`] at one row.
pub fn matmul_with(
    gpu: &Gpu,
    kernel: &str,
    w: &GpuMatrix,
    x: &CudaSlice<f32>,
    n: usize,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    let per = if n == 1 {
        groups_per_warp(gpu, kernel, w)?
    } else {
        1
    };
    matmul_geometry(gpu, kernel, w, x, n, y, per)
}

/// Row groups (of [`one_row_rows`]) a warp of `kernel`'s one-row entry takes in turn for `w`:
/// the fewest that let all its warps be resident at once, so a warp waits on memory once and
/// not once a group, and no second partial wave of warps follows the first.
pub fn groups_per_warp(gpu: &Gpu, kernel: &str, w: &GpuMatrix) -> Result<usize> {
    let smem = one_row_smem(w.cols());
    let blocks = gpu.resident_blocks(&format!("{kernel}_one"), BLOCK, smem)?;
    let warps = gpu.info().multiprocessors * blocks.max(1) * BLOCK as usize / 32;
    Ok(w.rows().div_ceil(one_row_rows(w.format())).div_ceil(warps))
}

/// Dynamic shared memory of a one-row launch: the activation row, lane-major (in whole
/// 32-unit strides of 4 KiB).
fn one_row_smem(cols: usize) -> u32 {
    (cols.div_ceil(1024) * 4096) as u32
}

/// Threads a block of the one-row `tf_slices` launches.
const BLOCK: u32 = 128;

/// Threads a block of the many-row launches (its warps share the x slabs it copies).
const MANY_BLOCK: u32 = 256;

/// Activation rows of a many-row tile (`MM_RT` in kernels/matmul.cu).
const TILE_ROWS: usize = 4;

/// [`matmul_with`] with `per` row groups a warp at one activation row (the benchmark tries
/// several; the bits are the same).
pub fn matmul_geometry(
    gpu: &Gpu,
    kernel: &str,
    w: &GpuMatrix,
    x: &CudaSlice<f32>,
    n: usize,
    y: &mut CudaSlice<f32>,
    per: usize,
) -> Result<()> {
    const OP: &str = "slices matmul";
    w.need_rows(OP)?;
    need(OP, "x", x.len(), n * w.cols())?;
    need(OP, "y", y.len(), n * w.rows())?;
    if self::kernel(w.format(), w.cols()).is_none() {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!(
                "no tf_slices kernel for {:?} with {} columns",
                w.format(),
                w.cols()
            ),
        });
    }
    if n == 0 || w.rows() == 0 {
        return Ok(());
    }
    let (n_, rows, cols) = (i32_of(OP, "n", n)?, w.rows() as i32, w.cols() as i32);
    let per = per.clamp(1, w.rows().div_ceil(one_row_rows(w.format())));
    let per_ = i32_of(OP, "groups a warp", per)?;
    let cfg = launch_config(w.format(), w.rows(), w.cols(), n, per);
    let entry = if n == 1 {
        format!("{kernel}_one")
    } else {
        kernel.to_string()
    };
    let mut b = gpu.launcher(&entry)?;
    b.arg(w.bytes()).arg(x).arg(y);
    if n == 1 {
        b.arg(&rows).arg(&cols).arg(&per_);
    } else {
        b.arg(&n_).arg(&rows).arg(&cols);
    }
    // SAFETY: the kernels' signatures are (u8*, f32*, f32*, i32, i32, i32) (the _one entries:
    // rows, cols, groups a warp after the pointers); the buffers hold the elements they read
    // and write (checked above; the weight was validated at upload, and its rows are whole
    // 32-element units).
    unsafe { b.go(cfg, "launching slices matmul") }
}

/// The launch of a `tf_slices` body over `rows` weight rows of `format` with `cols` columns
/// (counted in [`launches`]): the one-row entry's grid with `per` row groups a warp when `n` is
/// 1, else the many-row entry's; the dynamic shared memory of its x copies.
pub(crate) fn launch_config(
    format: GpuFormat,
    rows: usize,
    cols: usize,
    n: usize,
    per: usize,
) -> LaunchConfig {
    count_launch();
    let (mut cfg, smem) = if n == 1 {
        let warps = rows.div_ceil(one_row_rows(format)).div_ceil(per.max(1));
        (grid(warps * 32, BLOCK), one_row_smem(cols))
    } else {
        let warps = rows.div_ceil(ROWS_PER_WARP);
        (
            grid(warps * 32, MANY_BLOCK),
            (2 * 4096 * n.min(TILE_ROWS)) as u32,
        )
    };
    cfg.shared_mem_bytes = smem;
    cfg
}

/// The weights of one unit's elements `8m .. 8m + 8` from its device bytes.
fn decode(format: GpuFormat, unit: &[u8], m: usize) -> [f32; 8] {
    let word = |i: usize| u32::from_le_bytes(unit[4 * i..4 * i + 4].try_into().unwrap());
    let mut w = [0f32; 8];
    match format {
        GpuFormat::Bf16 => {
            for (i, pair) in w.chunks_mut(2).enumerate() {
                let v = word(4 * m + i);
                pair[0] = f32::from_bits(v << 16);
                pair[1] = f32::from_bits(v & 0xffff_0000);
            }
        }
        _ => {
            let (s, b) = (f32::from_bits(word(4)), f32::from_bits(word(5)));
            let v = word(m);
            for (e, w) in w.iter_mut().enumerate() {
                let q = (v >> (4 * e)) & 15;
                *w = s.mul_add(q as f32, b);
            }
        }
    }
    w
}

/// `tf_slices`' result on the host, bit for bit: `bytes` is the matrix's device layout
/// (`rows` rows of `cols / 32` units), `x` is `[n, cols]`; returns `[n, rows]`.
pub fn reference(
    format: GpuFormat,
    bytes: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
) -> Vec<f32> {
    let units = cols / 32;
    let ub = match format {
        GpuFormat::Bf16 => 64,
        _ => 24,
    };
    let mut y = vec![0f32; n * rows];
    for i in 0..n {
        let xr = &x[i * cols..(i + 1) * cols];
        for j in 0..rows {
            let row = &bytes[j * units * ub..(j + 1) * units * ub];
            let mut lane = [0f32; 32];
            for (p, l) in lane.iter_mut().enumerate() {
                let mut c = [0f32; 4];
                for u in (p..units).step_by(32) {
                    let unit = &row[u * ub..(u + 1) * ub];
                    for (m, c) in c.iter_mut().enumerate() {
                        let w = decode(format, unit, m);
                        for e in 0..8 {
                            *c = xr[32 * u + 8 * m + e].mul_add(w[e], *c);
                        }
                    }
                }
                *l = (c[0] + c[1]) + (c[2] + c[3]);
            }
            let mut off = 16;
            while off > 0 {
                for l in 0..off {
                    lane[l] += lane[l + off];
                }
                off /= 2;
            }
            y[i * rows + j] = lane[0];
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The launcher's rows a warp are the kernels' (a mismatch would leave rows uncomputed).
    #[test]
    fn rows_per_warp_is_the_kernels() {
        let src = include_str!("../kernels/slices.cu");
        assert!(src.contains(&format!("#define SL_RJ {ROWS_PER_WARP} ")));
        let (bf16, mlx) = (one_row_rows(GpuFormat::Bf16), one_row_rows(GpuFormat::Mlx4));
        assert!(src.contains(&format!("return fmt == FMT_BF16 ? {bf16} : {mlx}; }}")));
        let matmul = include_str!("../kernels/matmul.cu");
        assert!(matmul.contains(&format!("#define MM_RT {TILE_ROWS}\n")));
    }
}
