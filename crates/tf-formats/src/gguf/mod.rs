//! GGUF v2/v3: header, metadata, tensor infos, and the ggml block formats.

mod types;

pub use types::{GgmlType, MetaValue};
