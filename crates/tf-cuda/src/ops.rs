//! Launch wrappers: each checks shapes on the host, then enqueues its kernel on the GPU's
//! stream. Buffers may be longer than a call needs (workspaces sized for the largest round).

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::kv::GpuKv;
use crate::mma::SplitX;
use crate::weights::{geometry_kernel, GpuMatrix};
use cudarc::driver::{CudaSlice, LaunchConfig};

mod attention;
#[cfg(test)]
mod norm_host;
pub(crate) use attention::attend_tiled;
pub use attention::{
    attend, attend_launch_smem, attend_smem_bytes, attend_tile, attend_with, AttnShape,
    ATT_MAX_HEAD_DIM,
};

/// Threads per block of the row kernels.
const THREADS: u32 = 128;

/// Whether `TF_CUDA_TRACE` is set: every launch is then printed to stderr and synchronized, so a
/// failing kernel is named at once (debugging only; slow).
pub(crate) fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("TF_CUDA_TRACE").is_some())
}

/// Prints `what` before a launch when tracing.
pub(crate) fn trace(what: &str) {
    if tracing() {
        eprintln!("tf-cuda: launch {what}");
    }
}

/// Synchronizes after a launch when tracing.
pub(crate) fn traced(gpu: &Gpu, what: &'static str) -> Result<()> {
    if tracing() {
        gpu.synchronize()?;
        eprintln!("tf-cuda: done {what}");
    }
    Ok(())
}

pub(crate) fn need(op: &'static str, what: &str, len: usize, want: usize) -> Result<()> {
    if len < want {
        return Err(CudaError::Shape {
            op,
            detail: format!("{what} holds {len} elements, the call needs {want}"),
        });
    }
    Ok(())
}

pub(crate) fn i32_of(op: &'static str, what: &'static str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| CudaError::Param {
        op,
        what,
        value: v as f64,
        why: "exceeds i32",
    })
}

