//! Operators under the kernel contract: a reference implementation and fast CPU versions.

pub mod matmul;
pub mod ops;
