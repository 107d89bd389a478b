//! Launch wrappers of the fused decode kernels (kernels/fused.cu): a matmul with its input
//! transform (none, RMSNorm, SwiGLU) and epilogue (store, residual add, SwiGLU), the `[q|k|v]`
//! projection with RoPE and the KV append, and RoPE + KV append alone.

use crate::device::{fused_kernel_name, mmg_kernel_name, Gpu, MMG_FORMATS};
use crate::error::{CudaError, Result};
use crate::kv::GpuKv;
use crate::ops::{i32_of, need, GpuRows, Pairing};
use crate::weights::{GpuFormat, GpuMatrix};
use cudarc::driver::{CudaSlice, LaunchConfig};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Weight rows per block of the fused matmul (kernels/fused.cu `MMF_ROWS`).
const MMF_ROWS: usize = 8;
/// Threads per block of the fused matmul.
const MMF_THREADS: u32 = 128;
/// Activation rows per tile (kernels/matmul.cu `MM_RT`).
const MM_RT: usize = 4;
/// Activation rows from which the fused matmuls run as tiled products (kernels/mmg.cu, the
/// same bits; docs/perf.md has the measurement behind it).
pub const MMG_MIN_ROWS: usize = 12;
/// The row count in force ([`TiledFromRows`]).
static TILED_FROM: AtomicUsize = AtomicUsize::new(MMG_MIN_ROWS);

/// While alive, the fused matmuls run as tiled products from `n` activation rows on (1: always,
/// `usize::MAX`: never) instead of [`MMG_MIN_ROWS`]; dropping it restores the count before it.
/// How the contract suite checks both kernels at every row count and mmbench times them (both
/// give the same bits).
#[must_use = "the row count is restored when the guard drops"]
pub struct TiledFromRows {
    before: usize,
}

impl TiledFromRows {
    /// Tiled products from `n` rows until the guard drops.
    pub fn new(n: usize) -> TiledFromRows {
        TiledFromRows {
            before: TILED_FROM.swap(n, Ordering::Relaxed),
        }
    }
}

impl Drop for TiledFromRows {
    fn drop(&mut self) {
        TILED_FROM.store(self.before, Ordering::Relaxed);
    }
}

/// Activation rows and weight rows per block of the tiled product (kernels/mmg.cu).
const MMG_I: usize = 32;
const MMG_J: usize = 32;
/// Threads per block of the tiled product.
const MMG_THREADS: u32 = 256;

/// Whether a fused matmul of `n` rows of `format` runs as a tiled product.
fn tiled(format: GpuFormat, n: usize) -> bool {
    n >= TILED_FROM.load(Ordering::Relaxed) && MMG_FORMATS.contains(&format.kernel_tag())
}

/// What the fused matmul does to its input rows before the product.
#[derive(Clone, Copy)]
pub enum XForm<'a> {
    /// `x` as is.
    None,
    /// RMSNorm with this gain (`cols` long) and epsilon.
    Norm { gain: &'a CudaSlice<f32>, eps: f32 },
    /// SwiGLU of a fused `[gate | up]` row (`2 * cols` wide): `silu(gate) * up`.
    SiluMul,
}

/// What the fused matmul does with each sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epilogue {
    /// `y = s`.
    Store,
    /// `y = y + s` (the residual add).
    Add,
    /// The weight is a fused `[gate | up]` of `2 h` rows: `y[i, p] = silu(gate) * up` (`y` is
    /// `[n, h]`, the SwiGLU a down projection takes). With [`XForm::Norm`] only.
    SwiGlu,
}

/// Bytes of a row a half-warp stages per chunk (kernels/matmul.cu `MMV_SPAN`).
const MMV_SPAN: usize = 1024;
/// Shared bytes per half-warp's window (kernels/matmul.cu `MMV_STRIDE`).
const MMV_STRIDE: usize = MMV_SPAN + 32;

