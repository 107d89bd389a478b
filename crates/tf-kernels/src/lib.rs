//! Operators under the kernel contract: a reference implementation and fast CPU versions.

pub mod contract;
pub mod matmul;
pub mod ops;
pub mod pool;
