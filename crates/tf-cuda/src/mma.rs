//! MLX 4-bit matmuls on the tensor cores (kernels/mma.cu): `mma.sync` with bf16 inputs and f32
//! sums, x split into two bf16 parts, each group's scale and bias applied after its sum.
//!
//! Like `tf_slices` it sums in an order of the GPU's own, fixed whatever the row count (a row's
//! bits never depend on the other rows of a call), held to fidelity against the CPU. It reads
//! its own layout, the "mma tiles" ([`tile`] makes them on the device from the rows layout), so
//! only [`crate::ops::matmul`] may be given such a matrix. Set `TF_CUDA_MMA=0` to load MLX
//! 4-bit matrices in the rows layout instead (for comparisons).
//!
//! A matrix whose every scale and bias is a bf16 (the checkpoint's, as MLX stores them in a
//! bf16 model) has tiles that hold them so, 576 bytes a tile and group against 640 of f32
//! pairs, and the entries' `_b16` twins read them: the same f32 values, so the same bits
//! ([`Layout::MmaTilesB16`]). `TF_CUDA_MMA_B16=0` keeps the f32 pairs (for comparisons).

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::ops::{grid, i32_of, need};
use crate::weights::{GpuFormat, GpuMatrix, Layout};
use cudarc::driver::{CudaSlice, LaunchConfig};
use std::ops::Range;

/// Kernel entry points defined in kernels/mma.cu and kernels/norm_split.cu (the `_b16` twins
/// of [`TILE_READERS`] aside: [`compact_kernel_names`]).
pub const KERNEL_NAMES: [&str; 25] = [
    "tf_mma_mlx4_r1",
    "tf_mma_mlx4_r2",
    "tf_mma_mlx4_r1_staged",
    "tf_mma_mlx4_r2_staged",
    PLANT_ROW_VARIANT,
    "tf_mma_tile_mlx4",
    "tf_mma_tile_mlx4_b16",
    "tf_mma_scales_wide",
    SPLIT_KERNELS[0],
    SPLIT_KERNELS[1],
    SPLIT_KERNELS_X4[0],
    SPLIT_KERNELS_X4[1],
    "tf_mma_mlx4_r1_split_x4_relu2",
    "tf_mma_mlx4_r2_split_x4_relu2",
    "tf_mma_mlx4_r1_split_x4_xin",
    "tf_mma_mlx4_r2_split_x4_xin",
    "tf_mma_split",
    PLANT_SPLIT_SUMS,
    "tf_rms_norm_split",
    "tf_add_rms_norm_split",
    "tf_add2_rms_norm_split",
    "tf_rms_norm_split_wide",
    "tf_add_rms_norm_split_wide",
    "tf_add2_rms_norm_split_wide",
    "tf_mamba_gated_norm_split_wide",
];

/// The probes' entries (kernels/mma.cu, for tf-cuda-mmbench only): [`LOADS_PROBES`],
/// [`STREAM_PROBES`], [`TILE_PROBES`].
pub fn probe_kernel_names() -> impl Iterator<Item = &'static str> {
    let streams = STREAM_PROBES.iter().map(|&(_, k)| k);
    LOADS_PROBES.into_iter().chain(streams).chain(TILE_PROBES)
}

/// The entries that read the tiles, each with a twin `NAME_b16` for [`Layout::MmaTilesB16`]
/// (kernels/mma.cu and kernels/moe.cu).
pub const TILE_READERS: [&str; 25] = [
    "tf_mma_mlx4_r1",
    "tf_mma_mlx4_r2",
    "tf_mma_mlx4_r1_staged",
    "tf_mma_mlx4_r2_staged",
    PLANT_ROW_VARIANT,
    SPLIT_KERNELS[0],
    SPLIT_KERNELS[1],
    SPLIT_KERNELS_X4[0],
    SPLIT_KERNELS_X4[1],
    "tf_moe_mma_mlx4",
    "tf_moe_mma_mlx4_staged",
    "tf_moe_mma_mlx4_split",
    "tf_moe_mma_mlx4_split_r1",
    "tf_moe_mma_mlx4_split_x4",
    "tf_moe_mma_mlx4_split_r1_x4",
    "tf_moe_mma_mlx4_split_x4_one",
    "tf_moe_mma_mlx4_split_r1_x4_one",
    "tf_moe_mma_mlx4_split_x4_xin",
    "tf_moe_mma_mlx4_split_r1_x4_xin",
    "tf_moe_mma_mlx4_split_x4_one_relu2",
    "tf_moe_mma_mlx4_split_r1_x4_one_relu2",
    "tf_mma_mlx4_r1_split_x4_relu2",
    "tf_mma_mlx4_r2_split_x4_relu2",
    "tf_mma_mlx4_r1_split_x4_xin",
    "tf_mma_mlx4_r2_split_x4_xin",
];