/// Columns of one chunk of a `format` row (kernels/matmul.cu `tf_mmv_units` whole units).
pub fn chunk_cols(format: GpuFormat) -> usize {
    let unit_elems = match format {
        GpuFormat::Q4K | GpuFormat::Q6K => 256,
        _ => 32,
    };
    let unit_bytes = format.row_bytes(unit_elems);
    (MMV_SPAN - 16) / unit_bytes * unit_elems
}

/// Shared memory bytes of a fused matmul block for `w`: a chunk window per weight row and the
/// tile's inputs for one chunk of columns, whatever the row length.
pub fn fused_smem_bytes(w: &GpuMatrix) -> usize {
    fused_smem_bytes_for(w.format(), w.cols())
}

/// [`fused_smem_bytes`] of a `format` matrix with rows of `cols` elements.
pub fn fused_smem_bytes_for(format: GpuFormat, cols: usize) -> usize {
    MMF_ROWS * MMV_STRIDE + MM_RT * cols.min(chunk_cols(format)) * 4
}

/// `y[i, j] (=|+=) Σ_k xform(x)[i, k] · W[j, k]` for `i < n`, input row `i` at
/// `x[i * x_stride..]`, output rows `w.rows()` wide. Same bits as the separate kernels.
#[allow(clippy::too_many_arguments)]
pub fn matmul_fused(
    gpu: &Gpu,
    w: &GpuMatrix,
    x: &CudaSlice<f32>,
    x_stride: usize,
    xform: XForm,
    epilogue: Epilogue,
    n: usize,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    const OP: &str = "fused matmul";
    let (rows, cols) = (w.rows(), w.cols());
    let in_w = if matches!(xform, XForm::SiluMul) {
        2 * cols
    } else {
        cols
    };
    if x_stride < in_w {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!("x_stride {x_stride} < input width {in_w}"),
        });
    }
    let out_w = if epilogue == Epilogue::SwiGlu {
        if !matches!(xform, XForm::Norm { .. }) || rows % 2 != 0 {
            return Err(CudaError::Shape {
                op: OP,
                detail: format!("the SwiGLU epilogue takes a normed input and an even row count, not {rows} rows"),
            });
        }
        rows / 2
    } else {
        rows
    };
    need(OP, "x", x.len(), (n - n.min(1)) * x_stride + in_w)?;
    need(OP, "y", y.len(), n * out_w)?;
    let smem = fused_smem_bytes(w);
    let limit = gpu.info().smem_per_block;
    if smem > limit {
        return Err(CudaError::Shape { op: OP, detail: format!("[{rows}, {cols}] {:?} needs {smem} bytes of shared memory per block (limit {limit})", w.format()) });
    }
    if n == 0 || rows == 0 {
        return Ok(());
    }
    let (xname, gain, eps) = match xform {
        XForm::None => ("none", None, 0.0f32),
        XForm::Norm { gain, eps } => {
            need(OP, "gain", gain.len(), cols)?;
            if !(eps.is_finite() && eps >= 0.0) {
                return Err(CudaError::Param {
                    op: OP,
                    what: "eps",
                    value: eps as f64,
                    why: "must be finite and >= 0",
                });
            }
            ("norm", Some(gain), eps)
        }
        XForm::SiluMul => ("silu", None, 0.0),
    };
    let ename = match epilogue {
        Epilogue::Store => "store",
        Epilogue::Add => "add",
        Epilogue::SwiGlu => "swiglu",
    };
    let tag = w.format().kernel_tag();
    let many = tiled(w.format(), n);
    let name = if many {
        mmg_kernel_name(tag, xname, ename)
    } else {
        fused_kernel_name(tag, xname, ename)
    };
    let (n_, r_, c_, s_) = (
        i32_of(OP, "n", n)?,
        rows as i32,
        cols as i32,
        i32_of(OP, "x_stride", x_stride)?,
    );
    w.need_rows(OP)?;
    let mut b = gpu.launcher(&name)?;
    b.arg(w.bytes()).arg(x);
    // An unused gain pointer still needs a valid argument: the input itself (never read).
    match gain {
        Some(g) => b.arg(g),
        None => b.arg(x),
    };
    b.arg(&eps).arg(y).arg(&n_).arg(&r_).arg(&c_).arg(&s_);
    let cfg = if many {
        // Blocks of MMG_I activation rows by MMG_J weight rows (SwiGLU: half gate, half up).
        LaunchConfig {
            grid_dim: (
                n_out_rows(epilogue, rows, MMG_J).div_ceil(MMG_J) as u32,
                n.div_ceil(MMG_I) as u32,
                1,
            ),
            block_dim: (MMG_THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    } else {
        // SwiGLU: a block pairs MMF_ROWS / 2 gate rows with their up rows.
        LaunchConfig {
            grid_dim: (
                n_out_rows(epilogue, rows, MMF_ROWS).div_ceil(MMF_ROWS) as u32,
                1,
                1,
            ),
            block_dim: (MMF_THREADS, 1, 1),
            shared_mem_bytes: smem as u32,
        }
    };
    // SAFETY: (u8*, f32*, f32*, f32, f32*, i32 x4) as the kernel declares; buffer lengths and
    // the shared memory size were checked above.
    unsafe { b.go(cfg, "launching a fused matmul") }?;
    Ok(())
}

/// Weight rows the grid covers, in blocks of `block` rows: all of them, or for SwiGLU twice the
/// output columns (each block's gate rows and their up rows).
fn n_out_rows(epilogue: Epilogue, rows: usize, block: usize) -> usize {
    match epilogue {
        Epilogue::SwiGlu => (rows / 2).div_ceil(block / 2) * block,
        _ => rows,
    }
}

/// Where [`matmul_norm_rope_append`] puts its rows: the round's angles and rows, the cache layer.
pub struct RopeAppend<'a> {
    /// Per-row RoPE angles (`[n, head_dim]`: cosines, then sines).
    pub cs: &'a CudaSlice<f32>,
    /// The KV cache the keys and values go into.
    pub kv: &'a mut GpuKv,
    /// The round's slots and positions.
    pub rows: &'a GpuRows,
    /// The layer.
    pub layer: usize,
    /// Query heads.
    pub heads: usize,
    /// Element pairing of the rotation.
    pub pairing: Pairing,
}

