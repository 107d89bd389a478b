//! MLX affine quantization: packing layout, per-module settings, reference dequantizer.
//!
//! A weight `[..., out, in]` is stored as `weight` (U32, `[..., out, in * bits / 32]`), and
//! `scales` and `biases` (`[..., out, in / group_size]`, one float dtype). Groups run along the
//! input dimension; within a row the quantized values form one little-endian bit stream over
//! the u32 words (value `j` occupies stream bits `j*bits .. (j+1)*bits`, so 3-, 5- and 6-bit
//! values may straddle two words). Dequantization is `w = scale * q + bias` per group, with
//! the rounding points described on [`dequantize`].

mod config;
mod dequant;
mod entries;

pub use config::{QuantSpec, QuantizationConfig, SUPPORTED_BITS, SUPPORTED_GROUP_SIZES};
pub use dequant::{
    dequantize, dequantize_row, dequantize_value, round_to, unpack, unpack_value,
    words_from_le_bytes, GroupParams,
};
pub use entries::logical_entries;

use crate::dtype::DType;

/// Everything that can be wrong with MLX affine quantization settings or tensors.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MlxError {
    /// A bit width other than 2, 3, 4, 5, 6 or 8.
    #[error("{bits}-bit MLX affine quantization is not supported (supported: 2, 3, 4, 5, 6, 8)")]
    UnsupportedBits { bits: u64 },
    /// A group size other than 32, 64 or 128.
    #[error("MLX affine group size {group_size} is not supported (supported: 32, 64, 128)")]
    UnsupportedGroupSize { group_size: u64 },
    /// A quantization mode other than "affine" (e.g. mxfp4, nvfp4, mxfp8).
    #[error("quantization mode {mode:?} is not supported (only \"affine\")")]
    UnsupportedMode { mode: String },
    /// A Hugging Face `quantization_config` of another method (gptq, awq, fp8, ...).
    #[error("quantization method {method:?} is not MLX affine quantization")]
    UnsupportedQuantMethod { method: String },
    /// A field of the quantization settings has the wrong type or value.
    #[error("quantization config key {key:?}: {reason}")]
    InvalidQuantizationConfig { key: String, reason: String },
    /// Scales or biases in a dtype other than F32, F16 or BF16.
    #[error("{what} must be F32, F16 or BF16, not {dtype}")]
    ParamDtype { what: &'static str, dtype: DType },
    /// Scales and biases in different dtypes.
    #[error("scales are {scales} but biases are {biases}")]
    ParamDtypeMismatch { scales: DType, biases: DType },
    /// A buffer whose length does not fit the quantization layout.
    #[error("{what}: expected {expected}, found {found}")]
    LengthMismatch {
        what: &'static str,
        expected: usize,
        found: usize,
    },
    /// Quantized tensors are present but config.json has no quantization settings.
    #[error("tensor {tensor:?} is MLX-quantized but config.json has no \"quantization\" settings")]
    MissingQuantizationConfig { tensor: String },
    /// A module has scales but its override in config.json is `false`.
    #[error("module {module:?} has scales but config.json disables its quantization")]
    QuantizationDisabled { module: String },
    /// A module has scales but no packed weight.
    #[error("module {module:?} has scales but no {module}.weight")]
    MissingWeight { module: String },
    /// A module has weight and scales but no biases.
    #[error("module {module:?} has scales but no {module}.biases (affine mode needs biases)")]
    MissingBiases { module: String },
    /// The packed weight is not U32.
    #[error("tensor {tensor:?} has scales so must be U32 packed words, not {dtype}")]
    PackedNotU32 { tensor: String, dtype: DType },
    /// The packed weight's shape cannot hold whole values at this bit width.
    #[error("tensor {tensor:?}: packed shape {shape:?} does not fit {bits}-bit values with group size {group_size}")]
    PackedShapeInvalid {
        tensor: String,
        shape: Vec<u64>,
        bits: u8,
        group_size: u32,
    },
    /// Scales or biases do not have the shape the packed weight and settings require.
    #[error("module {module:?}: {what} have shape {found:?}, expected {expected:?}")]
    ParamShapeMismatch {
        module: String,
        what: &'static str,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
}
