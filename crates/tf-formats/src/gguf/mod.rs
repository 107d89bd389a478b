//! GGUF v2/v3: header, metadata, tensor infos, and the ggml block formats.
//!
//! [`GgufFile`] parses and validates a whole file up front (every count and length checked
//! against the bytes that remain, every tensor range checked against the file) and then hands
//! out zero-copy views of tensor data. [`dequantize`] is the scalar reference for each block
//! format, bit-exact with the `gguf` Python package's numpy dequantizer.

mod dequant;
mod dequant_k;
mod error;
mod file;
mod reader;
mod types;

pub use dequant::{dequantize, dequantize_into, has_dequantizer};
pub use error::GgufError;
pub use file::{GgufFile, GgufTensorInfo, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAX_DIMS};
pub use reader::MAX_ARRAY_DEPTH;
pub use types::{GgmlType, MetaValue};
