//! The GPU handle: a CUDA context, its streams (the main one and the side ones), and the compiled
//! kernels.

use crate::compile::{program_cubin, program_ptx, Program, PtxOrigin};
use crate::error::{drv, CudaError, Result};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Oldest compute capability the kernels are built for (warp shuffles with widths, fp16 cvt).
pub const MIN_COMPUTE_CAPABILITY: (i32, i32) = (7, 0);

/// Side streams a [`Gpu`] has for [`Gpu::beside`]; the last is [`L2_STREAM`].
pub const SIDE_STREAMS: usize = 3;

/// The side stream of [`Gpu::beside_l2`]'s prefetches.
pub const L2_STREAM: usize = SIDE_STREAMS - 1;

/// Every kernel entry point of the program (loaded at start; a missing one is an error).
pub const KERNELS: [&str; 25] = [
    "tf_matmul_f32",
    "tf_matmul_f16",
    "tf_matmul_bf16",
    "tf_matmul_q4_0",
    "tf_matmul_q4_1",
    "tf_matmul_q8_0",
    "tf_plant_matmul_q4_1_rowvar",
    "tf_embed_f32",
    "tf_embed_f16",
    "tf_embed_bf16",
    "tf_embed_q4_0",
    "tf_embed_q4_1",
    "tf_embed_q8_0",
    "tf_rms_norm",
    "tf_plant_rms_norm_short",
    "tf_add_rms_norm",
    "tf_plant_add_rms_norm_short",
    "tf_add2_rms_norm",
    "tf_rope",
    "tf_silu_mul",
    "tf_add_inplace",
    "tf_exp_map",
    "tf_kv_append",
    "tf_attend",
    "tf_rope_append",
];

/// Planted-control kernels beyond [`KERNELS`].
pub const PLANTED_KERNELS: [&str; 2] = ["tf_plant_attend_short", "tf_plant_attend_tile_sum"];

/// Matmul entries with a `tf_mmq` twin, `NAME_mmq` (4 threads a weight row; see
/// [`crate::weights::geometry_kernel`]): the plain and grouped matmuls of every format with
/// `tf_mmq`, and their planted controls.
pub fn mmq_kernels() -> Vec<String> {
    let mut v: Vec<String> = crate::weights::GpuFormat::ALL
        .iter()
        .filter(|f| f.has_mmq())
        .flat_map(|f| {
            let tag = f.kernel_tag();
            [format!("tf_matmul_{tag}"), format!("tf_moe_matmul_{tag}")]
        })
        .collect();
    v.extend(
        [
            "tf_plant_matmul_q4_1_rowvar",
            "tf_plant_matmul_mlx4_nibbles",
            "tf_plant_matmul_mlx4_fma",
            "tf_plant_moe_matmul_q4_1_rowvar",
        ]
        .map(String::from),
    );
    v
}

/// (input transform, epilogue) of the fused matmul kernels and their tiled twins; `tf_mmf` also
/// has (`norm`, `rope`).
pub const FUSED_VARIANTS: [(&str, &str); 7] = [
    ("none", "store"),
    ("none", "add"),
    ("norm", "store"),
    ("norm", "add"),
    ("silu", "store"),
    ("silu", "add"),
    ("norm", "swiglu"),
];
/// Formats with many-row matmul entries (kernels/mmg.cu).
pub const MMG_FORMATS: [&str; 7] = ["f32", "f16", "bf16", "q4_0", "q4_1", "q8_0", "mlx4"];

/// The fused matmul kernel for (format, transform, epilogue) names.
pub fn fused_kernel_name(format: &str, xform: &str, epilogue: &str) -> String {
    format!("tf_mmf_{format}_{xform}_{epilogue}")
}

/// The many-row twin of [`fused_kernel_name`] (kernels/mmg.cu).
pub fn mmg_kernel_name(format: &str, xform: &str, epilogue: &str) -> String {
    format!("tf_mmg_{format}_{xform}_{epilogue}")
}

