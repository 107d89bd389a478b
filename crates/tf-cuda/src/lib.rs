//! The CUDA backend: NVRTC-compiled kernels under the kernel contract.
//!
//! The build needs no CUDA toolkit: `cudarc` loads libcuda and libnvrtc at run time, and a
//! machine without them gets [`CudaError::NoDriver`] / [`CudaError::NoNvrtc`] instead of a
//! panic. Kernels are CUDA C sources in `kernels/` compiled by NVRTC for the device's
//! architecture on first use and cached on disk ([`compile`]). Every operator but one
//! reproduces the CPU contract's arithmetic (16-lane reductions with the fixed fold tree, the
//! contract `exp`, correctly rounded division and square root; see docs/kernels.md); the plain
//! matmul of MLX 4-bit and bf16 weights ([`slices`]) sums in an order of the GPU's own, held to
//! fidelity against the CPU. Either way each row's result is the same whatever the number of
//! rows in the call.

pub mod backend;
pub mod compile;
pub mod device;
pub mod error;
pub mod fused;
pub mod graphs;
pub mod hops;
#[cfg(test)]
mod host_cxx;
pub mod kv;
pub mod l2;
pub mod launch;
pub mod leave_out;
pub mod llama;
pub mod load;
pub mod mamba;
pub mod mma;
pub mod moe;
pub mod muse_spark;
pub mod nemotron_h;
pub mod ops;
pub mod quant;
pub mod select;
pub mod slices;
pub mod suite;
pub mod synthetic;
pub mod timeline;
pub mod weights;

pub use device::Gpu;
pub use error::{CudaError, Result};
pub use kv::GpuKv;
pub use weights::{GpuFormat, GpuMatrix};
