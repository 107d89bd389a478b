//! Synthetic weights generated in device memory: a synthetic checkpoint
//! (`Checkpoint::synthetic`) has no bytes on the host, so its matrices and vectors are allocated
//! on the GPU and filled there by kernels/synthetic.cu, which implements
//! `tf_formats::checkpoint::synthetic` bit for bit. [`host_device_bytes`] computes the same
//! device bytes on the host (the check binary compares samples of the two).
//!
//! The fill is generic over a format's device layout: dense floats element by element, and any
//! packed block layout ([`BlockLayout`]: stream bytes, then scale and min/bias fields), which
//! covers GGUF Q4_0/Q4_1/Q8_0/Q4_K/Q6_K and MLX affine re-laid per 32-value unit.

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::moe::GpuExperts;
use crate::weights::{GpuFormat, GpuMatrix};
use cudarc::driver::{CudaSlice, DevicePtr};
use tf_formats::checkpoint::synthetic::{dense_kind, init_for, keys, BlockLayout, FloatKind, Init};
use tf_formats::checkpoint::Checkpoint;
use tf_formats::{DType, TensorEntry, WeightFormat};
use tf_kernels::matmul::{FloatType, PackedMatrix, WeightData};

/// Kernel entry points defined in kernels/synthetic.cu.
pub const KERNEL_NAMES: &[&str] = &["tf_synth_blocks", "tf_synth_dense"];

/// Threads per block of the fill kernels.
const THREADS: u32 = 256;
/// Most thread blocks of one fill launch (the kernels stride over the rest).
const MAX_GRID: u64 = 65_536;

/// How a weight format lies in device memory, for the fill kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceLayout {
    /// Plain little-endian floats.
    Dense(FloatKind),
    /// Packed blocks along each row.
    Blocks(BlockLayout),
}

impl DeviceLayout {
    /// Device bytes of `elements` values (a whole number of blocks).
    pub fn bytes(&self, elements: u64) -> u64 {
        match self {
            DeviceLayout::Dense(k) => elements * k.size() as u64,
            DeviceLayout::Blocks(b) => elements / b.block_elems as u64 * b.block_bytes as u64,
        }
    }

    /// Values per block (1 for dense).
    pub fn block_elems(&self) -> u64 {
        match self {
            DeviceLayout::Dense(_) => 1,
            DeviceLayout::Blocks(b) => b.block_elems as u64,
        }
    }
}

/// MLX affine as the GPU stores it (common.cuh `FMT_MLX*`): per 32-value unit, the unit's
/// `4 * bits` bytes of the row's packed bit stream, then its group's scale and bias as f32.
pub fn mlx_unit_layout(bits: u8, group_size: u32) -> BlockLayout {
    let sb = 4 * bits as u32;
    BlockLayout {
        block_bytes: sb + 8,
        block_elems: 32,
        stream_bytes: sb,
        group_blocks: group_size / 32,
        scale_offset: sb,
        scale_kind: FloatKind::F32,
        scale_mult_log2: bits as i32 - 1,
        min: Some((sb + 4, FloatKind::F32, bits as i32 - 1, true)),
    }
}

/// The device layout of a stored format, if the generator has one.
pub fn device_layout(format: WeightFormat) -> Option<DeviceLayout> {
    if let Some(k) = dense_kind(format) {
        return Some(DeviceLayout::Dense(k));
    }
    match format {
        WeightFormat::Gguf(ty) => BlockLayout::gguf(ty).map(DeviceLayout::Blocks),
        WeightFormat::MlxAffine {
            bits, group_size, ..
        } if group_size % 32 == 0 => Some(DeviceLayout::Blocks(mlx_unit_layout(bits, group_size))),
        _ => None,
    }
}

fn unsupported(e: &TensorEntry) -> CudaError {
    CudaError::UnsupportedFormat {
        format: format!("{}: synthetic {} (no generator)", e.name, e.format),
    }
}

fn layout_of(e: &TensorEntry) -> Result<DeviceLayout> {
    let l = device_layout(e.format).ok_or_else(|| unsupported(e))?;
    if !e.elements().is_multiple_of(l.block_elems()) {
        return Err(CudaError::Shape {
            op: "synthetic fill",
            detail: format!(
                "{}: {} values are not whole {}-value blocks",
                e.name,
                e.elements(),
                l.block_elems()
            ),
        });
    }
    Ok(l)
}

