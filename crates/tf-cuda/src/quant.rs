//! (scaffold: filled in by the quant work)

/// Kernel entry points defined in kernels/quant.cu.
pub const KERNEL_NAMES: &[&str] = &[];