pub(crate) fn grid(items: usize, per_block: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            (items as u64).div_ceil(per_block as u64).max(1) as u32,
            1,
            1,
        ),
        block_dim: (per_block, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The rows of a round as the kernels see them: each row's stream slot and absolute position,
/// on the host (for checks and RoPE angles) and on the device. Allocated once for `max_rows`.
pub struct GpuRows {
    slots_host: Vec<i32>,
    pos_host: Vec<i32>,
    pub(crate) slots: CudaSlice<i32>,
    pub(crate) pos: CudaSlice<i32>,
    max_rows: usize,
}

impl GpuRows {
    /// Buffers for rounds of up to `max_rows` rows.
    pub fn new(gpu: &Gpu, max_rows: usize) -> Result<GpuRows> {
        Ok(GpuRows {
            slots_host: Vec::with_capacity(max_rows),
            pos_host: Vec::with_capacity(max_rows),
            slots: gpu.zeros(max_rows)?,
            pos: gpu.zeros(max_rows)?,
            max_rows,
        })
    }

    /// Sets this round's rows (`slots[i]`, `pos[i]`), checked against the cache, and uploads them.
    pub fn set(&mut self, gpu: &Gpu, kv: &GpuKv, slots: &[usize], pos: &[usize]) -> Result<()> {
        if slots.len() != pos.len() || slots.len() > self.max_rows {
            return Err(CudaError::Shape {
                op: "rows",
                detail: format!(
                    "{} slots and {} positions for at most {} rows",
                    slots.len(),
                    pos.len(),
                    self.max_rows
                ),
            });
        }
        self.slots_host.clear();
        self.pos_host.clear();
        for (&s, &p) in slots.iter().zip(pos) {
            self.slots_host.push(i32_of("rows", "slot", s)?);
            self.pos_host.push(i32_of("rows", "position", p)?);
        }
        kv.check_rows(&self.slots_host, &self.pos_host)?;
        gpu.write(&self.slots_host, &mut self.slots)?;
        gpu.write(&self.pos_host, &mut self.pos)
    }

    /// Rows of the current round.
    pub fn len(&self) -> usize {
        self.slots_host.len()
    }

    /// Whether the round is empty.
    pub fn is_empty(&self) -> bool {
        self.slots_host.is_empty()
    }
}

/// `y[i, j] = Σ_k x[i, k] · W[j, k]` for `i < n` (`x` is `[n, cols]`, `y` is `[n, rows]`):
/// the tensor cores' product for a matrix in its tiles ([`crate::mma`]), else `tf_slices` (the
/// GPU's own order) where it serves the matrix, else the CPU's bits.
pub fn matmul(
    gpu: &Gpu,
    w: &GpuMatrix,
    x: &CudaSlice<f32>,
    n: usize,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    if w.layout().is_mma() {
        return crate::mma::matmul(gpu, w, x, n, y);
    }
    match crate::slices::kernel(w.format(), w.cols()) {
        Some(k) => crate::slices::matmul_with(gpu, k, w, x, n, y),
        None => matmul_with(gpu, w.format().matmul_kernel(), w, x, n, y),
    }
}

/// [`matmul`] through a named kernel (the planted controls use this).
pub fn matmul_with(
    gpu: &Gpu,
    kernel: &'static str,
    w: &GpuMatrix,
    x: &CudaSlice<f32>,
    n: usize,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    let tpr = w.format().matmul_threads_per_row(w.rows(), n);
    matmul_geometry(gpu, kernel, w, x, n, y, tpr)
}

/// [`matmul_with`] with `threads_per_row` threads a weight row (16, or 4 for the formats of
/// `tf_mmq`): the same bits either way; the suite and the benchmark run both.
pub fn matmul_geometry(
    gpu: &Gpu,
    kernel: &'static str,
    w: &GpuMatrix,
    x: &CudaSlice<f32>,
    n: usize,
    y: &mut CudaSlice<f32>,
    threads_per_row: usize,
) -> Result<()> {
    const OP: &str = "matmul";
    w.need_rows(OP)?;
    need(OP, "x", x.len(), n * w.cols())?;
    need(OP, "y", y.len(), n * w.rows())?;
    if n == 0 || w.rows() == 0 {
        return Ok(());
    }
    let (n_, rows, cols) = (i32_of(OP, "n", n)?, w.rows() as i32, w.cols() as i32);
    if threads_per_row != 16 && !(threads_per_row == 4 && w.format().has_mmq()) {
        return Err(CudaError::Param {
            op: OP,
            what: "threads per row",
            value: threads_per_row as f64,
            why: "the format's kernel takes 16, or 4 (tf_mmq formats)",
        });
    }
    let mut b = gpu.launcher(&geometry_kernel(kernel, threads_per_row))?;
    b.arg(w.bytes())
        .arg(x)
        .arg(y)
        .arg(&n_)
        .arg(&rows)
        .arg(&cols);
    let threads = w.rows() * threads_per_row;
    // SAFETY: the kernel's signature is (u8*, f32*, f32*, i32, i32, i32); the buffers hold the
    // elements it reads and writes (checked above; the weight was validated at upload).
    unsafe { b.go(grid(threads, THREADS), "launching matmul") }?;
    Ok(())
}

/// `out[i, :] = W[tokens[i], :]` decoded, for `i < n`.
pub fn embed(
    gpu: &Gpu,
    w: &GpuMatrix,
    tokens: &CudaSlice<i32>,
    n: usize,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    const OP: &str = "embedding";
    w.need_rows(OP)?;
    need(OP, "tokens", tokens.len(), n)?;
    need(OP, "out", out.len(), n * w.cols())?;
    if n == 0 {
        return Ok(());
    }
    let cols = w.cols() as i32;
    let mut b = gpu.launcher(w.format().embed_kernel())?;
    b.arg(w.bytes()).arg(tokens).arg(out).arg(&cols);
    let cfg = LaunchConfig {
        grid_dim: (n as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: (u8*, i32*, f32*, i32); token ids are checked by the caller against the rows.
    unsafe { b.go(cfg, "launching embedding") }?;
    Ok(())
}

/// RMSNorm of `n` rows of width `gain.len()`: `y = gain * (x * (1 / sqrt(dot(x, x) / w + eps)))`.
pub fn rms_norm(
    gpu: &Gpu,
    x: &CudaSlice<f32>,
    gain: &CudaSlice<f32>,
    eps: f32,
    n: usize,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    rms_norm_with(gpu, "tf_rms_norm", x, gain, eps, n, y)
}

/// [`rms_norm`] through a named kernel.
pub fn rms_norm_with(
    gpu: &Gpu,
    kernel: &'static str,
    x: &CudaSlice<f32>,
    gain: &CudaSlice<f32>,
    eps: f32,
    n: usize,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    norm(gpu, kernel, x, Residual::None, gain, eps, n, y, None)
}

/// What a norm adds to x first, writing the sum back: nothing, `o`, or `o + s` (`x + (o + s)`:
/// the bits of [`add_inplace`] of `s` into `o`, then of `o` into `x`).
#[derive(Clone, Copy)]
pub enum Residual<'a> {
    /// x as it is.
    None,
    /// `x = x + o`.
    Add(&'a CudaSlice<f32>),
    /// `x = x + (o + s)`.
    AddSum(&'a CudaSlice<f32>, &'a CudaSlice<f32>),
}

impl<'a> Residual<'a> {
    /// What is added, in the kernel's argument order (o, then s).
    fn addends(self) -> impl Iterator<Item = &'a CudaSlice<f32>> {
        let (o, s) = match self {
            Residual::None => (None, None),
            Residual::Add(o) => (Some(o), None),
            Residual::AddSum(o, s) => (Some(o), Some(s)),
        };
        o.into_iter().chain(s)
    }
}

/// The residual add `res` and the norm after it in one launch, `y = rms_norm(x)` (the bits of
/// [`add_inplace`] then [`rms_norm`]), for `n` rows of `gain.len()` elements; with `split`, the
/// rows of y also split for the tensor cores' products (`crate::mma::SplitX`: the bits
/// `crate::mma::split` gives from `y`).
#[allow(clippy::too_many_arguments)]
pub fn residual_rms_norm(
    gpu: &Gpu,
    x: &mut CudaSlice<f32>,
    res: Residual,
    gain: &CudaSlice<f32>,
    eps: f32,
    n: usize,
    y: &mut CudaSlice<f32>,
    split: Option<&mut SplitX>,
) -> Result<()> {
    let kernel = match (res, split.is_some()) {
        (Residual::None, false) => "tf_rms_norm",
        (Residual::None, true) => "tf_rms_norm_split",
        (Residual::Add(_), false) => "tf_add_rms_norm",
        (Residual::Add(_), true) => "tf_add_rms_norm_split",
        (Residual::AddSum(..), false) => "tf_add2_rms_norm",
        (Residual::AddSum(..), true) => "tf_add2_rms_norm_split",
    };
    residual_rms_norm_with(gpu, kernel, x, res, gain, eps, n, y, split)
}

/// [`residual_rms_norm`] through a named kernel.
#[allow(clippy::too_many_arguments)]
pub fn residual_rms_norm_with(
    gpu: &Gpu,
    kernel: &'static str,
    x: &mut CudaSlice<f32>,
    res: Residual,
    gain: &CudaSlice<f32>,
    eps: f32,
    n: usize,
    y: &mut CudaSlice<f32>,
    split: Option<&mut SplitX>,
) -> Result<()> {
    if let Some(s) = &split {
        s.check("rms_norm (split)", n, gain.len())?;
    }
    // The kernel writes x through the pointer it is given.
    norm(gpu, kernel, x, res, gain, eps, n, y, split)
}

/// Blocks a row for [`residual_rms_norm_wide`] in a round of `n` rows of `width` elements split
/// by their norm, or `None` for the one-block norm: 16 (`TF_CUDA_NORM_WIDE=B` sets it, 0 turns
/// it off) in rounds of at most [`WIDE_NORM_ROWS`] rows whose row the kernel holds.
pub fn wide_norm_blocks(width: usize, n: usize) -> Option<usize> {
    static BLOCKS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let blocks = *BLOCKS
        .get_or_init(|| std::env::var("TF_CUDA_NORM_WIDE").map_or(16, |v| v.parse().unwrap_or(16)));
    let groups = width / crate::mma::GROUP;
    let fits = width.is_multiple_of(crate::mma::GROUP) && width <= WIDE_NORM_WIDTH;
    (blocks > 0 && n <= WIDE_NORM_ROWS && fits).then(|| blocks.min(groups))
}

/// Most rows a round takes the wide norm for ([`wide_norm_blocks`]).
pub const WIDE_NORM_ROWS: usize = 4;

/// Widest row (or gated group) a wide norm holds: `TF_HOLD` (kernels/common.cuh) elements a
/// thread, at most [`WIDE_NORM_THREADS`] threads.
pub(crate) const WIDE_NORM_WIDTH: usize = 8 * WIDE_NORM_THREADS;

/// Most threads a wide norm's block has: their registers (up to 90 a thread for sm_90) leave
/// no room for 1024.
pub(crate) const WIDE_NORM_THREADS: usize = 512;

/// Refuses a wide norm's launch of `threads` threads and `smem` bytes that no SM can hold
/// (its registers as compiled for this device), before the driver would.
pub(crate) fn wide_norm_launches(
    gpu: &Gpu,
    op: &'static str,
    kernel: &str,
    threads: usize,
    smem: usize,
) -> Result<()> {
    match gpu.resident_blocks(kernel, threads as u32, smem as u32)? {
        0 => Err(CudaError::Shape {
            op,
            detail: format!("{kernel}: no SM holds a block of {threads} threads ({smem} bytes)"),
        }),
        _ => Ok(()),
    }
}

/// [`residual_rms_norm`] with `split`, each row over `blocks` blocks (kernels/norm_split.cu's
/// `_wide` entries; `blocks` at most its 64-column groups): every block sums the whole row's
/// squares in the same order and writes its share of y and the split, so the bits are the same
/// and the chain after the sum is shorter. x is read from `x` and, where there is a residual
/// add, its sum written to `x_out` (another buffer: a block may read a row another is writing).
#[allow(clippy::too_many_arguments)]
pub fn residual_rms_norm_wide(
    gpu: &Gpu,
    x: &CudaSlice<f32>,
    x_out: &mut CudaSlice<f32>,
    res: Residual,
    gain: &CudaSlice<f32>,
    eps: f32,
    n: usize,
    y: &mut CudaSlice<f32>,
    split: &mut crate::mma::SplitX,
    blocks: usize,
) -> Result<()> {
    const OP: &str = "rms_norm (wide)";
    let width = gain.len();
    let groups = width / crate::mma::GROUP;
    split.check(OP, n, width)?;
    if width > WIDE_NORM_WIDTH || blocks == 0 || blocks > groups {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!(
                "{blocks} blocks a row of {width}: one to a block a group, rows of at most \
                 {WIDE_NORM_WIDTH}"
            ),
        });
    }
    need(OP, "x", x.len(), n * width)?;
    need(OP, "x out", x_out.len(), n * width)?;
    for o in res.addends() {
        need(OP, "o", o.len(), n * width)?;
    }
    need(OP, "y", y.len(), n * width)?;
    if n == 0 {
        return Ok(());
    }
    let kernel = match res {
        Residual::None => "tf_rms_norm_split_wide",
        Residual::Add(_) => "tf_add_rms_norm_split_wide",
        Residual::AddSum(..) => "tf_add2_rms_norm_split_wide",
    };
    let w = i32_of(OP, "width", width)?;
    let mut b = gpu.launcher(kernel)?;
    b.arg(x);
    if !matches!(res, Residual::None) {
        b.arg(x_out);
    }
    for o in res.addends() {
        b.arg(o);
    }
    b.arg(gain)
        .arg(y)
        .arg(&mut split.parts)
        .arg(&mut split.sums);
    b.arg(&w).arg(&eps);
    let threads = width
        .div_ceil(WIDE_NORM_WIDTH / WIDE_NORM_THREADS)
        .div_ceil(32)
        * 32;
    let floats = 16 * (width / 16 + 4) + crate::mma::GROUP * groups.div_ceil(blocks);
    wide_norm_launches(gpu, OP, kernel, threads, 4 * floats)?;
    let cfg = LaunchConfig {
        grid_dim: (blocks as u32, n as u32, 1),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: 4 * floats as u32,
    };
    // SAFETY: (f32*, [f32*, f32*, [f32*,]] f32*, f32*, uint4*, f32*, i32, f32); lengths
    // checked above, the row held by the block's threads.
    unsafe { b.go(cfg, "launching rms_norm (wide)") }?;
    Ok(())
}

