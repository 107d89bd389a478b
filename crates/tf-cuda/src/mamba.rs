//! (scaffold: filled in by the mamba work)

/// Kernel entry points defined in kernels/mamba.cu.
pub const KERNEL_NAMES: &[&str] = &[];