/// The `_b16` twins' names.
pub fn compact_kernel_names() -> impl Iterator<Item = String> {
    TILE_READERS.iter().map(|n| format!("{n}_b16"))
}

/// `name` (one of [`TILE_READERS`]), or its `_b16` twin where `layout` is the compact tiles'.
pub(crate) fn entry_for(name: &str, layout: Layout) -> std::borrow::Cow<'_, str> {
    match layout {
        Layout::MmaTilesB16 => format!("{name}_b16").into(),
        _ => name.into(),
    }
}

/// The products of x split once a call ([`SplitX`]), one tile and two tiles a block, 8 x rows
/// a block.
pub const SPLIT_KERNELS: [&str; 2] = ["tf_mma_mlx4_r1_split", "tf_mma_mlx4_r2_split"];

/// [`SPLIT_KERNELS`] with 4 x rows a block, half the tensor cores' work: for calls of at most
/// four rows (the same bits).
pub const SPLIT_KERNELS_X4: [&str; 2] = ["tf_mma_mlx4_r1_split_x4", "tf_mma_mlx4_r2_split_x4"];

/// x rows a block of the split products for a call of `n` rows: 4 ([`SPLIT_KERNELS_X4`]) where
/// `n` is at most 4, else 8.
pub(crate) fn split_rows_a_block(n: usize) -> usize {
    if n <= 4 {
        4
    } else {
        8
    }
}

/// The split product [`matmul_split_with`] launches for `rt` (1 or 2) tiles a block and `n` rows.
pub fn split_kernel(rt: usize, n: usize) -> &'static str {
    let kernels = match split_rows_a_block(n) {
        4 => SPLIT_KERNELS_X4,
        _ => SPLIT_KERNELS,
    };
    kernels[rt.clamp(1, 2) - 1]
}

/// Planted control: [`split`]'s group sums taken in f32 from x, not on the tensor cores.
pub const PLANT_SPLIT_SUMS: &str = "tf_plant_mma_split_sums";

/// Planted control: the low parts of x dropped when a call has several rows (one tile a block).
pub const PLANT_ROW_VARIANT: &str = "tf_plant_mma_mlx4_rowvar";

/// Columns of one scale and bias in the tiles.
pub const GROUP: usize = 64;

/// Warps a block (`MMA_KW` in kernels/mma.cu).
const WARPS: u32 = 16;

/// Warps a block of the grouped expert products (`MMA_MOE_KW`).
const MOE_WARPS: u32 = 4;

/// Row tiles a block of the grouped expert products (kernels/moe.cu's entries but `_r1`).
pub(crate) const MOE_TILES: usize = 2;

/// Whether the tensor cores' product serves an MLX 4-bit matrix of `cols` columns with MLX
/// groups of `group_size` (and `TF_CUDA_MMA` is not `0`).
pub fn serves(group_size: usize, cols: usize) -> bool {
    enabled() && group_size.is_multiple_of(GROUP) && cols.is_multiple_of(GROUP) && cols > 0
}

/// Whether Nemotron-H's norms and relu² experts split their rows for the products that follow
/// ([`SplitX`]; the same bits). On unless `TF_CUDA_MMA_SPLIT=0`.
pub fn split_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("TF_CUDA_MMA_SPLIT").map_or(true, |v| v != "0"))
}

/// Whether one-token rounds' split expert products take one tile a block (the same bits; twice
/// the blocks of two), for the up and the down matrices: both by default; `TF_CUDA_MOE_R1=up`
/// or `=down` one, `=0` neither.
pub fn one_tile_experts() -> (bool, bool) {
    static ON: std::sync::OnceLock<(bool, bool)> = std::sync::OnceLock::new();
    *ON.get_or_init(|| match std::env::var("TF_CUDA_MOE_R1").as_deref() {
        Ok("0") => (false, false),
        Ok("up") => (true, false),
        Ok("down") => (false, true),
        _ => (true, true),
    })
}

fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("TF_CUDA_MMA").map_or(true, |v| v != "0"))
}

/// Whether matrices whose scales and biases are all bf16 take the compact tiles (unless
/// `TF_CUDA_MMA_B16=0`).
fn compact_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("TF_CUDA_MMA_B16").map_or(true, |v| v != "0"))
}