/// [`matmul`] of x, reading `split` (x split by the norm that wrote it) where the tensor
/// cores' product takes `w` and the split holds the call: the same bits either way.
pub fn matmul_of(
    gpu: &Gpu,
    w: &GpuMatrix,
    x: &CudaSlice<f32>,
    split: Option<&SplitX>,
    n: usize,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    match split {
        Some(s) if s.serves(w, n) => crate::mma::matmul_split(gpu, w, s, n, y),
        _ => matmul(gpu, w, x, n, y),
    }
}

/// Widest row a split norm splits from its copy in shared memory (`TF_NORM_STASH` in
/// kernels/norm_split.cu).
pub(crate) const NORM_STASH: usize = 6144;

/// A norm of `n` rows of `gain.len()` elements: the kernel's arguments are x, then what the
/// residual add adds to it ([`Residual::addends`]), then gain, y, the split's parts and sums
/// where it splits its rows, width and eps.
#[allow(clippy::too_many_arguments)]
fn norm(
    gpu: &Gpu,
    kernel: &'static str,
    x: &CudaSlice<f32>,
    res: Residual,
    gain: &CudaSlice<f32>,
    eps: f32,
    n: usize,
    y: &mut CudaSlice<f32>,
    split: Option<&mut SplitX>,
) -> Result<()> {
    const OP: &str = "rms_norm";
    let width = gain.len();
    need(OP, "x", x.len(), n * width)?;
    for o in res.addends() {
        need(OP, "o", o.len(), n * width)?;
    }
    need(OP, "y", y.len(), n * width)?;
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(CudaError::Param {
            op: OP,
            what: "eps",
            value: eps as f64,
            why: "must be finite and >= 0",
        });
    }
    if n == 0 {
        return Ok(());
    }
    let w = i32_of(OP, "width", width)?;
    let mut b = gpu.launcher(kernel)?;
    b.arg(x);
    for o in res.addends() {
        b.arg(o);
    }
    b.arg(gain).arg(y);
    let stash = split.is_some() && width <= NORM_STASH;
    if let Some(s) = split {
        b.arg(&mut s.parts).arg(&mut s.sums);
    }
    b.arg(&w).arg(&eps);
    // A block a row: its loads all in flight at once (tf_block_sumsq16), then 16 chains.
    let cfg = LaunchConfig {
        grid_dim: (n as u32, 1, 1),
        block_dim: (1024, 1, 1),
        shared_mem_bytes: if stash { 4 * width as u32 } else { 0 },
    };
    // SAFETY: (f32*, [f32*, [f32*,]] f32*, f32*, [uint4*, f32*,] i32, f32); lengths checked
    // above (the split's by its callers).
    unsafe { b.go(cfg, "launching rms_norm") }?;
    Ok(())
}

