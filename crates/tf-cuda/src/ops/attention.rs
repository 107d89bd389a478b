//! Attention launches (kernels/attention.cu): one block per (row, query head), a row's scores
//! in shared memory — the whole capacity when it fits the device's per-block limit, else tiles
//! of keys taken twice (max, then exp / sum / weighted sum) with the same bits. The tile depends
//! only on the cache capacity, head_dim and the device, never on the rows of a call; nothing is
//! allocated per launch (decode stays capturable as a CUDA graph).

use super::{i32_of, need};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::kv::GpuKv;
use crate::ops::GpuRows;
use cudarc::driver::{CudaSlice, LaunchConfig};

/// Shapes of an attention call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnShape {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (divides `heads`).
    pub kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Score scale (usually `1 / sqrt(head_dim)`).
    pub scale: f32,
    /// Sliding window (keys with `pos > q_pos - window`), or `None` for all keys.
    pub window: Option<usize>,
}

/// Largest head_dim the kernel takes (one thread per dimension among the first 128).
pub const ATT_MAX_HEAD_DIM: usize = 128;

/// Threads of an attention block (kernels/attention.cu `ATT_THREADS`).
const ATT_THREADS: u32 = 512;

/// Value rows per staged chunk (kernels/attention.cu `ATT_CHUNK`).
const ATT_CHUNK: usize = 64;

/// Attention of each row (`q`: `[n, heads * head_dim]`) over its own slot's keys `lo..=pos` in
/// `layer`; `out` is `[n, heads * head_dim]`.
#[allow(clippy::too_many_arguments)]
pub fn attend(
    gpu: &Gpu,
    q: &CudaSlice<f32>,
    kv: &GpuKv,
    rows: &GpuRows,
    layer: usize,
    shape: &AttnShape,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let q_stride = shape.heads * shape.head_dim;
    attend_with(gpu, "tf_attend", q, q_stride, kv, rows, layer, shape, out)
}

/// Shared memory of an attention block holding `keys` scores: the scores (rounded up to 4),
/// the query, and two chunks of 64 value rows (kernels/attention.cu).
pub fn attend_smem_bytes(keys: usize, head_dim: usize) -> usize {
    (keys.div_ceil(4) * 4 + head_dim.div_ceil(4) * 4 + 2 * ATT_CHUNK * head_dim) * 4
}

/// Scores an attention block holds at once over a cache of `capacity` positions, given the
/// device's per-block shared memory `smem_limit`: the whole capacity (rounded up to 4) when it
/// fits — every row then takes one pass — else the most keys that fit, a multiple of 16
/// (rows longer than that take two passes, same bits). `None`: not even 16 keys fit.
pub fn attend_tile(capacity: usize, head_dim: usize, smem_limit: usize) -> Option<usize> {
    let whole = capacity.max(1).div_ceil(4) * 4;
    if attend_smem_bytes(whole, head_dim) <= smem_limit {
        return Some(whole);
    }
    let fixed = head_dim.div_ceil(4) * 4 + 2 * ATT_CHUNK * head_dim;
    let tile = (smem_limit / 4).checked_sub(fixed)? / 16 * 16;
    (tile >= 16).then_some(tile)
}

/// Shared memory an attention launch over a cache of `capacity` positions uses under
/// `smem_limit` (see [`attend_tile`]); above `smem_limit` only when no tile fits.
pub fn attend_launch_smem(capacity: usize, head_dim: usize, smem_limit: usize) -> usize {
    let tile = attend_tile(capacity, head_dim, smem_limit).unwrap_or(16);
    attend_smem_bytes(tile, head_dim)
}

/// [`attend`] through a named kernel, query row `i` starting at `q[i * q_stride]` (a fused
/// `[q | k | v]` row has `q_stride = (heads + 2 * kv_heads) * head_dim`).
#[allow(clippy::too_many_arguments)]
pub fn attend_with(
    gpu: &Gpu,
    kernel: &'static str,
    q: &CudaSlice<f32>,
    q_stride: usize,
    kv: &GpuKv,
    rows: &GpuRows,
    layer: usize,
    shape: &AttnShape,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let limit = gpu.info().smem_per_block;
    let hd = shape.head_dim;
    let tile = attend_tile(kv.capacity(), hd, limit).ok_or_else(|| CudaError::Shape {
        op: "attention",
        detail: format!(
            "head_dim {hd} needs {} bytes of shared memory per block for 16 keys (limit {limit})",
            attend_smem_bytes(16, hd)
        ),
    })?;
    attend_tiled(gpu, kernel, q, q_stride, kv, rows, layer, shape, out, tile)
}

