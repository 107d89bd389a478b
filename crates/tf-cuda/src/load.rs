//! Checkpoint tensors to device operands: packed matrices uploaded unchanged, small vectors
//! (norm gains) decoded to f32 once. A synthetic checkpoint's tensors are generated on the
//! device instead ([`crate::synthetic`]).

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::weights::GpuMatrix;
use cudarc::driver::CudaSlice;
use tf_formats::checkpoint::{Checkpoint, TensorData};
use tf_formats::TensorEntry;
use tf_kernels::matmul::{FloatType, PackedMatrix};

fn bad(e: &TensorEntry, why: String) -> CudaError {
    CudaError::Shape {
        op: "checkpoint tensor",
        detail: format!("{}: {why}", e.name),
    }
}

/// Uploads the `[rows, cols]` matrix of a 2-D entry in its stored layout.
pub fn matrix(gpu: &Gpu, ck: &Checkpoint, e: &TensorEntry) -> Result<GpuMatrix> {
    if let Some(seed) = ck.synthetic_seed() {
        return crate::synthetic::matrices(gpu, seed, &[e]);
    }
    GpuMatrix::upload(gpu, &packed(ck, e)?)
}

/// Uploads several 2-D entries of one format and width as one matrix, rows in order.
pub fn matrices(gpu: &Gpu, ck: &Checkpoint, es: &[&TensorEntry]) -> Result<GpuMatrix> {
    if let Some(seed) = ck.synthetic_seed() {
        return crate::synthetic::matrices(gpu, seed, es);
    }
    let mut parts = Vec::with_capacity(es.len());
    for e in es {
        parts.push(packed(ck, e)?);
    }
    GpuMatrix::concat(gpu, &parts)
}

/// The packed CPU view of a 2-D entry.
fn packed<'a>(ck: &'a Checkpoint, e: &TensorEntry) -> Result<PackedMatrix<'a>> {
    let [rows, cols] = e.shape[..] else {
        return Err(bad(
            e,
            format!("expected a matrix, found shape {:?}", e.shape),
        ));
    };
    let (rows, cols) = (rows as usize, cols as usize);
    match ck
        .data(&e.name)
        .ok_or_else(|| bad(e, "no data in the checkpoint".into()))?
    {
        TensorData::Dense { dtype, bytes } => PackedMatrix::dense(dtype, rows, cols, bytes),
        TensorData::Gguf { ty, bytes } => PackedMatrix::gguf(ty, rows, cols, bytes),
        TensorData::MlxAffine {
            weight,
            scales,
            biases,
            bits,
            group_size,
            scales_dtype,
        } => {
            let scale_ty = FloatType::from_dtype(scales_dtype)
                .ok_or_else(|| bad(e, format!("MLX scales stored as {scales_dtype}")))?;
            PackedMatrix::new(
                rows,
                cols,
                tf_kernels::matmul::WeightData::MlxAffine {
                    bits,
                    group_size: group_size as usize,
                    scale_ty,
                    words: weight,
                    scales,
                    biases,
                },
            )
        }
    }
    .map_err(|err| bad(e, err.to_string()))
}

/// A small tensor decoded to f32 on the host.
pub fn vector_host(ck: &Checkpoint, e: &TensorEntry) -> Result<Vec<f32>> {
    if ck.is_synthetic() {
        return crate::synthetic::vector_host(ck, e);
    }
    let n = e.elements() as usize;
    match ck
        .data(&e.name)
        .ok_or_else(|| bad(e, "no data in the checkpoint".into()))?
    {
        TensorData::Dense { dtype, bytes } => {
            let ty =
                FloatType::from_dtype(dtype).ok_or_else(|| bad(e, format!("stored as {dtype}")))?;
            if bytes.len() != n * ty.size() {
                return Err(bad(e, format!("{} bytes for {n} elements", bytes.len())));
            }
            Ok((0..n).map(|i| ty.read(bytes, i)).collect())
        }
        TensorData::Gguf { ty, bytes } => {
            tf_formats::gguf::dequantize(ty, bytes, n).map_err(|err| bad(e, err.to_string()))
        }
        TensorData::MlxAffine { .. } => Err(bad(e, "a quantized vector is not supported".into())),
    }
}

/// A small tensor decoded to f32 and uploaded.
pub fn vector(gpu: &Gpu, ck: &Checkpoint, e: &TensorEntry) -> Result<CudaSlice<f32>> {
    if let Some(seed) = ck.synthetic_seed() {
        return crate::synthetic::vector(gpu, seed, e);
    }
    gpu.upload(&vector_host(ck, e)?)
}