/// Bytes of codes a tile of 16 rows and a group takes.
const CODE_BYTES: usize = 512;

/// Bytes of a tile and group's 16 scale pairs: 8 bytes each, or 4 (`compact`).
fn pair_bytes(compact: bool) -> usize {
    16 * if compact { 4 } else { 8 }
}

/// Bytes of the tiles of a `[rows, cols]` matrix: every tile and group's codes, then their
/// scale pairs.
pub fn tile_bytes(rows: usize, cols: usize, compact: bool) -> usize {
    rows.div_ceil(16) * (cols / GROUP) * (CODE_BYTES + pair_bytes(compact))
}

/// The byte ranges of a `[rows, cols]` matrix's tiles that hold rows `from..to` (at most
/// `rows`): their whole tiles' codes, then their scale pairs.
pub fn tile_spans(
    rows: usize,
    cols: usize,
    compact: bool,
    from: usize,
    to: usize,
) -> [Range<usize>; 2] {
    let (groups, tiles) = (cols / GROUP, rows.div_ceil(16));
    let (t0, t1) = (from / 16, to.div_ceil(16));
    let (codes, pairs) = (groups * CODE_BYTES, groups * pair_bytes(compact));
    let scales = tiles * codes;
    [
        t0 * codes..t1 * codes,
        scales + t0 * pairs..scales + t1 * pairs,
    ]
}

/// Whether every scale and bias of `m` (MLX 4-bit, rows layout of f32 pairs) is a bf16, asked of
/// the device (`tf_mma_scales_wide`; synchronizes).
fn scales_are_bf16(gpu: &Gpu, m: &GpuMatrix, rows: i32, cols: i32) -> Result<bool> {
    let mut wide = gpu.zeros::<u32>(1)?;
    let pairs = m.rows() * (m.cols() / GROUP);
    let mut b = gpu.launcher("tf_mma_scales_wide")?;
    b.arg(m.bytes()).arg(&rows).arg(&cols).arg(&mut wide);
    // SAFETY: (u8*, i32, i32, u32*); `m` holds `rows` rows of `cols / 32` 24-byte units, a
    // thread reads one (row, group)'s pair, and `wide` holds the one word it may set.
    unsafe { b.go(grid(pairs, 256), "launching the scales' check") }?;
    Ok(gpu.download(&wide, 1)?[0] == 0)
}

/// The matrix `m` (MLX 4-bit, rows layout, groups a multiple of 64 columns: [`serves`]) in the
/// tensor cores' tiles, made on the device: the compact ones where they are on and its scales
/// and biases are all bf16.
pub fn tile(gpu: &Gpu, m: &GpuMatrix) -> Result<GpuMatrix> {
    const OP: &str = "mma tiles";
    if m.format() != GpuFormat::Mlx4
        || m.layout() != Layout::Rows
        || !m.cols().is_multiple_of(GROUP)
    {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!(
                "{:?} {:?} [{}, {}]: the tiles take MLX 4-bit rows of whole 64-column groups",
                m.format(),
                m.layout(),
                m.rows(),
                m.cols()
            ),
        });
    }
    let (rows, cols) = (i32_of(OP, "rows", m.rows())?, i32_of(OP, "cols", m.cols())?);
    let compact = compact_enabled() && scales_are_bf16(gpu, m, rows, cols)?;
    let (layout, kernel) = match compact {
        true => (Layout::MmaTilesB16, "tf_mma_tile_mlx4_b16"),
        false => (Layout::MmaTiles, "tf_mma_tile_mlx4"),
    };
    let bytes = gpu.zeros::<u8>(tile_bytes(m.rows(), m.cols(), compact))?;
    let mut out = GpuMatrix::in_layout(m.rows(), m.cols(), GpuFormat::Mlx4, layout, bytes);
    let threads = m.rows().div_ceil(16) * (m.cols() / GROUP) * 32;
    let mut b = gpu.launcher(kernel)?;
    b.arg(m.bytes()).arg(out.bytes_mut()).arg(&rows).arg(&cols);
    // SAFETY: the kernel's signature is (u8*, u8*, i32, i32); `m` holds `rows` rows of
    // `cols / 32` 24-byte units and `out` exactly `tile_bytes(rows, cols, compact)` bytes,
    // which a thread a (tile, group, lane) writes.
    unsafe { b.go(grid(threads, 256), "launching the mma tiling") }?;
    Ok(out)
}

/// Most shared memory a block's staged x may take.
pub(crate) const STAGING_MAX: usize = 64 << 10;

