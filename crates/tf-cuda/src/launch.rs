//! Kernel launches that check their argument count against the kernel's PTX signature, so a
//! wrapper that pushes too few or too many arguments is an error, not a crash in the driver.
//! A kernel that waits for the grid before it (`tf_grid_wait`, kernels/common.cuh) is launched
//! early where the device allows it (programmatic dependent launch): its blocks are scheduled
//! while that grid finishes, which hides most of the gap between two short kernels.

use crate::device::Gpu;
use crate::error::{drv, CudaError, Result};
use cudarc::driver::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig};
use std::ffi::c_void;

/// The PTX entries, each with the text of its body (up to the next entry).
fn ptx_entries(ptx: &str) -> impl Iterator<Item = (&str, &str)> {
    ptx.split(".entry ").skip(1).map(|chunk| {
        let end = chunk
            .find(|c: char| c == '(' || c.is_whitespace())
            .unwrap_or(chunk.len());
        (&chunk[..end], chunk)
    })
}

/// Parameter counts of every `.entry` in a PTX text, by kernel name.
pub fn ptx_param_counts(ptx: &str) -> Vec<(String, usize)> {
    ptx_entries(ptx)
        .map(|(name, body)| {
            let params = match (body.find('('), body.find(')')) {
                (Some(a), Some(b)) if a < b => body[a..b].matches(".param").count(),
                _ => 0,
            };
            (name.to_string(), params)
        })
        .collect()
}

/// The entries of a PTX text that wait for the grid before them (`griddepcontrol.wait`): the
/// kernels that may be launched early.
pub fn ptx_grid_waits(ptx: &str) -> Vec<String> {
    ptx_entries(ptx)
        .filter(|(_, body)| body.contains("griddepcontrol.wait"))
        .map(|(name, _)| name.to_string())
        .collect()
}

/// Whether this device and driver take early launches, inside CUDA graphs too (compute
/// capability 9.0 and a CUDA 12.3 driver or newer), and `TF_CUDA_EARLY_LAUNCH` is not `0`.
pub(crate) fn early_launch_available(cc: (i32, i32), driver_version: i32) -> bool {
    let off = std::env::var("TF_CUDA_EARLY_LAUNCH").is_ok_and(|v| v == "0");
    !off && cc.0 >= 9 && driver_version >= 12030
}

/// The CUDA version of the loaded driver (e.g. 13000 for 13.0).
pub(crate) fn driver_version() -> Result<i32> {
    let mut v = 0;
    // SAFETY: the driver library is loaded (the context exists); the pointer is valid.
    unsafe { sys::cuDriverGetVersion(&mut v) }
        .result()
        .map_err(drv("reading the driver version"))?;
    Ok(v)
}

/// A value a kernel takes as one argument, as the 8-byte cell the driver reads it from: a
/// buffer's device address, or a scalar's bits in the low bytes (the host is little-endian).
pub(crate) trait KernelArg {
    /// The cell's contents.
    fn cell(self, stream: &CudaStream) -> u64;
}

impl<T> KernelArg for &CudaSlice<T> {
    fn cell(self, stream: &CudaStream) -> u64 {
        self.device_ptr(stream).0
    }
}

impl<T> KernelArg for &mut CudaSlice<T> {
    fn cell(self, stream: &CudaStream) -> u64 {
        self.device_ptr_mut(stream).0
    }
}

impl KernelArg for &i32 {
    fn cell(self, _: &CudaStream) -> u64 {
        *self as u32 as u64
    }
}

impl KernelArg for &u32 {
    fn cell(self, _: &CudaStream) -> u64 {
        *self as u64
    }
}

impl KernelArg for &f32 {
    fn cell(self, _: &CudaStream) -> u64 {
        self.to_bits() as u64
    }
}

impl KernelArg for &u64 {
    fn cell(self, _: &CudaStream) -> u64 {
        *self
    }
}

impl KernelArg for &i64 {
    fn cell(self, _: &CudaStream) -> u64 {
        *self as u64
    }
}

/// A launch being built: the kernel, its argument cells, and whether it may launch early.
pub(crate) struct Launch<'a> {
    gpu: &'a Gpu,
    function: sys::CUfunction,
    name: String,
    want: usize,
    early: bool,
    cells: Vec<u64>,
}

impl<'a> Launch<'a> {
    pub(crate) fn new(
        gpu: &'a Gpu,
        function: sys::CUfunction,
        name: &str,
        want: usize,
        early: bool,
    ) -> Launch<'a> {
        Launch {
            gpu,
            function,
            name: name.to_string(),
            want,
            early,
            cells: Vec::with_capacity(want),
        }
    }

    /// Pushes one kernel argument.
    pub(crate) fn arg(&mut self, a: impl KernelArg) -> &mut Self {
        let cell = a.cell(self.gpu.stream());
        self.cells.push(cell);
        self
    }

    /// Launches after checking the argument count (traced and synchronized under
    /// `TF_CUDA_TRACE`).
    ///
    /// # Safety
    /// The arguments must have the kernel's types in its order, and the buffers must hold what
    /// the kernel reads and writes.
    pub(crate) unsafe fn go(&mut self, cfg: LaunchConfig, during: &'static str) -> Result<()> {
        if self.cells.len() != self.want {
            return Err(CudaError::Shape {
                op: "kernel launch",
                detail: format!(
                    "{} takes {} arguments, {} were pushed",
                    self.name,
                    self.want,
                    self.cells.len()
                ),
            });
        }
        if crate::leave_out::skipped(&self.name) {
            return Ok(());
        }
        crate::ops::trace(&self.name);
        let stream = self.gpu.stream();
        stream.context().bind_to_thread().map_err(drv(during))?;
        let mut params: Vec<*mut c_void> = self
            .cells
            .iter_mut()
            .map(|c| c as *mut u64 as *mut c_void)
            .collect();
        // SAFETY: a zeroed attribute is a valid value of this plain C struct.
        let mut early: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        early.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        early.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: stream.cu_stream(),
            attrs: &mut early,
            numAttrs: u32::from(self.early),
        };
        // SAFETY: the caller's contract; the count was checked above; every cell outlives the
        // call, which copies the arguments.
        unsafe {
            sys::cuLaunchKernelEx(
                &config,
                self.function,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
        .map_err(drv(during))?;
        crate::ops::traced(self.gpu, during)
    }
}