/// Every kernel entry point the program must contain.
pub fn all_kernel_names() -> Vec<String> {
    let mut v: Vec<String> = KERNELS
        .iter()
        .chain(PLANTED_KERNELS.iter())
        .chain(crate::quant::KERNEL_NAMES)
        .chain(crate::mamba::KERNEL_NAMES)
        .chain(crate::moe::KERNEL_NAMES)
        .chain(crate::synthetic::KERNEL_NAMES)
        .chain(crate::llama::extra::KERNEL_NAMES)
        .chain(crate::select::KERNEL_NAMES)
        .chain(crate::l2::KERNEL_NAMES.iter())
        .chain(crate::hops::KERNEL_NAMES.iter())
        .chain(crate::slices::KERNEL_NAMES.iter())
        .chain(crate::mma::KERNEL_NAMES.iter())
        .map(|s| s.to_string())
        .chain(crate::mma::probe_kernel_names().map(str::to_string))
        .chain(crate::mma::compact_kernel_names())
        .chain(
            mmq_kernels()
                .iter()
                .map(|k| crate::weights::geometry_kernel(k, 4)),
        )
        .collect();
    // The fused matmuls of every format (fused.cu, and quant.cu for the K-quants and MLX).
    for f in crate::weights::GpuFormat::ALL {
        for (x, e) in FUSED_VARIANTS.into_iter().chain([("norm", "rope")]) {
            v.push(fused_kernel_name(f.kernel_tag(), x, e));
        }
    }
    for f in MMG_FORMATS {
        for (x, e) in FUSED_VARIANTS {
            v.push(mmg_kernel_name(f, x, e));
        }
    }
    v.push("tf_plant_mmg_q4_1_none_store".into());
    v
}

/// Facts about the opened device.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// The device's name as the driver reports it.
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Total device memory in bytes.
    pub total_memory: usize,
    /// The NVRTC target the kernels were compiled for (`compute_90`, ...).
    pub arch: String,
    /// Whether the PTX came from the disk cache.
    pub ptx_origin: PtxOrigin,
    /// Time to obtain the PTX (compile or cache read) and load the module.
    pub load_time: Duration,
    /// Streaming multiprocessors.
    pub multiprocessors: usize,
    /// Dynamic shared memory a block of the big kernels may take (the device's opt-in limit,
    /// less room for their static shared memory).
    pub smem_per_block: usize,
}

/// Blocks an SM holds at once, by kernel name, then (block size, shared memory).
type ResidentBlocks = HashMap<String, HashMap<(u32, u32), usize>>;

/// A CUDA device with the program loaded: the context, the stream every launch goes to, and
/// the kernels by name. Dropping it releases everything (RAII).
pub struct Gpu {
    stream: Arc<CudaStream>,
    /// The streams of [`Gpu::beside`]'s launches, [`SIDE_STREAMS`] of them (none with
    /// `TF_CUDA_SIDE_STREAM=0`: they go to the main stream in order).
    side: Vec<Arc<CudaStream>>,
    /// Which stream launches go to now: 0 the main one, `k + 1` side stream `k`.
    on_side: AtomicUsize,
    /// Bit `k`: side stream `k` has launches the main stream has not joined.
    forked: AtomicUsize,
    functions: HashMap<String, (CudaFunction, usize)>,
    /// [`Gpu::resident_blocks`] answers, asked of the driver once per (kernel, block size, shared
    /// memory), by kernel name so a lookup needs no owned key.
    resident: Mutex<ResidentBlocks>,
    info: DeviceInfo,
    /// The loaded program (its globals: [`crate::timeline`]).
    pub(crate) module: Arc<CudaModule>,
    _ctx: Arc<CudaContext>,
}