/// How a block takes its x: `rt` row tiles a block, and `staged` (x split once into shared
/// memory) or not (each lane splits its own); every choice gives the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    pub rt: usize,
    pub staged: bool,
}

impl Choice {
    /// Every choice kernels/mma.cu instantiates.
    pub const ALL: [Choice; 4] = [
        Choice {
            rt: 1,
            staged: false,
        },
        Choice {
            rt: 2,
            staged: false,
        },
        Choice {
            rt: 1,
            staged: true,
        },
        Choice {
            rt: 2,
            staged: true,
        },
    ];

    /// The launcher's choice for `rows` x `cols` weights and `n` x rows (the faster in
    /// tf-cuda-mmbench, docs/perf.md): x staged for one row where it fits in [`STAGING_MAX`],
    /// its tiles a block by `tiles_a_block`; x split in each lane, two tiles a block (one tile
    /// spills registers).
    pub fn for_call(rows: usize, cols: usize, n: usize) -> Choice {
        let staged = n == 1
            && Choice {
                rt: 1,
                staged: true,
            }
            .fits(n, cols);
        Choice {
            rt: if staged { tiles_a_block(rows, n) } else { 2 },
            staged,
        }
    }

    /// Whether a call of `n` x rows of `cols` columns can take this choice (its staging fits).
    pub fn fits(self, n: usize, cols: usize) -> bool {
        !self.staged || staging_bytes(n, cols) <= STAGING_MAX
    }

    /// x rows a block: 4 staged (the one-row choice), 8 not.
    fn x_rows(self) -> usize {
        if self.staged {
            4
        } else {
            8
        }
    }

    /// The kernel's name (one of [`KERNEL_NAMES`]).
    pub fn kernel(self) -> &'static str {
        match (self.rt, self.staged) {
            (1, false) => KERNEL_NAMES[0],
            (1, true) => KERNEL_NAMES[2],
            (_, false) => KERNEL_NAMES[1],
            (_, true) => KERNEL_NAMES[3],
        }
    }
}

/// Row tiles a block of the products of x staged or split: two, but one where many rows meet at
/// most one block of x rows.
pub(crate) fn tiles_a_block(rows: usize, n: usize) -> usize {
    if n <= 8 && rows > 4096 {
        1
    } else {
        2
    }
}

/// Shared memory of a block's staged x: its rows (at most 4) by 256 bytes a group.
fn staging_bytes(n: usize, cols: usize) -> usize {
    n.min(4) * (cols / GROUP) * 256
}

/// A block for `c.rt` tiles by `x_rows` x rows (counted in [`crate::slices::launches`]).
fn launch(c: Choice, x_rows: usize, rows: usize, cols: usize, n: usize) -> LaunchConfig {
    crate::slices::count_launch();
    LaunchConfig {
        grid_dim: (
            rows.div_ceil(16 * c.rt).max(1) as u32,
            n.div_ceil(x_rows).max(1) as u32,
            1,
        ),
        block_dim: (32 * WARPS, 1, 1),
        shared_mem_bytes: if c.staged {
            staging_bytes(n, cols) as u32
        } else {
            0
        },
    }
}

/// The stacked experts `m` (`n_experts` of `m.rows() / n_experts` rows each, a multiple of 16)
/// in the tiles, each expert's tiles in turn; `None` where the tiles do not serve them.
pub fn tile_experts(gpu: &Gpu, m: &GpuMatrix, n_experts: usize) -> Result<Option<GpuMatrix>> {
    let each = m.rows() / n_experts.max(1);
    if m.format() != GpuFormat::Mlx4 || !each.is_multiple_of(16) || each == 0 {
        return Ok(None);
    }
    tile(gpu, m).map(Some)
}

/// The grouped expert product's entry and launch for experts of `rows` x `cols` over a round
/// of `n` tokens with `groups` blocks rows (non-empty experts at most) and `tiles` row tiles a
/// block: x staged when every group is one row.
pub(crate) fn experts_launch(
    rows: usize,
    cols: usize,
    n: usize,
    groups: usize,
    tiles: usize,
) -> Result<(&'static str, LaunchConfig)> {
    crate::slices::count_launch();
    let staged = n == 1 && staging_bytes(1, cols) <= STAGING_MAX;
    let groups = u32::try_from(groups)
        .ok()
        .filter(|&g| g <= 65535)
        .ok_or_else(|| CudaError::Shape {
            op: "moe mma matmul",
            detail: format!("{groups} expert groups exceed the grid"),
        })?;
    let cfg = LaunchConfig {
        grid_dim: (rows.div_ceil(16 * tiles).max(1) as u32, groups, 1),
        block_dim: (32 * MOE_WARPS, 1, 1),
        shared_mem_bytes: if staged {
            staging_bytes(1, cols) as u32
        } else {
            0
        },
    };
    let name = if staged {
        "tf_moe_mma_mlx4_staged"
    } else {
        "tf_moe_mma_mlx4"
    };
    Ok((name, cfg))
}