/// [`attend_with`] holding `tile` scores at once (the suite forces small tiles; any tile gives
/// the same bits).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend_tiled(
    gpu: &Gpu,
    kernel: &'static str,
    q: &CudaSlice<f32>,
    q_stride: usize,
    kv: &GpuKv,
    rows: &GpuRows,
    layer: usize,
    shape: &AttnShape,
    out: &mut CudaSlice<f32>,
    tile: usize,
) -> Result<()> {
    const OP: &str = "attention";
    let n = rows.len();
    let AttnShape {
        heads,
        kv_heads,
        head_dim,
        scale,
        window,
    } = *shape;
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) || kv_heads * head_dim != kv.row_width() {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!(
                "{heads} heads over {kv_heads} kv heads x {head_dim} against a cache row of {}",
                kv.row_width()
            ),
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
    if q_stride < heads * head_dim {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!("q_stride {q_stride} < heads x head_dim"),
        });
    }
    need(
        OP,
        "q",
        q.len(),
        (n - n.min(1)) * q_stride + heads * head_dim,
    )?;
    need(OP, "out", out.len(), n * heads * head_dim)?;
    let smem = attend_smem_bytes(tile, head_dim);
    let limit = gpu.info().smem_per_block;
    if head_dim > ATT_MAX_HEAD_DIM || tile == 0 || !tile.is_multiple_of(4) || smem > limit {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!(
                "head_dim {head_dim} (at most {ATT_MAX_HEAD_DIM}) with {tile} scores per block (a positive multiple of 4) needs {smem} bytes of shared memory (limit {limit})"
            ),
        });
    }
    if window == Some(0) {
        return Err(CudaError::Param {
            op: OP,
            what: "window",
            value: 0.0,
            why: "must be at least 1",
        });
    }
    if n == 0 || heads == 0 {
        return Ok(());
    }
    let (h_, kvh_, hd_) = (
        i32_of(OP, "heads", heads)?,
        kv_heads as i32,
        i32_of(OP, "head_dim", head_dim)?,
    );
    let (nl, l, cap) = (kv.layers() as i32, layer as i32, kv.capacity() as i32);
    let win = match window {
        Some(w) => i32::try_from(w).unwrap_or(i32::MAX),
        None => 0,
    };
    let qs_ = i32_of(OP, "q_stride", q_stride)?;
    let tile_ = i32_of(OP, "tile", tile)?;
    let mut b = gpu.launcher(kernel)?;
    b.arg(q)
        .arg(&kv.k)
        .arg(&kv.v)
        .arg(&rows.slots)
        .arg(&rows.pos)
        .arg(out);
    b.arg(&h_)
        .arg(&kvh_)
        .arg(&hd_)
        .arg(&nl)
        .arg(&l)
        .arg(&cap)
        .arg(&scale)
        .arg(&win)
        .arg(&qs_)
        .arg(&tile_);
    let cfg = LaunchConfig {
        grid_dim: (n as u32, heads as u32, 1),
        block_dim: (ATT_THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    // SAFETY: the kernel's signature matches the arguments pushed above; buffers were checked;
    // `tile` scores, the query and the value chunks fit the shared memory requested.
    unsafe { b.go(cfg, "launching attention") }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The H200's opt-in limit less the 1 KiB the device module keeps aside.
    const H200: usize = 232_448 - 1024;

    #[test]
    fn short_contexts_keep_the_whole_capacity_in_one_tile() {
        assert_eq!(attend_tile(301, 64, H200), Some(304));
        assert_eq!(attend_tile(1, 37, H200), Some(4));
        let fits = attend_launch_smem(40_000, 64, H200);
        assert_eq!(fits, attend_smem_bytes(40_000, 64));
        assert!(fits <= H200);
    }

    #[test]
    fn long_contexts_take_the_largest_tile_that_fits() {
        for (cap, hd) in [(70_000, 64), (262_144, 64), (45_000, 128), (262_144, 128)] {
            let tile = attend_tile(cap, hd, H200).expect("a tile fits");
            assert!(
                tile < cap && tile.is_multiple_of(16),
                "{cap} x {hd}: {tile}"
            );
            assert!(attend_smem_bytes(tile, hd) <= H200);
            assert!(
                attend_smem_bytes(tile + 16, hd) > H200,
                "{cap} x {hd}: not the largest"
            );
            assert_eq!(
                attend_launch_smem(cap, hd, H200),
                attend_smem_bytes(tile, hd)
            );
        }
        // Planted control: the old rule (whole capacity) would not fit.
        assert!(attend_smem_bytes(70_000, 64) > H200);
    }

    #[test]
    fn the_tile_does_not_depend_on_anything_but_capacity_and_head_dim() {
        // Same capacity, same tile, whatever the positions of the rows.
        let a = attend_tile(262_144, 128, H200);
        assert_eq!(a, attend_tile(262_144, 128, H200));
        assert_eq!(a, attend_tile(100_000, 128, H200));
    }

    #[test]
    fn a_device_too_small_for_16_keys_is_refused() {
        assert_eq!(attend_tile(1000, 128, 1000), None);
        assert!(attend_launch_smem(1000, 128, 1000) > 1000);
    }
}