/// The device bytes of values `[first, first + count)` of `e` (whole blocks) under `seed`,
/// computed on the host with the reference generator.
pub fn host_device_bytes(e: &TensorEntry, seed: u64, first: u64, count: u64) -> Result<Vec<u8>> {
    let l = layout_of(e)?;
    let k = keys(seed, &e.name);
    let init = init_for(&e.name);
    let be = l.block_elems();
    if !first.is_multiple_of(be) || !count.is_multiple_of(be) || first + count > e.elements() {
        return Err(CudaError::Shape {
            op: "synthetic sample",
            detail: format!("values {first}+{count} of {} in {be}-value blocks", e.name),
        });
    }
    let mut out = vec![0u8; l.bytes(count) as usize];
    match l {
        DeviceLayout::Dense(kind) => {
            tf_formats::checkpoint::synthetic::write_dense(init, k, kind, first, &mut out)
        }
        DeviceLayout::Blocks(b) => {
            b.write(k, b.scale_exp(init.amplitude_log2()), first / be, &mut out)
        }
    }
    Ok(out)
}

/// The scalar arguments of one fill launch (after the output pointer), in kernel order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FillArgs {
    /// `tf_synth_dense(out, n, key, out_kind, store_kind, center_bits, qbits, exp)`.
    Dense {
        n: u64,
        key: u64,
        out_kind: i32,
        store_kind: i32,
        center_bits: u32,
        qbits: i32,
        exp: i32,
    },
    /// `tf_synth_blocks(out, n, key, scale_key, then `ints`)`: block_bytes, stream_bytes,
    /// group_blocks, scale_off, scale_kind, scale_exp, min_off, min_kind, min_exp, min_neg.
    Blocks {
        n: u64,
        key: u64,
        scale_key: u64,
        ints: [i32; 10],
    },
}

/// The fill launch arguments of `e` under `seed`; `out` asks dense values widened to that kind
/// (vectors), which packed formats refuse.
pub fn fill_args(e: &TensorEntry, seed: u64, out: Option<FloatKind>) -> Result<FillArgs> {
    let k = keys(seed, &e.name);
    let init: Init = init_for(&e.name);
    match layout_of(e)? {
        DeviceLayout::Dense(store) => Ok(FillArgs::Dense {
            n: e.elements(),
            key: k.bytes,
            out_kind: out.unwrap_or(store) as i32,
            store_kind: store as i32,
            center_bits: init.center_bits,
            qbits: init.qbits as i32,
            exp: init.exp,
        }),
        DeviceLayout::Blocks(_) if out.is_some() => Err(CudaError::Shape {
            op: "synthetic vector",
            detail: format!("{}: a quantized vector is not supported", e.name),
        }),
        DeviceLayout::Blocks(b) => {
            let exp = b.scale_exp(init.amplitude_log2());
            let (min_off, min_kind, min_exp, min_neg) = match b.min {
                Some((off, kind, shift, neg)) => (off as i32, kind as i32, exp + shift, neg as i32),
                None => (-1, 0, 0, 0),
            };
            Ok(FillArgs::Blocks {
                n: e.elements() / b.block_elems as u64,
                key: k.bytes,
                scale_key: k.scales,
                ints: [
                    b.block_bytes as i32,
                    b.stream_bytes as i32,
                    b.group_blocks as i32,
                    b.scale_offset as i32,
                    b.scale_kind as i32,
                    exp,
                    min_off,
                    min_kind,
                    min_exp,
                    min_neg,
                ],
            })
        }
    }
}

/// Enqueues the fill of `e`'s device bytes at `ptr` (`layout_of(e).bytes(..)` of them, or
/// `elements` values of `out` for a vector).
///
/// # Safety
/// `ptr` must address at least that many writable device bytes on the GPU's stream.
unsafe fn fill(
    gpu: &Gpu,
    ptr: u64,
    e: &TensorEntry,
    seed: u64,
    out: Option<FloatKind>,
) -> Result<()> {
    match fill_args(e, seed, out)? {
        FillArgs::Dense {
            n,
            key,
            out_kind,
            store_kind,
            center_bits,
            qbits,
            exp,
        } => {
            let mut launch = gpu.launcher("tf_synth_dense")?;
            launch
                .arg(&ptr)
                .arg(&n)
                .arg(&key)
                .arg(&out_kind)
                .arg(&store_kind)
                .arg(&center_bits)
                .arg(&qbits)
                .arg(&exp);
            // SAFETY: argument types and order as tf_synth_dense; `ptr` holds n values (caller).
            unsafe { launch.go(config(n), "filling a synthetic dense tensor") }
        }
        FillArgs::Blocks {
            n,
            key,
            scale_key,
            ints,
        } => {
            let mut launch = gpu.launcher("tf_synth_blocks")?;
            launch.arg(&ptr).arg(&n).arg(&key).arg(&scale_key);
            for v in &ints {
                launch.arg(v);
            }
            // A thread a byte of the n blocks of ints[0] bytes.
            let bytes = n * ints[0] as u64;
            // SAFETY: argument types and order as tf_synth_blocks; `ptr` holds n blocks (caller).
            unsafe { launch.go(config(bytes), "filling synthetic packed blocks") }
        }
    }
}