/// `y[i, j] = Σ_k x[i, k] · W[j, k]` for `i < n`, `w` in the mma tiles.
pub fn matmul(
    gpu: &Gpu,
    w: &GpuMatrix,
    x: &CudaSlice<f32>,
    n: usize,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    let c = Choice::for_call(w.rows(), w.cols(), n);
    matmul_with(gpu, c.kernel(), c, w, x, n, y)
}

/// [`matmul`] through `kernel` (`c`'s, or the planted control with its choice).
pub fn matmul_with(
    gpu: &Gpu,
    kernel: &str,
    c: Choice,
    w: &GpuMatrix,
    x: &CudaSlice<f32>,
    n: usize,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    const OP: &str = "mma matmul";
    need(OP, "x", x.len(), n * w.cols())?;
    need(OP, "y", y.len(), n * w.rows())?;
    if !w.layout().is_mma() {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!("{:?} {:?}: not in the mma tiles", w.format(), w.layout()),
        });
    }
    if !c.fits(n, w.cols()) {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!("{n} x rows of {} columns do not fit the staging", w.cols()),
        });
    }
    if n == 0 || w.rows() == 0 {
        return Ok(());
    }
    let (n_, rows, cols) = (i32_of(OP, "n", n)?, w.rows() as i32, w.cols() as i32);
    let mut b = gpu.launcher(&entry_for(kernel, w.layout()))?;
    b.arg(w.bytes())
        .arg(x)
        .arg(y)
        .arg(&n_)
        .arg(&rows)
        .arg(&cols);
    // SAFETY: the kernels' signature is (u8*, f32*, f32*, i32, i32, i32); the buffers hold the
    // elements they read and write (checked above; the tiles were made for this shape).
    unsafe {
        b.go(
            launch(c, c.x_rows(), w.rows(), w.cols(), n),
            "launching mma matmul",
        )
    }
}

/// x split once for the tensor cores' products: each row's bf16 parts in the B fragments'
/// order and its groups' sums X (rows of any width up to its own, packed), taken on the
/// tensor cores as the products take them in place, so that [`matmul_split`] gives
/// [`matmul`]'s bits. Made by [`split`] or by the norm that
/// writes x ([`crate::ops::residual_rms_norm`]).
pub struct SplitX {
    pub(crate) parts: CudaSlice<u32>,
    pub(crate) sums: CudaSlice<f32>,
    rows: usize,
    cols: usize,
}

impl SplitX {
    /// Room for `rows` rows of `cols` columns (a multiple of [`GROUP`]).
    pub fn new(gpu: &Gpu, rows: usize, cols: usize) -> Result<SplitX> {
        if !cols.is_multiple_of(GROUP) || cols == 0 {
            return Err(CudaError::Shape {
                op: "mma split",
                detail: format!("{cols} columns: the split takes whole 64-column groups"),
            });
        }
        Ok(SplitX {
            parts: gpu.zeros::<u32>(rows * cols)?,
            sums: gpu.zeros::<f32>(rows * (cols / GROUP))?,
            rows,
            cols,
        })
    }

    /// Columns of a row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Whether it holds `n` rows of `cols` columns (whole groups, at most its own).
    pub fn holds(&self, n: usize, cols: usize) -> bool {
        n <= self.rows && cols <= self.cols && cols.is_multiple_of(GROUP)
    }

    /// Whether the split products of `w` may read it for `n` rows: `w` in the mma tiles, and
    /// this the split of rows of exactly `w`'s columns.
    pub(crate) fn serves(&self, w: &GpuMatrix, n: usize) -> bool {
        w.layout().is_mma() && self.cols == w.cols() && self.holds(n, w.cols())
    }

    /// An error unless it holds `n` rows of `cols` columns.
    pub(crate) fn check(&self, op: &'static str, n: usize, cols: usize) -> Result<()> {
        match self.holds(n, cols) {
            true => Ok(()),
            false => Err(CudaError::Shape {
                op,
                detail: format!(
                    "{n} rows of {cols}: the split holds {} of {}",
                    self.rows, self.cols
                ),
            }),
        }
    }
}