/// The `[q | k | v]` projection with its input norm, RoPE (full rotary) and the KV append in one
/// launch: the rotated q rows go to `q` (`[n, w.rows()]`; its k and v columns are scratch), k
/// and v to the cache. The same bits as [`matmul_fused`] (norm, store) then [`rope_append`],
/// which is what it launches where the matmul is a tiled product.
pub fn matmul_norm_rope_append(
    gpu: &Gpu,
    w: &GpuMatrix,
    x: &CudaSlice<f32>,
    norm: XForm,
    q: &mut CudaSlice<f32>,
    at: RopeAppend,
) -> Result<()> {
    const OP: &str = "fused [q|k|v] with RoPE and KV append";
    let XForm::Norm { gain, eps } = norm else {
        return Err(CudaError::Shape {
            op: OP,
            detail: "takes a normed input".into(),
        });
    };
    let n = at.rows.len();
    let (kvh, rw) = (at.kv.kv_heads(), at.kv.row_width());
    let head_dim = rw / kvh.max(1);
    let (rows, cols) = (w.rows(), w.cols());
    if kvh == 0 || at.heads == 0 || head_dim % 2 != 0 || rows != (at.heads + 2 * kvh) * head_dim {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!(
                "{rows} rows for {} query heads and {kvh} kv heads of {head_dim}",
                at.heads
            ),
        });
    }
    if at.layer >= at.kv.layers() {
        return Err(CudaError::Param {
            op: OP,
            what: "layer",
            value: at.layer as f64,
            why: "beyond the cache's layers",
        });
    }
    need(OP, "x", x.len(), n * cols)?;
    need(OP, "gain", gain.len(), cols)?;
    need(OP, "q", q.len(), n * rows)?;
    need(OP, "angles", at.cs.len(), n * head_dim)?;
    let smem = fused_smem_bytes(w);
    if smem > gpu.info().smem_per_block || !(eps.is_finite() && eps >= 0.0) {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!("{smem} bytes of shared memory per block, eps {eps}"),
        });
    }
    if n == 0 {
        return Ok(());
    }
    if tiled(w.format(), n) {
        // Many rows: the tiled product, then RoPE and the append as their own launch.
        matmul_fused(gpu, w, x, cols, norm, Epilogue::Store, n, q)?;
        let RopeAppend {
            cs,
            kv,
            rows,
            layer,
            heads,
            pairing,
        } = at;
        return rope_append(gpu, q, cs, kv, rows, layer, heads, head_dim, pairing);
    }
    let mut ints = [0i32; 10];
    let args = [
        n,
        rows,
        cols,
        cols,
        at.heads,
        kvh,
        head_dim,
        at.pairing as usize,
        at.kv.layers(),
        at.layer,
    ];
    for (o, &a) in ints.iter_mut().zip(&args) {
        *o = i32_of(OP, "shape", a)?;
    }
    let capacity = i32_of(OP, "capacity", at.kv.capacity())?;
    let name = fused_kernel_name(w.format().kernel_tag(), "norm", "rope");
    w.need_rows(OP)?;
    let mut b = gpu.launcher(&name)?;
    b.arg(w.bytes()).arg(x).arg(gain).arg(&eps).arg(q);
    for v in &ints[..4] {
        b.arg(v);
    }
    b.arg(at.cs)
        .arg(&mut at.kv.k)
        .arg(&mut at.kv.v)
        .arg(&at.rows.slots)
        .arg(&at.rows.pos);
    for v in &ints[4..] {
        b.arg(v);
    }
    b.arg(&capacity);
    // Four RoPE pairs a block over the q and k heads, then eight v rows a block.
    let pairs = (at.heads + kvh) * head_dim / 2;
    let blocks = pairs.div_ceil(MMF_ROWS / 2) + (kvh * head_dim).div_ceil(MMF_ROWS);
    let cfg = LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (MMF_THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    // SAFETY: (u8*, f32*, f32*, f32, f32*, i32 x4, f32*, f32*, f32*, i32*, i32*, i32 x7) as the
    // entry declares; buffer lengths, the shared memory size, and the slots and positions
    // (GpuRows::set, against the pools) were checked.
    unsafe { b.go(cfg, "launching the fused [q|k|v] with RoPE") }?;
    Ok(())
}

