//! Checkpoint tensors to device operands: packed matrices uploaded unchanged, small vectors
//! (norm gains) decoded to f32 once. A synthetic checkpoint's tensors are generated on the
//! device instead ([`crate::synthetic`]).

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::weights::GpuMatrix;
use cudarc::driver::CudaSlice;
use tf_formats::checkpoint::Checkpoint;
use tf_formats::{TensorEntry, WeightFormat};
use tf_kernels::matmul::PackedMatrix;

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

/// [`matrix`], in the tensor cores' tiles where [`crate::mma`] serves it (MLX 4-bit with
/// groups of a multiple of 64 columns): for the matrices only `ops::matmul` reads.
pub fn product_matrix(gpu: &Gpu, ck: &Checkpoint, e: &TensorEntry) -> Result<GpuMatrix> {
    let m = matrix(gpu, ck, e)?;
    match e.format {
        WeightFormat::MlxAffine {
            bits: 4,
            group_size,
            ..
        } if crate::mma::serves(group_size as usize, m.cols()) => crate::mma::tile(gpu, &m),
        _ => Ok(m),
    }
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

/// The packed CPU view of a 2-D entry (the CPU engine's own view of it).
pub(crate) fn packed<'a>(ck: &'a Checkpoint, e: &TensorEntry) -> Result<PackedMatrix<'a>> {
    tf_models::weights::matrix(ck, e).map_err(|err| bad(e, err.to_string()))
}

/// A small tensor decoded to f32 on the host (as the CPU engine decodes it).
pub fn vector_host(ck: &Checkpoint, e: &TensorEntry) -> Result<Vec<f32>> {
    if ck.is_synthetic() {
        return crate::synthetic::vector_host(ck, e);
    }
    tf_models::weights::vector(ck, e).map_err(|err| bad(e, err.to_string()))
}

/// A small tensor decoded to f32 and uploaded.
pub fn vector(gpu: &Gpu, ck: &Checkpoint, e: &TensorEntry) -> Result<CudaSlice<f32>> {
    if let Some(seed) = ck.synthetic_seed() {
        return crate::synthetic::vector(gpu, seed, e);
    }
    gpu.upload(&vector_host(ck, e)?)
}
