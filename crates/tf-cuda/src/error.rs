//! Errors of the CUDA backend, each naming what went wrong and what to do.

/// Everything the CUDA backend can refuse or fail with.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// The CUDA driver library (libcuda) could not be loaded.
    #[error("no CUDA driver: libcuda could not be loaded (is this a machine with an NVIDIA GPU and driver? use --backend cpu otherwise)")]
    NoDriver,
    /// The NVRTC library could not be loaded.
    #[error("no NVRTC: libnvrtc could not be loaded (install the CUDA runtime compiler, e.g. `pip install nvidia-cuda-nvrtc==13.0.88`, and put its lib folder on LD_LIBRARY_PATH)")]
    NoNvrtc,
    /// The driver found no GPU at the requested ordinal.
    #[error("no CUDA device {ordinal}: the driver reports {count} device(s)")]
    NoDevice { ordinal: usize, count: usize },
    /// The GPU's compute capability has no kernels here.
    #[error("GPU not supported: compute capability {found}, need {need} or newer")]
    GpuNotSupported { found: String, need: String },
    /// A CUDA driver call failed.
    #[error("CUDA driver call failed during {during}: {source}")]
    Driver {
        during: &'static str,
        #[source]
        source: cudarc::driver::DriverError,
    },
    /// NVRTC rejected a kernel source.
    #[error("NVRTC could not compile {source_name} for {arch}:\n{log}")]
    Compile {
        source_name: String,
        arch: String,
        log: String,
    },
    /// The on-disk kernel cache could not be read or written.
    #[error("kernel cache {path}: {source}")]
    Cache {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A weight format has no GPU kernel.
    #[error("no CUDA kernel for weight format {format}")]
    UnsupportedFormat { format: String },
    /// The model family has no CUDA forward pass.
    #[error("no CUDA forward pass for the {family} family yet (use --backend cpu)")]
    UnsupportedFamily { family: String },
    /// The checkpoint and its stream slots do not fit in the device's free memory.
    #[error("the model does not fit on the GPU: weights {weights_gib:.2} GiB + KV for {slots} streams of {context} positions {kv_gib:.2} GiB, but {free_gib:.2} GiB are free (lower --parallel or --context, or use --backend cpu)")]
    DoesNotFit {
        weights_gib: f64,
        kv_gib: f64,
        slots: usize,
        context: usize,
        free_gib: f64,
    },
    /// A buffer or shape does not match what the operator needs.
    #[error("{op}: {detail}")]
    Shape { op: &'static str, detail: String },
    /// A kernel parameter is out of range.
    #[error("{op}: {what} = {value} is out of range ({why})")]
    Param {
        op: &'static str,
        what: &'static str,
        value: f64,
        why: &'static str,
    },
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, CudaError>;

/// Wraps a driver error with what was being done.
pub(crate) fn drv(during: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> CudaError {
    move |source| CudaError::Driver { during, source }
}