/// RoPE and KV append for rows of a fused `[q | k | v]` buffer: q rotated in place, k rotated
/// into the key pool, v copied into the value pool, at each row's slot and position.
#[allow(clippy::too_many_arguments)]
pub fn rope_append(
    gpu: &Gpu,
    qkv: &mut CudaSlice<f32>,
    cs: &CudaSlice<f32>,
    kv: &mut GpuKv,
    rows: &GpuRows,
    layer: usize,
    heads: usize,
    rotary_dim: usize,
    pairing: Pairing,
) -> Result<()> {
    const OP: &str = "rope_append";
    let n = rows.len();
    let rw = kv.row_width();
    let kvh = kv.kv_heads();
    if kvh == 0 || heads == 0 || !heads.is_multiple_of(kvh) {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!("{heads} query heads over {kvh} kv heads"),
        });
    }
    let head_dim = rw / kvh;
    if rotary_dim > head_dim || !rotary_dim.is_multiple_of(2) {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!("rotary_dim {rotary_dim} must be even and <= head_dim {head_dim}"),
        });
    }
    if layer >= kv.layers() {
        return Err(CudaError::Param {
            op: OP,
            what: "layer",
            value: layer as f64,
            why: "beyond the cache's layers",
        });
    }
    need(OP, "qkv", qkv.len(), n * (heads * head_dim + 2 * rw))?;
    need(OP, "angles", cs.len(), n * rotary_dim)?;
    if n == 0 {
        return Ok(());
    }
    let args = [
        heads,
        kvh,
        head_dim,
        rotary_dim / 2,
        pairing as usize,
        kv.layers(),
        layer,
        kv.capacity(),
    ];
    let mut ints = [0i32; 8];
    for (o, &a) in ints.iter_mut().zip(&args) {
        *o = i32_of(OP, "shape", a)?;
    }
    let mut b = gpu.launcher("tf_rope_append")?;
    b.arg(qkv)
        .arg(cs)
        .arg(&mut kv.k)
        .arg(&mut kv.v)
        .arg(&rows.slots)
        .arg(&rows.pos);
    for v in &ints {
        b.arg(v);
    }
    let cfg = LaunchConfig {
        grid_dim: (n as u32, 1, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: (f32*, f32*, f32*, f32*, i32*, i32*, i32 x8) as declared; slots and positions were
    // checked against the pools by GpuRows::set.
    unsafe { b.go(cfg, "launching rope_append") }?;
    Ok(())
}

#[cfg(test)]
mod host_cpp;

#[cfg(test)]
mod tests {
    use super::fused_smem_bytes_for;
    use crate::weights::GpuFormat;

    #[test]
    fn tiled_row_count_guards_restore_what_was_in_force() {
        use super::{tiled, TiledFromRows, MMG_MIN_ROWS};
        let q = GpuFormat::Q4_1;
        assert!(!tiled(q, MMG_MIN_ROWS - 1) && tiled(q, MMG_MIN_ROWS));
        let always = TiledFromRows::new(1);
        assert!(tiled(q, 1));
        let never = TiledFromRows::new(usize::MAX);
        assert!(!tiled(q, 64));
        drop(never);
        assert!(tiled(q, 1));
        drop(always);
        assert!(!tiled(q, MMG_MIN_ROWS - 1) && tiled(q, MMG_MIN_ROWS));
        // Formats without a tiled kernel never take it.
        let _always = TiledFromRows::new(1);
        assert!(!tiled(GpuFormat::Q6K, 64));
    }

    #[test]
    fn fused_shared_memory_is_bounded_by_the_chunk() {
        use super::chunk_cols;
        // Whole units of at most 1008 bytes (the kernels' tf_mmv_units).
        assert_eq!(chunk_cols(GpuFormat::Q4_0), 56 * 32);
        assert_eq!(chunk_cols(GpuFormat::Mlx4), 42 * 32);
        assert_eq!(chunk_cols(GpuFormat::Q6K), 4 * 256);
        assert_eq!(chunk_cols(GpuFormat::F32), 7 * 32);
        // Llama-3-8B's down projection: [4096, 14336] Q4_0 needed 293888 bytes unchunked.
        let q = fused_smem_bytes_for(GpuFormat::Q4_0, 14336);
        assert_eq!(q, 8 * 1056 + 4 * 1792 * 4);
        assert_eq!(q, fused_smem_bytes_for(GpuFormat::Q4_0, 4096));
        // Every format stays far under the H200's 227 KiB per block at any width.
        for f in [
            GpuFormat::F32,
            GpuFormat::Bf16,
            GpuFormat::Mlx2,
            GpuFormat::Q8_0,
        ] {
            assert!(
                fused_smem_bytes_for(f, 1 << 20) <= 8 * 1056 + 4 * 2016 * 4,
                "{f:?}"
            );
        }
        // Short rows: the inputs of the row itself.
        assert_eq!(
            fused_smem_bytes_for(GpuFormat::Q6K, 256),
            8 * 1056 + 4 * 256 * 4
        );
    }
}
