//! (scaffold: filled in by the moe work)

/// Kernel entry points defined in kernels/moe.cu.
pub const KERNEL_NAMES: &[&str] = &[];