fn config(items: u64) -> cudarc::driver::LaunchConfig {
    cudarc::driver::LaunchConfig {
        grid_dim: (
            items.div_ceil(THREADS as u64).clamp(1, MAX_GRID) as u32,
            1,
            1,
        ),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The `[rows, cols]` of a matrix entry.
fn matrix_shape(e: &TensorEntry) -> Result<(usize, usize)> {
    let [rows, cols] = e.shape[..] else {
        return Err(CudaError::Shape {
            op: "synthetic matrix",
            detail: format!("{}: expected a matrix, found shape {:?}", e.name, e.shape),
        });
    };
    Ok((rows as usize, cols as usize))
}

/// A zero packed view of `[rows, cols]` in `format` over `zeros` (the host view whose GPU format
/// [`gpu_format`] asks for).
fn zero_view<'a>(e: &TensorEntry, zeros: &'a [u8]) -> Result<PackedMatrix<'a>> {
    let (rows, cols) = matrix_shape(e)?;
    let bad = |err: String| CudaError::Shape {
        op: "synthetic matrix",
        detail: format!("{}: {err}", e.name),
    };
    let n = rows * cols;
    match e.format {
        WeightFormat::Dense(d) => PackedMatrix::dense(d, rows, cols, &zeros[..n * d.size()]),
        WeightFormat::Gguf(ty) => {
            let len = n / ty.block_size() * ty.type_size();
            PackedMatrix::gguf(ty, rows, cols, &zeros[..len])
        }
        WeightFormat::MlxAffine {
            bits,
            group_size,
            scales,
        } => {
            let ty = FloatType::from_dtype(scales).ok_or_else(|| unsupported(e))?;
            let g = n / group_size as usize * scales.size();
            let data = WeightData::MlxAffine {
                bits,
                group_size: group_size as usize,
                scale_ty: ty,
                words: &zeros[..n * bits as usize / 8],
                scales: &zeros[..g],
                biases: &zeros[..g],
            };
            PackedMatrix::new(rows, cols, data)
        }
    }
    .map_err(|err| bad(err.to_string()))
}

/// The GPU format a (synthetic) entry of any rank loads as, from its stored format alone (no
/// bytes): the same answer [`GpuFormat::of`] gives for its packed rows, or `UnsupportedFormat`.
/// For preflight checks on synthetic checkpoints, whose `data()` is `None`.
pub fn gpu_format(e: &TensorEntry) -> Result<GpuFormat> {
    let cols = e.shape.last().copied().unwrap_or(0);
    let row = TensorEntry {
        name: e.name.clone(),
        format: e.format,
        shape: vec![1, cols],
    };
    let zeros = vec![0u8; zero_len(&row)];
    GpuFormat::of(&zero_view(&row, &zeros)?)
}

/// Host bytes a zero view of `e` borrows (the largest of its parts).
fn zero_len(e: &TensorEntry) -> usize {
    let n = e.elements() as usize;
    match e.format {
        WeightFormat::Dense(d) => n * d.size(),
        WeightFormat::Gguf(ty) => n / ty.block_size().max(1) * ty.type_size(),
        WeightFormat::MlxAffine { bits, scales, .. } => {
            (n * bits as usize / 8).max(n * DType::size(scales))
        }
    }
}

