//! Views of checkpoint tensors as kernel operands: packed matrices (zero-copy) and small f32
//! vectors (norm gains, biases) decoded once at load.

use crate::error::ModelError;
use tf_formats::checkpoint::{Checkpoint, TensorData};
use tf_formats::TensorEntry;
use tf_kernels::matmul::{FloatType, PackedMatrix, WeightData};

/// The `[rows, cols]` matrix of a 2-D weight entry, borrowing the checkpoint's bytes.
pub fn matrix<'a>(ck: &'a Checkpoint, e: &TensorEntry) -> Result<PackedMatrix<'a>, ModelError> {
    let bad = |why: String| ModelError::BadTensor {
        name: e.name.clone(),
        why,
    };
    let [rows, cols] = e.shape[..] else {
        return Err(bad(format!("expected a matrix, found shape {:?}", e.shape)));
    };
    let (rows, cols) = (rows as usize, cols as usize);
    let data = ck
        .data(&e.name)
        .ok_or_else(|| bad("no data in the checkpoint".into()))?;
    pack(data, rows, cols).map_err(bad)
}

/// The `[rows, cols]` packed view of a tensor's stored data (dense, GGUF blocks or MLX affine),
/// or why it cannot be one.
pub fn pack(data: TensorData<'_>, rows: usize, cols: usize) -> Result<PackedMatrix<'_>, String> {
    let m = match data {
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
                .ok_or_else(|| format!("scales stored as {scales_dtype}"))?;
            PackedMatrix::new(
                rows,
                cols,
                WeightData::MlxAffine {
                    bits,
                    group_size: group_size as usize,
                    scale_ty,
                    words: weight,
                    scales,
                    biases,
                },
            )
        }
    };
    m.map_err(|err| err.to_string())
}

/// A small tensor (a norm gain, a bias) decoded to f32 with the reference dequantizers.
pub fn vector(ck: &Checkpoint, e: &TensorEntry) -> Result<Vec<f32>, ModelError> {
    let bad = |why: String| ModelError::BadTensor {
        name: e.name.clone(),
        why,
    };
    let n = e.elements() as usize;
    match ck
        .data(&e.name)
        .ok_or_else(|| bad("no data in the checkpoint".into()))?
    {
        TensorData::Dense { dtype, bytes } => {
            let ty =
                FloatType::from_dtype(dtype).ok_or_else(|| bad(format!("stored as {dtype}")))?;
            if bytes.len() != n * ty.size() {
                return Err(bad(format!("{} bytes for {n} elements", bytes.len())));
            }
            Ok((0..n).map(|i| ty.read(bytes, i)).collect())
        }
        TensorData::Gguf { ty, bytes } => {
            tf_formats::gguf::dequantize(ty, bytes, n).map_err(|err| bad(err.to_string()))
        }
        TensorData::MlxAffine { .. } => Err(bad("a quantized vector is not supported".into())),
    }
}