/// `s` = the split of `x`'s first `n` rows (`s.cols()` columns each).
pub fn split(gpu: &Gpu, x: &CudaSlice<f32>, n: usize, s: &mut SplitX) -> Result<()> {
    split_with(gpu, "tf_mma_split", x, n, s)
}

/// [`split`] through `kernel` (it, or the planted control [`PLANT_SPLIT_SUMS`]).
pub fn split_with(
    gpu: &Gpu,
    kernel: &str,
    x: &CudaSlice<f32>,
    n: usize,
    s: &mut SplitX,
) -> Result<()> {
    const OP: &str = "mma split";
    let cols = s.cols;
    s.check(OP, n, cols)?;
    need(OP, "x", x.len(), n * cols)?;
    if n == 0 {
        return Ok(());
    }
    let (n_, cols_) = (i32_of(OP, "n", n)?, i32_of(OP, "cols", cols)?);
    let mut b = gpu.launcher(kernel)?;
    b.arg(x)
        .arg(&mut s.parts)
        .arg(&mut s.sums)
        .arg(&n_)
        .arg(&cols_);
    let cfg = LaunchConfig {
        grid_dim: ((cols / GROUP).div_ceil(4) as u32, n.div_ceil(8) as u32, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: (f32*, uint4*, f32*, i32, i32); x holds n rows of cols, the split room for them
    // (checked above): a warp a (group, 8 rows), 4 groups a block.
    unsafe { b.go(cfg, "launching the mma split") }
}

/// [`matmul`] of x split once ([`SplitX`], its first `n` rows), the launcher's tiles a block:
/// the same bits.
pub fn matmul_split(
    gpu: &Gpu,
    w: &GpuMatrix,
    s: &SplitX,
    n: usize,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    matmul_split_with(gpu, tiles_a_block(w.rows(), n), w, s, n, y)
}

/// [`matmul_split`] with `rt` (1 or 2) tiles a block.
pub fn matmul_split_with(
    gpu: &Gpu,
    rt: usize,
    w: &GpuMatrix,
    s: &SplitX,
    n: usize,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    let tiles = w.rows().div_ceil(16);
    matmul_split_span(gpu, rt, w, s, n, y, 0..tiles, Blocks::Every, Tail::Plain)
}

/// What a split product does besides storing y, and whether its split has sums.
pub enum Tail<'a> {
    /// Nothing more; its split's sums were made.
    Plain,
    /// A product of at most four rows also makes relu² of its outputs (`act`) and their split
    /// (without sums) as it stores them: `tf_moe_relu2_split`'s values, one kernel fewer.
    Relu2(&'a mut CudaSlice<f32>, &'a mut SplitX),
    /// Its split's sums were not made (a [`Tail::Relu2`]'s): X summed in place, the same bits.
    SumsInPlace,
}

impl Tail<'_> {
    /// `kernel`'s entry for this tail (`_relu2`, `_xin`).
    pub(crate) fn entry(&self, kernel: &str) -> String {
        match self {
            Tail::Plain => kernel.to_string(),
            Tail::Relu2(..) => format!("{kernel}_relu2"),
            Tail::SumsInPlace => format!("{kernel}_xin"),
        }
    }

    /// An error unless a product of `n` rows of x (`four`: four rows a block) into `rows`
    /// outputs, `slots` rows of them, may take this tail.
    pub(crate) fn check(
        &self,
        op: &'static str,
        four: bool,
        rows: usize,
        slots: usize,
    ) -> Result<()> {
        match self {
            Tail::Plain => Ok(()),
            Tail::SumsInPlace if four => Ok(()),
            Tail::Relu2(act, acts) if four && rows.is_multiple_of(GROUP) => {
                acts.check(op, slots, rows)?;
                need(op, "act", act.len(), slots * rows)
            }
            _ => Err(CudaError::Shape {
                op,
                detail: format!("no entry takes this tail at {slots} rows of {rows}"),
            }),
        }
    }
}

/// Whether one-row products followed by relu² make it themselves, for the routed experts and
/// for the shared expert: their up products take [`Tail::Relu2`], their down products
/// [`Tail::SumsInPlace`]. The routed experts' by default (docs/perf.md, session 50: -2.4% a
/// Bolt step on an H100; the shared expert's lost 5%); `TF_CUDA_RELU2_FOLD=0` neither, `=1`
/// both, `=shared` the shared expert's alone.
pub fn relu2_fold() -> (bool, bool) {
    static ON: std::sync::OnceLock<(bool, bool)> = std::sync::OnceLock::new();
    *ON.get_or_init(|| match std::env::var("TF_CUDA_RELU2_FOLD").as_deref() {
        Ok("0") => (false, false),
        Ok("1") => (true, true),
        Ok("shared") => (false, true),
        _ => (true, false),
    })
}

