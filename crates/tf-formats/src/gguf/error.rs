//! Errors of the GGUF reader and the reference dequantizers.

use super::types::GgmlType;

/// Why a GGUF file (or a block buffer handed to a dequantizer) was refused.
///
/// Offsets are absolute byte offsets in the file unless a variant says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("cannot read GGUF file: {0}")]
    Io(#[from] std::io::Error),

    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: magic bytes are {found:02x?}, expected \"GGUF\"")]
    BadMagic {
        /// The first bytes found (up to four).
        found: Vec<u8>,
    },

    /// The version is not 2 or 3 (version 1 used 32-bit counts and is not read).
    #[error("unsupported GGUF version {version}: only versions 2 and 3 are read (re-convert the model with a current gguf writer)")]
    UnsupportedVersion {
        /// The version number as stored (little-endian).
        version: u32,
    },

    /// The file is big-endian; only little-endian GGUF is read.
    #[error("big-endian GGUF (version {version} byte-swapped) is not supported: convert the model to little-endian")]
    BigEndian {
        /// The version once byte-swapped.
        version: u32,
    },

    /// A field, count or length runs past the end of the file.
    #[error("GGUF truncated: {what} at offset {offset} runs past the end of the file")]
    Truncated {
        /// What was being read.
        what: String,
        /// Where it started.
        offset: u64,
    },

    /// A metadata value has a type id this reader does not know.
    #[error("metadata key {key:?}: unknown value type id {type_id}")]
    UnknownValueType {
        /// The metadata key.
        key: String,
        /// The type id found.
        type_id: u32,
    },

    /// Metadata arrays are nested deeper than the reader allows.
    #[error("metadata key {key:?}: arrays nested deeper than {max_depth} levels")]
    NestingTooDeep {
        /// The metadata key.
        key: String,
        /// The deepest nesting accepted.
        max_depth: usize,
    },

    /// A string (key, value or tensor name) is not valid UTF-8.
    #[error("{what} at offset {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// What the string was.
        what: String,
        /// Where its bytes start.
        offset: u64,
    },

    /// A boolean metadata value is neither 0 nor 1.
    #[error("metadata key {key:?}: boolean byte {value} is neither 0 nor 1")]
    InvalidBool {
        /// The metadata key.
        key: String,
        /// The byte found.
        value: u8,
    },

    /// The same metadata key appears twice.
    #[error("metadata key {key:?} appears more than once")]
    DuplicateKey {
        /// The repeated key.
        key: String,
    },

    /// `general.alignment` is not a non-zero power of two that fits in u32.
    #[error("general.alignment = {value} is not a power of two in 1..=2^31 of an integer type")]
    BadAlignment {
        /// The value as written.
        value: String,
    },

    /// A tensor has a storage type id this reader does not know.
    #[error("tensor {tensor:?}: unknown ggml type id {type_id}")]
    UnknownTensorType {
        /// The tensor name.
        tensor: String,
        /// The type id found.
        type_id: u32,
    },

    /// A tensor has more dimensions than ggml allows (4).
    #[error("tensor {tensor:?}: {n_dims} dimensions, at most {max} are allowed")]
    TooManyDims {
        /// The tensor name.
        tensor: String,
        /// Dimensions declared.
        n_dims: u32,
        /// The maximum.
        max: u32,
    },

    /// The element count or byte size of a tensor overflows 64 bits.
    #[error("tensor {tensor:?}: shape {dims:?} overflows a 64-bit size")]
    ShapeOverflow {
        /// The tensor name.
        tensor: String,
        /// Its dimensions, GGUF order.
        dims: Vec<u64>,
    },

    /// The innermost dimension of a block-quantized tensor is not a whole number of blocks.
    #[error(
        "tensor {tensor:?}: ne[0] = {ne0} is not a multiple of the {ty:?} block size {block_size}"
    )]
    ShapeNotBlockMultiple {
        /// The tensor name.
        tensor: String,
        /// Its storage type.
        ty: GgmlType,
        /// The innermost dimension.
        ne0: u64,
        /// Elements per block of `ty`.
        block_size: u64,
    },

    /// The same tensor name appears twice.
    #[error("tensor {name:?} appears more than once")]
    DuplicateTensor {
        /// The repeated name.
        name: String,
    },

    /// A tensor's data would lie (partly) outside the file.
    #[error("tensor {tensor:?}: data at offset {offset} of {size} bytes ends past the file end {file_len}")]
    TensorOutOfRange {
        /// The tensor name.
        tensor: String,
        /// Absolute start offset (saturated on overflow).
        offset: u64,
        /// Bytes it needs.
        size: u64,
        /// The file length.
        file_len: u64,
    },

    /// A tensor's data does not start on the file's alignment.
    #[error("tensor {tensor:?}: data offset {offset} (relative to the data section) is not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        /// The tensor name.
        tensor: String,
        /// Offset as stored, relative to the data section start.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },

    /// Two tensors' data ranges overlap.
    #[error("tensors {a:?} and {b:?} have overlapping data")]
    OverlappingTensors {
        /// The tensor that starts first.
        a: String,
        /// The tensor that starts inside `a`.
        b: String,
    },

    /// A dequantizer was asked for a type it has no reference for.
    #[error("no reference dequantizer for {ty:?}")]
    UnsupportedDequant {
        /// The storage type.
        ty: GgmlType,
    },

    /// A dequantizer's element count is not a whole number of blocks.
    #[error(
        "{n_elements} elements of {ty:?} are not a whole number of {block_size}-element blocks"
    )]
    PartialBlock {
        /// The storage type.
        ty: GgmlType,
        /// Elements requested.
        n_elements: usize,
        /// Elements per block.
        block_size: usize,
    },

    /// A dequantizer's input is not exactly the bytes the element count needs.
    #[error("{ty:?}: {n_elements} elements need {expected} bytes, got {actual}")]
    DataSizeMismatch {
        /// The storage type.
        ty: GgmlType,
        /// Elements requested.
        n_elements: usize,
        /// Bytes they need.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
}
