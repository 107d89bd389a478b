//! Which storage formats the kernels read, per role of a tensor in the forward.

use crate::refusal::Refusal;
use serde::Serialize;
use tf_formats::gguf::GgmlType;
use tf_formats::{DType, TensorEntry, WeightFormat};

/// The role a tensor plays, which decides the formats it may be stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A matrix multiplied in its stored form (linear layers, embeddings, experts, head).
    Matrix,
    /// Plain floats only: norms, routers, biases, Mamba parameters, residual gates.
    Dense,
    /// A MoE latent projection: unquantized BF16 or F32 only.
    LatentProjection { layer: usize, which: &'static str },
}

/// How a supported matrix format is served by the kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum KernelPath {
    /// A tuned kernel (dense floats, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, MLX affine).
    Fast,
    /// A correct but slower kernel (Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, Q8_K).
    Slow,
}

/// MLX affine bit widths the kernels read (MLX itself has no 7-bit mode).
pub const MLX_BITS: &[u8] = &[2, 3, 4, 5, 6, 8];
/// MLX affine group sizes the kernels read.
pub const MLX_GROUP_SIZES: &[u32] = &[32, 64, 128];
/// Dense element types the kernels read.
pub const DENSE_FLOATS: &[DType] = &[DType::F32, DType::F16, DType::BF16];
/// GGUF types read by a fast kernel.
pub const GGUF_FAST: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q8_0,
    GgmlType::Q4K,
    GgmlType::Q6K,
];
/// GGUF types read by a slower kernel.
pub const GGUF_SLOW: &[GgmlType] = &[
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q5K,
    GgmlType::Q8K,
];

/// The kernel path for a matrix stored in `format`, or `None` if no kernel reads it.
pub fn matrix_kernel(format: WeightFormat) -> Option<KernelPath> {
    match format {
        WeightFormat::Dense(d) if DENSE_FLOATS.contains(&d) => Some(KernelPath::Fast),
        WeightFormat::Dense(_) => None,
        WeightFormat::Gguf(t) if GGUF_FAST.contains(&t) => Some(KernelPath::Fast),
        WeightFormat::Gguf(t) if GGUF_SLOW.contains(&t) => Some(KernelPath::Slow),
        WeightFormat::Gguf(_) => None,
        WeightFormat::MlxAffine {
            bits,
            group_size,
            scales,
        } => {
            let ok = MLX_BITS.contains(&bits)
                && MLX_GROUP_SIZES.contains(&group_size)
                && DENSE_FLOATS.contains(&scales);
            ok.then_some(KernelPath::Fast)
        }
    }
}

/// The dense float type of a format, if it holds plain floats (dense or GGUF F32/F16/BF16).
pub fn dense_float(format: WeightFormat) -> Option<DType> {
    match format {
        WeightFormat::Dense(d) if DENSE_FLOATS.contains(&d) => Some(d),
        WeightFormat::Gguf(GgmlType::F32) => Some(DType::F32),
        WeightFormat::Gguf(GgmlType::F16) => Some(DType::F16),
        WeightFormat::Gguf(GgmlType::BF16) => Some(DType::BF16),
        _ => None,
    }
}

/// Elements per quantization block/group along the input dimension (1 for plain floats).
fn block_len(format: WeightFormat) -> u64 {
    match format {
        WeightFormat::Dense(_) => 1,
        WeightFormat::Gguf(t) => t.block_size() as u64,
        WeightFormat::MlxAffine { group_size, .. } => group_size as u64,
    }
}

/// Checks that `entry` may be stored as it is for `role`.
pub(crate) fn check_format(entry: &TensorEntry, role: Role) -> Result<(), Refusal> {
    let format = entry.format;
    let tensor = || entry.name.clone();
    match role {
        Role::Dense => {
            if dense_float(format).is_some() {
                Ok(())
            } else if format.is_quantized() {
                Err(Refusal::MustBeDense {
                    tensor: tensor(),
                    format: format.to_string(),
                })
            } else {
                Err(Refusal::UnsupportedQuantization {
                    tensor: tensor(),
                    format: format.to_string(),
                })
            }
        }
        Role::LatentProjection { layer, which } => match format {
            WeightFormat::Dense(DType::BF16 | DType::F32) => Ok(()),
            WeightFormat::Dense(d) => Err(Refusal::LatentProjectionDType {
                layer,
                which: which.into(),
                dtype: d.to_string(),
            }),
            other if other.is_quantized() => Err(Refusal::LatentProjectionQuantized {
                layer,
                which: which.into(),
                format: other.to_string(),
            }),
            other => Err(Refusal::LatentProjectionDType {
                layer,
                which: which.into(),
                dtype: other.to_string(),
            }),
        },
        Role::Matrix => {
            if matrix_kernel(format).is_none() {
                return Err(Refusal::UnsupportedQuantization {
                    tensor: tensor(),
                    format: format.to_string(),
                });
            }
            let block = block_len(format);
            let in_dim = entry.shape.last().copied().unwrap_or(0);
            if block > 1 && in_dim % block != 0 {
                return Err(Refusal::QuantizedShape {
                    tensor: tensor(),
                    format: format.to_string(),
                    in_dim,
                    block,
                });
            }
            Ok(())
        }
    }
}