/// Whether the CUDA driver library can be loaded on this machine.
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the library by its candidate names.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Device µs per call of `launch(i)`, `i < iters`, timed on `stream` between two events (for
/// the benchmark examples).
pub fn time_us<E: From<cudarc::driver::DriverError>>(
    stream: &CudaStream,
    iters: usize,
    mut launch: impl FnMut(usize) -> std::result::Result<(), E>,
) -> std::result::Result<f64, E> {
    let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
    let t0 = stream.record_event(flags)?;
    for i in 0..iters {
        launch(i)?;
    }
    let t1 = stream.record_event(flags)?;
    t1.synchronize()?;
    Ok(f64::from(t0.elapsed_ms(&t1)?) * 1e3 / iters as f64)
}

/// Makes `waiter` wait for the work enqueued on `on` so far.
fn wait_for(waiter: &CudaStream, on: &CudaStream) -> Result<()> {
    let done = on
        .record_event(Some(
            cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
        ))
        .map_err(drv("recording an event"))?;
    waiter.wait(&done).map_err(drv("waiting for an event"))
}

impl Gpu {
    /// Opens device `ordinal`, checks its compute capability, and compiles (or reads from the
    /// cache) and loads the kernels. Refuses by name: no driver, no NVRTC, no such device, an
    /// unsupported compute capability.
    pub fn open(ordinal: usize) -> Result<Gpu> {
        if !driver_present() {
            return Err(CudaError::NoDriver);
        }
        if !crate::compile::nvrtc_present() {
            return Err(CudaError::NoNvrtc);
        }
        let count = CudaContext::device_count().map_err(drv("counting devices"))?;
        if ordinal >= count.max(0) as usize {
            return Err(CudaError::NoDevice {
                ordinal,
                count: count.max(0) as usize,
            });
        }
        let ctx = CudaContext::new(ordinal).map_err(drv("creating the context"))?;
        let cc = ctx
            .compute_capability()
            .map_err(drv("reading the compute capability"))?;
        if cc < MIN_COMPUTE_CAPABILITY {
            return Err(CudaError::GpuNotSupported {
                found: format!("{}.{}", cc.0, cc.1),
                need: format!("{}.{}", MIN_COMPUTE_CAPABILITY.0, MIN_COMPUTE_CAPABILITY.1),
            });
        }
        // One stream, ordered launches: the driver-side event tracking is not needed.
        // SAFETY: no other stream uses this context's buffers.
        unsafe { ctx.disable_event_tracking() };
        // A created stream (not the legacy default stream): graph capture needs one.
        let stream = ctx.new_stream().map_err(drv("creating a stream"))?;
        let side_off = std::env::var("TF_CUDA_SIDE_STREAM").is_ok_and(|v| v == "0");
        let side = match side_off {
            true => Vec::new(),
            false => (0..SIDE_STREAMS)
                .map(|_| ctx.new_stream().map_err(drv("creating a stream")))
                .collect::<Result<_>>()?,
        };
        let arch = format!("compute_{}{}", cc.0, cc.1);
        let t0 = Instant::now();
        let Program {
            ptx,
            origin: mut ptx_origin,
            path,
        } = program_ptx(&arch)?;
        let counts: HashMap<String, usize> = crate::launch::ptx_param_counts(&ptx.to_src())
            .into_iter()
            .collect();
        // The PTX's machine code where the cache holds it (the driver's translation of the PTX
        // otherwise), the PTX where the driver refuses it.
        let sm = format!("sm_{}{}", cc.0, cc.1);
        let cubin = program_cubin(&path, &sm)
            .and_then(|bin| ctx.load_module(cudarc::nvrtc::Ptx::from_binary(bin)).ok());
        let module = match cubin {
            Some(m) => {
                ptx_origin = PtxOrigin::Cubin;
                m
            }
            None => ctx
                .load_module(ptx)
                .map_err(drv("loading the kernel module"))?,
        };
        let mut functions = HashMap::new();
        for name in all_kernel_names() {
            let f = module
                .load_function(&name)
                .map_err(drv("looking up a kernel"))?;
            let params = counts.get(&name).copied().ok_or_else(|| CudaError::Shape {
                op: "kernel lookup",
                detail: format!("no PTX signature for {name}"),
            })?;
            functions.insert(name, (f, params));
        }
        // Let the kernels that stage tiles in shared memory take up to the opt-in limit.
        let optin = ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .map_err(drv("reading the shared memory limit"))?
            .max(48 * 1024) as usize;
        let smem_per_block = optin - 1024;
        for (name, (f, _)) in &functions {
            if name.starts_with("tf_mmf_")
                || name.contains("attend")
                || name.contains("slices_")
                || name.starts_with("tf_probe_tiles")
            {
                f.set_attribute(
                    cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    smem_per_block as i32,
                )
                .map_err(drv("raising a kernel's shared memory limit"))?;
            }
        }
        // The tensor cores' product stages x beside its static reduction buffer.
        let staged = crate::mma::TILE_READERS
            .iter()
            .map(|n| n.to_string())
            .chain(crate::mma::compact_kernel_names())
            .filter(|n| n.trim_end_matches("_b16").ends_with("_staged"));
        for name in staged {
            let (f, _) = &functions[&name];
            f.set_attribute(
                cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                crate::mma::STAGING_MAX as i32,
            )
            .map_err(drv("raising a kernel's shared memory limit"))?;
        }
        let multiprocessors = ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(drv("reading the multiprocessor count"))?
            .max(1) as usize;
        let info = DeviceInfo {
            name: ctx.name().map_err(drv("reading the device name"))?,
            multiprocessors,
            compute_capability: cc,
            total_memory: ctx.total_mem().map_err(drv("reading the memory size"))?,
            arch,
            ptx_origin,
            load_time: t0.elapsed(),
            smem_per_block,
        };
        Ok(Gpu {
            stream,
            side,
            on_side: AtomicUsize::new(0),
            forked: AtomicUsize::new(0),
            functions,
            resident: Mutex::new(HashMap::new()),
            info,
            module,
            _ctx: ctx,
        })
    }

    /// Facts about the device.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The main stream: every launch goes to it but [`Gpu::beside`]'s, and every copy.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Enqueues `launch`'s launches on side stream `k` (< [`SIDE_STREAMS`]), to run beside what
    /// the main stream does next: they start after everything enqueued so far on the main
    /// stream. Before anything reads what they write, and before the round ends, call
    /// [`Gpu::join_side`]. Inside a graph capture the side stream joins the capture, and the
    /// graph holds the branches.
    pub fn beside(&self, k: usize, launch: impl FnOnce() -> Result<()>) -> Result<()> {
        let Some(side) = self.side.get(k) else {
            return launch();
        };
        wait_for(side, &self.stream)?;
        self.forked.fetch_or(1 << k, Ordering::Relaxed);
        self.on_side.store(k + 1, Ordering::Relaxed);
        let launched = launch();
        self.on_side.store(0, Ordering::Relaxed);
        launched
    }

    /// [`Gpu::beside`] on [`L2_STREAM`] for launches that only warm the L2 cache
    /// ([`crate::l2`]): without side streams they are left out, not run in order.
    pub fn beside_l2(&self, launch: impl FnOnce() -> Result<()>) -> Result<()> {
        match self.side.is_empty() {
            true => Ok(()),
            false => self.beside(L2_STREAM, launch),
        }
    }

    /// Makes the main stream wait for side stream `k`'s launches; nothing if it has none since
    /// the last join (inside a graph capture, a stream the capture never forked to cannot be
    /// waited for).
    pub fn join_side(&self, k: usize) -> Result<()> {
        let forked = self.forked.fetch_and(!(1 << k), Ordering::Relaxed) & (1 << k) != 0;
        match self.side.get(k) {
            Some(side) if forked => wait_for(&self.stream, side),
            _ => Ok(()),
        }
    }

    /// Forgets the side streams forked to since their last join, after a round that failed
    /// before joining them: a graph capture that then joined one it never forked to would be
    /// refused.
    pub fn forget_forks(&self) {
        self.forked.store(0, Ordering::Relaxed);
    }

    /// The kernel `name` (one of [`all_kernel_names`]).
    pub fn function(&self, name: &str) -> Result<&CudaFunction> {
        self.entry(name).map(|e| &e.0)
    }

    fn entry(&self, name: &str) -> Result<&(CudaFunction, usize)> {
        self.functions.get(name).ok_or_else(|| CudaError::Shape {
            op: "kernel lookup",
            detail: format!("no kernel named {name}"),
        })
    }

    /// Registers a thread of kernel `name` uses (as compiled for this device).
    pub fn registers(&self, name: &str) -> Result<i32> {
        self.entry(name)?
            .0
            .num_regs()
            .map_err(drv("reading a kernel's register count"))
    }

    /// Blocks of `threads` threads of kernel `name` with `smem` bytes of dynamic shared memory
    /// an SM holds at once, as the driver's occupancy calculator says (asked once, then
    /// remembered).
    pub fn resident_blocks(&self, name: &str, threads: u32, smem: u32) -> Result<usize> {
        let asked =
            |map: &ResidentBlocks| map.get(name).and_then(|m| m.get(&(threads, smem))).copied();
        if let Some(n) = asked(&self.lock_resident()) {
            return Ok(n);
        }
        let n = self
            .entry(name)?
            .0
            .occupancy_max_active_blocks_per_multiprocessor(threads, smem as usize, None)
            .map_err(drv("reading a kernel's occupancy"))? as usize;
        self.lock_resident()
            .entry(name.to_string())
            .or_default()
            .insert((threads, smem), n);
        Ok(n)
    }

    fn lock_resident(&self) -> std::sync::MutexGuard<'_, ResidentBlocks> {
        // A poisoned map still holds only correct answers.
        self.resident.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A launch of kernel `name` on the stream, checked against its parameter count.
    pub(crate) fn launcher(&self, name: &str) -> Result<crate::launch::Launch<'_>> {
        let (f, params) = self.entry(name)?;
        let stream = match self.on_side.load(Ordering::Relaxed) {
            0 => &self.stream,
            k => &self.side[k - 1],
        };
        Ok(crate::launch::Launch::new(
            self,
            stream.launch_builder(f),
            name,
            *params,
        ))
    }

    /// Copies a host slice to a new device buffer.
    pub fn upload<T: DeviceRepr>(&self, host: &[T]) -> Result<CudaSlice<T>> {
        self.stream
            .clone_htod(host)
            .map_err(drv("copying to the device"))
    }

    /// A new device buffer of `len` zeroed elements.
    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, len: usize) -> Result<CudaSlice<T>> {
        self.stream
            .alloc_zeros(len.max(1))
            .map_err(drv("allocating device memory"))
    }

    /// Copies host data into an existing device buffer (its first `host.len()` elements).
    pub fn write<T: DeviceRepr>(&self, host: &[T], dst: &mut CudaSlice<T>) -> Result<()> {
        if host.len() > dst.len() {
            return Err(CudaError::Shape {
                op: "upload",
                detail: format!("{} elements into a buffer of {}", host.len(), dst.len()),
            });
        }
        if host.is_empty() {
            return Ok(());
        }
        let mut view = dst.slice_mut(..host.len());
        self.stream
            .memcpy_htod(host, &mut view)
            .map_err(drv("copying to the device"))
    }

    /// Copies the first `len` elements of a device buffer back to the host (synchronizes).
    pub fn download<T: DeviceRepr + Default + Clone>(
        &self,
        src: &CudaSlice<T>,
        len: usize,
    ) -> Result<Vec<T>> {
        if len > src.len() {
            return Err(CudaError::Shape {
                op: "download",
                detail: format!("{len} elements from a buffer of {}", src.len()),
            });
        }
        let mut out = vec![T::default(); len];
        if len > 0 {
            self.stream
                .memcpy_dtoh(&src.slice(..len), &mut out)
                .map_err(drv("copying from the device"))?;
        }
        self.synchronize()?;
        Ok(out)
    }

    /// Free device memory in bytes now.
    pub fn free_memory(&self) -> Result<usize> {
        self._ctx
            .mem_get_info()
            .map(|(free, _)| free)
            .map_err(drv("reading free device memory"))
    }

    /// Makes the device's context current on the calling thread (a model built on one thread
    /// and run on another).
    pub fn bind_to_thread(&self) -> Result<()> {
        self._ctx
            .bind_to_thread()
            .map_err(drv("binding the context to this thread"))
    }

    /// Waits for every launch so far (on every stream) and reports any asynchronous error.
    pub fn synchronize(&self) -> Result<()> {
        for s in std::iter::once(&self.stream).chain(&self.side) {
            s.synchronize().map_err(drv("synchronizing the stream"))?;
        }
        Ok(())
    }
}
