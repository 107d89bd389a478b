//! The logical view of a checkpoint's tensors that families validate against: one entry per
//! weight, whatever file format holds it (an MLX affine triplet is one entry, not three).

use crate::dtype::DType;
use crate::gguf::GgmlType;
use serde::Serialize;

/// How a logical weight is stored on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum WeightFormat {
    /// Plain elements of one dtype.
    Dense(DType),
    /// A GGUF/ggml block format (includes GGUF's own F32/F16/BF16).
    Gguf(GgmlType),
    /// MLX affine quantization: packed u32 words plus per-group scales and biases.
    MlxAffine {
        bits: u8,
        group_size: u32,
        scales: DType,
    },
}

impl WeightFormat {
    /// Whether the weight is stored quantized (not plain floats).
    pub fn is_quantized(self) -> bool {
        match self {
            WeightFormat::Dense(_) => false,
            WeightFormat::Gguf(t) => t.is_quantized(),
            WeightFormat::MlxAffine { .. } => true,
        }
    }

    /// Bytes needed to store `elements` values in this format, when `elements` is a whole
    /// number of blocks/groups.
    pub fn storage_bytes(self, elements: u64) -> u64 {
        match self {
            WeightFormat::Dense(d) => elements * d.size() as u64,
            WeightFormat::Gguf(t) => elements / t.block_size() as u64 * t.type_size() as u64,
            WeightFormat::MlxAffine {
                bits,
                group_size,
                scales,
            } => {
                elements * bits as u64 / 8
                    + 2 * (elements / group_size as u64) * scales.size() as u64
            }
        }
    }
}

impl std::fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WeightFormat::Dense(d) => write!(f, "{d}"),
            WeightFormat::Gguf(t) => write!(f, "{t:?}"),
            WeightFormat::MlxAffine {
                bits, group_size, ..
            } => {
                write!(f, "mlx-affine-{bits}bit-g{group_size}")
            }
        }
    }
}

/// One logical tensor of a checkpoint: its canonical (Hugging Face style) name, how it is
/// stored, and its logical shape, outermost dimension first (`[out, in]` for a linear weight).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TensorEntry {
    pub name: String,
    pub format: WeightFormat,
    pub shape: Vec<u64>,
}

impl TensorEntry {
    /// Number of logical elements.
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }
}
