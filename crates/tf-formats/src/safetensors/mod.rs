//! safetensors files, single or sharded through model.safetensors.index.json.
//!
//! Files are memory-mapped and every tensor is a zero-copy view into the map. Tensor data is
//! not guaranteed to be aligned beyond one byte: readers must copy or read unaligned.

mod checkpoint;
mod header;

pub use checkpoint::{SafeTensorInfo, SafetensorsCheckpoint, TensorView, INDEX_FILE, SINGLE_FILE};
pub use header::{parse_header, Header, HeaderTensor, MAX_HEADER_LEN};

use crate::dtype::DType;
use std::path::PathBuf;

/// Everything that can be wrong with a safetensors file or a sharded checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum SafetensorsError {
    /// An I/O error on a named file.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A header error found while reading a named file (see [`SafetensorsError::root`]).
    #[error("{path}: {source}")]
    InFile {
        path: PathBuf,
        source: Box<SafetensorsError>,
    },
    /// The file cannot even hold the 8-byte header length.
    #[error("file is {file_len} bytes, too short for the 8-byte header length")]
    TooShort { file_len: u64 },
    /// The header length prefix points past the end of the file.
    #[error("header length {header_len} runs past the end of the file ({file_len} bytes)")]
    HeaderLengthPastEnd { header_len: u64, file_len: u64 },
    /// The header length prefix is larger than any real header.
    #[error("header length {header_len} exceeds the {limit}-byte limit")]
    HeaderTooLarge { header_len: u64, limit: u64 },
    /// The header bytes are not a JSON object.
    #[error("header is not a JSON object: {reason}")]
    HeaderNotJson { reason: String },
    /// `__metadata__` is not a map of strings to strings.
    #[error("invalid __metadata__: {reason}")]
    InvalidMetadata { reason: String },
    /// A tensor entry lacks a field or has one of the wrong type.
    #[error("tensor {tensor:?}: {reason}")]
    InvalidTensorEntry { tensor: String, reason: String },
    /// The same tensor name appears twice (in one header, or in two shards).
    #[error("tensor {tensor:?} appears more than once")]
    DuplicateTensor { tensor: String },
    /// A dtype this reader does not support (e.g. F8_E4M3, U64, C64).
    #[error("tensor {tensor:?} has unsupported dtype {dtype:?} (supported: F64 F32 F16 BF16 I64 I32 U32 I16 U16 I8 U8 BOOL)")]
    UnknownDtype { tensor: String, dtype: String },
    /// The element count times the dtype size overflows 64 bits.
    #[error("tensor {tensor:?}: shape {shape:?} is too large")]
    ShapeOverflow { tensor: String, shape: Vec<u64> },
    /// `data_offsets` has begin > end.
    #[error("tensor {tensor:?}: data_offsets [{begin}, {end}] are reversed")]
    OffsetsReversed {
        tensor: String,
        begin: u64,
        end: u64,
    },
    /// `data_offsets` end lies past the data section.
    #[error("tensor {tensor:?}: data_offsets [{begin}, {end}] run past the {data_len}-byte data section")]
    OffsetsOutOfRange {
        tensor: String,
        begin: u64,
        end: u64,
        data_len: u64,
    },
    /// The byte range does not match shape × dtype size.
    #[error(
        "tensor {tensor:?}: {dtype} {shape:?} needs {expected} bytes but data_offsets span {found}"
    )]
    DataLengthMismatch {
        tensor: String,
        dtype: DType,
        shape: Vec<u64>,
        expected: u64,
        found: u64,
    },
    /// Two tensors share bytes.
    #[error(
        "tensor {second:?} (from byte {second_begin}) overlaps {first:?} (to byte {first_end})"
    )]
    Overlapping {
        first: String,
        first_end: u64,
        second: String,
        second_begin: u64,
    },
    /// Bytes between two tensors (or before the first) belong to no tensor.
    #[error("bytes [{gap_begin}, {gap_end}) after tensor {after:?} belong to no tensor")]
    NonContiguous {
        after: Option<String>,
        gap_begin: u64,
        gap_end: u64,
    },
    /// Bytes after the last tensor belong to no tensor.
    #[error("tensors cover {used} bytes but the data section has {data_len}")]
    TrailingData { used: u64, data_len: u64 },
    /// A directory without model.safetensors.index.json or model.safetensors.
    #[error("{dir}: no {INDEX_FILE} or {SINGLE_FILE} found")]
    NoSafetensors { dir: PathBuf },
    /// The shard index is not valid JSON or lacks a `weight_map` of strings.
    #[error("{path}: invalid shard index: {reason}")]
    InvalidIndex { path: PathBuf, reason: String },
    /// The index names a shard file that is not a plain relative file name.
    #[error("shard index names {shard:?} for tensor {tensor:?}, which is not a plain file name")]
    InvalidShardName { tensor: String, shard: String },
    /// A shard named by the index does not exist.
    #[error("shard {shard:?} named in the index is missing (looked for {path})")]
    MissingShard { shard: String, path: PathBuf },
    /// The index maps a tensor to a shard that does not hold it.
    #[error("tensor {tensor:?} is mapped to shard {shard:?} by the index but that shard lacks it")]
    TensorMissingFromShard { tensor: String, shard: String },
    /// A shard holds a tensor the index does not list (or lists under another shard).
    #[error("shard {shard:?} holds tensor {tensor:?}, which the index does not map to it")]
    UnindexedTensor { tensor: String, shard: String },
}

impl SafetensorsError {
    /// The underlying error, with any [`SafetensorsError::InFile`] wrappers removed.
    pub fn root(&self) -> &SafetensorsError {
        match self {
            SafetensorsError::InFile { source, .. } => source.root(),
            other => other,
        }
    }
}
