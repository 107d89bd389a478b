//! Checkpoint readers for TensorFold: safetensors (single or sharded), GGUF, MLX affine
//! quantization and the JSON configs that travel with them. No compute lives here beyond
//! reference dequantizers; every tensor is a zero-copy view into a memory map.

pub mod checkpoint;
pub mod config;
pub mod dtype;
pub mod gguf;
pub mod mlx_affine;
pub mod pins;
pub mod safetensors;
pub mod weight;

pub use dtype::DType;
pub use weight::{TensorEntry, WeightFormat};
