//! Contract cases for the quant kernels (scaffold).

use super::{Depth, SuiteResult};
use crate::device::Gpu;
use crate::error::CudaError;

/// Runs the quant cases.
pub(super) fn run(_gpu: &Gpu, _depth: Depth, _out: &mut SuiteResult) -> Result<(), CudaError> {
    Ok(())
}