/// How many blocks a split product launches; where fewer than its tile groups, each takes
/// several in turn (the same bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocks {
    /// A block a group of `rt` tiles.
    Every,
    /// At most as many as the GPU holds at once, so none waits for a slot.
    OneWave,
    /// At most this many, leaving the other SMs to what runs beside.
    AtMost(usize),
}

/// [`matmul_split_with`] of only the row tiles `span` (16 rows each; y's other rows are left
/// as they are): the same bits as the whole product's. The span starts at a multiple of `rt`
/// and ends at one or at the last tile. `tail`: what else it does as it stores.
#[allow(clippy::too_many_arguments)]
pub fn matmul_split_span(
    gpu: &Gpu,
    rt: usize,
    w: &GpuMatrix,
    s: &SplitX,
    n: usize,
    y: &mut CudaSlice<f32>,
    span: std::ops::Range<usize>,
    blocks: Blocks,
    tail: Tail,
) -> Result<()> {
    const OP: &str = "mma matmul (split x)";
    s.check(OP, n, w.cols())?;
    need(OP, "y", y.len(), n * w.rows())?;
    tail.check(OP, split_rows_a_block(n) == 4, w.rows(), n)?;
    if !w.layout().is_mma() {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!("{:?} {:?}: not in the mma tiles", w.format(), w.layout()),
        });
    }
    let rt = rt.clamp(1, 2);
    let tiles = w.rows().div_ceil(16);
    let aligned = |t: usize| t.is_multiple_of(rt) || t == tiles;
    if span.start > span.end || span.end > tiles || !aligned(span.start) || !aligned(span.end) {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!("tiles {span:?} of {tiles} at {rt} a block"),
        });
    }
    if n == 0 || span.is_empty() {
        return Ok(());
    }
    let kernel = tail.entry(split_kernel(rt, n));
    launch_split(
        gpu,
        &entry_for(&kernel, w.layout()),
        rt,
        w,
        s,
        n,
        y,
        span,
        blocks,
        tail,
    )
}

/// The one-row split product's loads alone (kernels/mma.cu, for tf-cuda-mmbench only): what its
/// memory side takes without the arithmetic; then without x's parts, the codes and scale pairs
/// alone, the codes alone.
pub const LOADS_PROBES: [&str; 4] = [
    "tf_probe_mma_loads_b16",
    "tf_probe_mma_loads_nox_b16",
    "tf_probe_mma_loads_scales_b16",
    "tf_probe_mma_loads_codes_b16",
];

/// [`LOADS_PROBES`]`[probe]` on compact tiles, launched as [`matmul_split_with`] launches one
/// tile a block at one row of x; y gets meaningless values.
pub fn loads_probe(
    gpu: &Gpu,
    w: &GpuMatrix,
    probe: usize,
    s: &SplitX,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    const OP: &str = "mma loads probe";
    s.check(OP, 1, w.cols())?;
    need(OP, "y", y.len(), w.rows())?;
    if w.layout() != Layout::MmaTilesB16 {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!("{:?}: the probe reads the compact tiles", w.layout()),
        });
    }
    let tiles = w.rows().div_ceil(16);
    launch_split(
        gpu,
        LOADS_PROBES[probe],
        1,
        w,
        s,
        1,
        y,
        0..tiles,
        Blocks::Every,
        Tail::Plain,
    )
}

/// The plain read probes (kernels/mma.cu, for tf-cuda-mmbench only), by loads a thread in flight.
pub const STREAM_PROBES: [(usize, &str); 5] = [
    (1, "tf_probe_stream_d1"),
    (2, "tf_probe_stream_d2"),
    (4, "tf_probe_stream_d4"),
    (8, "tf_probe_stream_d8"),
    (16, "tf_probe_stream_d16"),
];