/// A synthetic `[rows, cols]` matrix, or several of one format and width as one matrix (rows in
/// order), allocated on the device in the format's GPU layout and filled there.
pub fn matrices(gpu: &Gpu, seed: u64, es: &[&TensorEntry]) -> Result<GpuMatrix> {
    let first = es.first().ok_or_else(|| CudaError::Shape {
        op: "synthetic matrix",
        detail: "no tensors".into(),
    })?;
    let (format, cols) = (gpu_format(first)?, matrix_shape(first)?.1);
    let (mut rows, mut want) = (0, 0u64);
    for e in es {
        let (r, c) = matrix_shape(e)?;
        if gpu_format(e)? != format || c != cols {
            return Err(CudaError::Shape {
                op: "synthetic matrix",
                detail: format!(
                    "{}: not {format:?} with {cols} columns like {}",
                    e.name, first.name
                ),
            });
        }
        rows += r;
        want += layout_of(e)?.bytes(e.elements());
    }
    let m = GpuMatrix::zeroed(gpu, format, rows, cols)?;
    if m.storage_bytes() as u64 != want {
        return Err(CudaError::Shape {
            op: "synthetic matrix",
            detail: format!(
                "{:?} holds {} device bytes, the generator's layout {want}",
                m.format(),
                m.storage_bytes()
            ),
        });
    }
    {
        let (base, _sync) = m.bytes().device_ptr(gpu.stream());
        let mut offset = 0u64;
        for e in es {
            // SAFETY: the matrix was allocated with exactly `want` bytes, laid out part by part
            // in this order; each part's fill writes only its own `bytes(..)` at its offset.
            unsafe { fill(gpu, base + offset, e, seed, None)? };
            offset += layout_of(e)?.bytes(e.elements());
        }
    }
    Ok(m)
}

/// Stacked routed experts (one `[n, rows, cols]` entry) generated on the device as the MoE
/// kernels read them: expert `x` is rows `x*rows ..` of the entry flattened to
/// `[n*rows, cols]` (the same bytes as the stacked tensor's).
pub fn experts(gpu: &Gpu, seed: u64, e: &TensorEntry, n: usize) -> Result<GpuExperts> {
    let [ne, rows, cols] = e.shape[..] else {
        return Err(CudaError::Shape {
            op: "synthetic experts",
            detail: format!(
                "{}: expected [experts, out, in], found {:?}",
                e.name, e.shape
            ),
        });
    };
    if ne as usize != n {
        return Err(CudaError::Shape {
            op: "synthetic experts",
            detail: format!("{}: {ne} experts stored, {n} expected", e.name),
        });
    }
    let flat = TensorEntry {
        name: e.name.clone(),
        format: e.format,
        shape: vec![ne * rows, cols],
    };
    let matrix = GpuMatrix::zeroed(gpu, gpu_format(&flat)?, (ne * rows) as usize, cols as usize)?;
    let x = GpuExperts::stacked(matrix, n)?;
    let want = layout_of(&flat)?.bytes(flat.elements());
    if x.storage_bytes() as u64 != want {
        return Err(CudaError::Shape {
            op: "synthetic experts",
            detail: format!(
                "{}: {} device bytes, the generator's layout {want}",
                e.name,
                x.storage_bytes()
            ),
        });
    }
    {
        let (ptr, _sync) = x.matrix().bytes().device_ptr(gpu.stream());
        // SAFETY: the stacked matrix holds exactly `want` bytes, which the fill writes.
        unsafe { fill(gpu, ptr, &flat, seed, None)? };
    }
    Ok(x)
}

/// A synthetic vector decoded to f32 on the device (its stored values widened).
pub fn vector(gpu: &Gpu, seed: u64, e: &TensorEntry) -> Result<CudaSlice<f32>> {
    let v: CudaSlice<f32> = gpu.zeros(e.elements() as usize)?;
    {
        let (ptr, _sync) = v.device_ptr(gpu.stream());
        // SAFETY: `v` holds `elements` f32 values; the fill writes exactly those.
        unsafe { fill(gpu, ptr, e, seed, Some(FloatKind::F32))? };
    }
    Ok(v)
}

/// A small synthetic dense tensor's values decoded to f32 on the host (the reference generator).
pub fn vector_host(ck: &Checkpoint, e: &TensorEntry) -> Result<Vec<f32>> {
    let seed = ck.synthetic_seed().ok_or_else(|| CudaError::Shape {
        op: "synthetic vector",
        detail: format!("{}: the checkpoint is not synthetic", e.name),
    })?;
    let kind = dense_kind(e.format).ok_or_else(|| unsupported(e))?;
    let bytes = host_device_bytes(e, seed, 0, e.elements())?;
    Ok(bytes
        .chunks_exact(kind.size())
        .map(|c| match kind {
            FloatKind::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
            FloatKind::F16 => half::f16::from_le_bytes([c[0], c[1]]).to_f32(),
            FloatKind::Bf16 => half::bf16::from_le_bytes([c[0], c[1]]).to_f32(),
        })
        .collect())
}

#[cfg(test)]
mod host_cpp;
#[cfg(test)]
mod tests;