/// Which elements RoPE rotates together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pairing {
    /// `(2i, 2i + 1)` (GPT-J / GGUF llama).
    Interleaved = 0,
    /// `(i, i + rotary_dim / 2)` (Hugging Face `rotate_half`).
    Half = 1,
}

/// RoPE in place on `x` (`[n, heads * head_dim]`) with per-row angles `cs` (`[n, rotary_dim]`:
/// the row's `rotary_dim / 2` cosines, then its sines, as tf_kernels' `Rope::angles_into` gives).
#[allow(clippy::too_many_arguments)]
pub fn rope(
    gpu: &Gpu,
    x: &mut CudaSlice<f32>,
    cs: &CudaSlice<f32>,
    n: usize,
    heads: usize,
    head_dim: usize,
    rotary_dim: usize,
    pairing: Pairing,
) -> Result<()> {
    const OP: &str = "rope";
    if rotary_dim > head_dim || !rotary_dim.is_multiple_of(2) {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!("rotary_dim {rotary_dim} must be even and <= head_dim {head_dim}"),
        });
    }
    need(OP, "x", x.len(), n * heads * head_dim)?;
    need(OP, "angles", cs.len(), n * rotary_dim)?;
    let half = rotary_dim / 2;
    if n == 0 || heads == 0 || half == 0 {
        return Ok(());
    }
    let items = n * heads * half;
    let (n_, h_, hd_, half_, p_) = (
        i32_of(OP, "n", n)?,
        i32_of(OP, "heads", heads)?,
        i32_of(OP, "head_dim", head_dim)?,
        half as i32,
        pairing as i32,
    );
    i32_of(OP, "items", items)?;
    let mut b = gpu.launcher("tf_rope")?;
    b.arg(x)
        .arg(cs)
        .arg(&n_)
        .arg(&h_)
        .arg(&hd_)
        .arg(&half_)
        .arg(&p_);
    // SAFETY: (f32*, f32*, i32 x5); lengths checked above.
    unsafe { b.go(grid(items, THREADS), "launching rope") }?;
    Ok(())
}