/// Reads `w`'s bytes (whole uint4s) with [`STREAM_PROBES`]`[probe]`, 256 threads a block; `out`
/// (a u32 a block) is written only where a fold comes out at a value no load is likely to give.
pub fn stream_probe(
    gpu: &Gpu,
    w: &GpuMatrix,
    probe: usize,
    out: &mut CudaSlice<u32>,
) -> Result<()> {
    const OP: &str = "plain read probe";
    let (depth, kernel) = STREAM_PROBES[probe];
    let n = (w.storage_bytes() / 16) as u64;
    // A thread a `depth` of the uint4s.
    let cfg = grid((n as usize).div_ceil(depth), 256);
    need(OP, "out", out.len(), cfg.grid_dim.0 as usize)?;
    let mut b = gpu.launcher(kernel)?;
    b.arg(w.bytes()).arg(&n).arg(out);
    // SAFETY: (uint4*, u64, u32*); the matrix holds n whole uint4 and out a u32 a block.
    unsafe { b.go(cfg, "launching the plain read probe") }
}

/// The tile code probes (kernels/mma.cu, for tf-cuda-mmbench only): one, two and four loads a
/// warp in flight, and two with the tiles' groups read as if stored group-major.
pub const TILE_PROBES: [&str; 4] = [
    "tf_probe_tiles_d1",
    "tf_probe_tiles_d2",
    "tf_probe_tiles_d4",
    "tf_probe_tiles_d2_gmajor",
];

/// Reads `w`'s tile codes with [`TILE_PROBES`]`[probe]`, a block a tile, each block taking
/// `smem` bytes of shared memory (to set the blocks an SM); `out` holds a u32 a tile.
pub fn tiles_probe(
    gpu: &Gpu,
    w: &GpuMatrix,
    probe: usize,
    smem: u32,
    out: &mut CudaSlice<u32>,
) -> Result<()> {
    const OP: &str = "tile codes probe";
    if !w.layout().is_mma() {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!("{:?}: the probe reads the mma tiles", w.layout()),
        });
    }
    let (tiles, groups) = (w.rows().div_ceil(16), w.cols() / 64);
    need(OP, "out", out.len(), tiles)?;
    let cfg = LaunchConfig {
        grid_dim: (tiles as u32, 1, 1),
        block_dim: (32 * WARPS, 1, 1),
        shared_mem_bytes: smem,
    };
    let (t, g) = (tiles as i32, groups as i32);
    let mut b = gpu.launcher(TILE_PROBES[probe])?;
    b.arg(w.bytes()).arg(&t).arg(&g).arg(out);
    // SAFETY: (uint4*, i32, i32, u32*); the tiles hold tiles x groups x 512 bytes of codes
    // first, and out a u32 a tile.
    unsafe { b.go(cfg, "launching the tile codes probe") }
}

/// Launches the split product `kernel` (checked by the caller) over the tiles `span`.
#[allow(clippy::too_many_arguments)]
fn launch_split(
    gpu: &Gpu,
    kernel: &str,
    rt: usize,
    w: &GpuMatrix,
    s: &SplitX,
    n: usize,
    y: &mut CudaSlice<f32>,
    span: std::ops::Range<usize>,
    blocks: Blocks,
    tail: Tail,
) -> Result<()> {
    const OP: &str = "mma matmul (split x)";
    let c = Choice { rt, staged: false };
    let (n_, rows, cols) = (i32_of(OP, "n", n)?, w.rows() as i32, w.cols() as i32);
    let (from, to) = (span.start as i32, span.end as i32);
    let mut cfg = launch(c, split_rows_a_block(n), 16 * span.len(), w.cols(), n);
    let cap = match blocks {
        Blocks::Every => None,
        Blocks::OneWave => {
            Some(gpu.resident_blocks(kernel, cfg.block_dim.0, 0)? * gpu.info().multiprocessors)
        }
        Blocks::AtMost(b) => Some(b),
    };
    if let Some(c) = cap {
        cfg.grid_dim.0 = cfg.grid_dim.0.min(c.max(1) as u32);
    }
    let mut b = gpu.launcher(kernel)?;
    b.arg(w.bytes())
        .arg(&s.parts)
        .arg(&s.sums)
        .arg(y)
        .arg(&n_)
        .arg(&rows)
        .arg(&cols)
        .arg(&from)
        .arg(&to);
    if let Tail::Relu2(act, acts) = tail {
        b.arg(act).arg(&mut acts.parts);
    }
    // SAFETY: (u8*, uint4*, f32*, f32*, i32 x 5), and (f32*, uint4*) after (`_relu2`); the
    // split holds n rows of the matrix's columns, y n rows of its rows and act and its split
    // too (checked above, Tail::check; the tiles were made for this shape), and the span lies
    // within its tiles.
    unsafe { b.go(cfg, "launching mma matmul (split x)") }
}

#[cfg(test)]
mod tests;
