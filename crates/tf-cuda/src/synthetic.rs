//! (scaffold: filled in by the synthetic work)

/// Kernel entry points defined in kernels/synthetic.cu.
pub const KERNEL_NAMES: &[&str] = &[];