/// Element-wise kernel over `len` elements with (in, in, out) or (inout, in) float buffers.
fn elementwise(
    gpu: &Gpu,
    kernel: &'static str,
    bufs: &mut [&mut CudaSlice<f32>],
    ro: &[&CudaSlice<f32>],
    len: usize,
) -> Result<()> {
    let len_ = i32_of(kernel_op(kernel), "len", len)?;
    if len == 0 {
        return Ok(());
    }
    let mut b = gpu.launcher(kernel)?;
    for r in ro {
        b.arg(*r);
    }
    for w in bufs.iter_mut() {
        b.arg(&mut **w);
    }
    b.arg(&len_);
    // SAFETY: each element-wise kernel takes its read-only buffers, then its written buffer,
    // then the length; callers checked every buffer holds `len` elements.
    unsafe { b.go(grid(len, 256), "launching an element-wise kernel") }?;
    Ok(())
}

fn kernel_op(kernel: &'static str) -> &'static str {
    kernel.trim_start_matches("tf_")
}

/// SwiGLU: `out[e] = silu(gate[e]) * up[e]` for the first `len` elements.
pub fn silu_mul(
    gpu: &Gpu,
    gate: &CudaSlice<f32>,
    up: &CudaSlice<f32>,
    out: &mut CudaSlice<f32>,
    len: usize,
) -> Result<()> {
    need("silu_mul", "gate", gate.len(), len)?;
    need("silu_mul", "up", up.len(), len)?;
    need("silu_mul", "out", out.len(), len)?;
    elementwise(gpu, "tf_silu_mul", &mut [out], &[gate, up], len)
}

/// Residual add: `acc[e] += x[e]` for the first `len` elements.
pub fn add_inplace(
    gpu: &Gpu,
    acc: &mut CudaSlice<f32>,
    x: &CudaSlice<f32>,
    len: usize,
) -> Result<()> {
    need("add_inplace", "acc", acc.len(), len)?;
    need("add_inplace", "x", x.len(), len)?;
    // The kernel's signature is (acc, x, len): the written buffer comes first.
    let len_ = i32_of("add_inplace", "len", len)?;
    if len == 0 {
        return Ok(());
    }
    let mut b = gpu.launcher("tf_add_inplace")?;
    b.arg(acc).arg(x).arg(&len_);
    // SAFETY: (f32*, f32*, i32); lengths checked above.
    unsafe { b.go(grid(len, 256), "launching add_inplace") }?;
    Ok(())
}

/// `out[e] = exp(x[e])` with the contract exp (a probe for the contract suite).
pub fn exp_map(gpu: &Gpu, x: &CudaSlice<f32>, out: &mut CudaSlice<f32>, len: usize) -> Result<()> {
    need("exp_map", "x", x.len(), len)?;
    need("exp_map", "out", out.len(), len)?;
    elementwise(gpu, "tf_exp_map", &mut [out], &[x], len)
}

/// Writes each row's key and value (`k`, `v`: `[n, kv_heads * head_dim]`) into its slot at its
/// position in `layer`.
pub fn kv_append(
    gpu: &Gpu,
    k: &CudaSlice<f32>,
    v: &CudaSlice<f32>,
    kv: &mut GpuKv,
    rows: &GpuRows,
    layer: usize,
) -> Result<()> {
    const OP: &str = "kv_append";
    let n = rows.len();
    let rw = kv.row_width();
    need(OP, "k", k.len(), n * rw)?;
    need(OP, "v", v.len(), n * rw)?;
    if layer >= kv.layers() {
        return Err(CudaError::Param {
            op: OP,
            what: "layer",
            value: layer as f64,
            why: "beyond the cache's layers",
        });
    }
    if n == 0 {
        return Ok(());
    }
    let (nl, l, cap, rw_) = (
        kv.layers() as i32,
        layer as i32,
        kv.capacity() as i32,
        i32_of(OP, "row width", rw)?,
    );
    let mut b = gpu.launcher("tf_kv_append")?;
    b.arg(k)
        .arg(v)
        .arg(&mut kv.k)
        .arg(&mut kv.v)
        .arg(&rows.slots)
        .arg(&rows.pos)
        .arg(&nl)
        .arg(&l)
        .arg(&cap)
        .arg(&rw_);
    let cfg = LaunchConfig {
        grid_dim: (n as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: (f32*, f32*, f32*, f32*, i32*, i32*, i32 x4); slots and positions were checked
    // against the pools by GpuRows::set.
    unsafe { b.go(cfg, "launching kv_append") }?;
    Ok(())
}
