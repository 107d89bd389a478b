//! NVRTC compilation of the kernel sources, cached on disk by (source hash, arch, options, NVRTC
//! version).

use crate::error::{CudaError, Result};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions, Ptx};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// Shared definitions prepended to every program.
pub const COMMON: &str = include_str!("../kernels/common.cuh");

/// The kernel sources, `(file name, text)`; each is compiled after [`COMMON`].
pub const SOURCES: [(&str, &str); 16] = [
    ("matmul.cu", include_str!("../kernels/matmul.cu")),
    ("slices.cu", include_str!("../kernels/slices.cu")),
    ("mma.cu", include_str!("../kernels/mma.cu")),
    ("fused.cu", include_str!("../kernels/fused.cu")),
    ("mmg.cu", include_str!("../kernels/mmg.cu")),
    ("ops.cu", include_str!("../kernels/ops.cu")),
    ("norm_split.cu", include_str!("../kernels/norm_split.cu")),
    ("attention.cu", include_str!("../kernels/attention.cu")),
    ("quant.cu", include_str!("../kernels/quant.cu")),
    ("mamba.cu", include_str!("../kernels/mamba.cu")),
    ("moe.cu", include_str!("../kernels/moe.cu")),
    ("synthetic.cu", include_str!("../kernels/synthetic.cu")),
    ("llama_extra.cu", include_str!("../kernels/llama_extra.cu")),
    ("select.cu", include_str!("../kernels/select.cu")),
    ("l2.cu", include_str!("../kernels/l2.cu")),
    ("hops.cu", include_str!("../kernels/hops.cu")),
];

/// Options every program is compiled with: no contracted multiply-adds (each fma is written out),
/// IEEE division and square root, no fast math.
pub const NVRTC_FLAGS: [&str; 4] = [
    "--fmad=false",
    "--prec-div=true",
    "--prec-sqrt=true",
    "--std=c++17",
];

/// Environment switch: every kernel calls `tf_lead` right after its wait, the products too
/// (`TF_LEAD_ALL` in kernels/common.cuh), unless it is `0`.
pub const LEAD_ALL_ENV: &str = "TF_CUDA_LEAD_ALL";

/// The whole program: [`COMMON`] followed by every source in [`SOURCES`]; the timeline's
/// stamps defined first where [`crate::timeline::on`], and `TF_LEAD_ALL` unless
/// [`LEAD_ALL_ENV`] is `0`.
pub fn program_source() -> String {
    program_source_with(std::env::var(LEAD_ALL_ENV).map_or(true, |v| v != "0"))
}

/// [`program_source`] with every kernel leading or not.
pub fn program_source_with(lead_all: bool) -> String {
    let mut s = String::new();
    if crate::timeline::on() {
        s.push_str("#define TF_TIMELINE\n");
    }
    if lead_all {
        s.push_str("#define TF_LEAD_ALL\n");
    }
    s.push_str(COMMON);
    for (name, text) in SOURCES {
        s.push_str(&format!("\n// ---- {name} ----\n"));
        s.push_str(text);
    }
    s
}

/// Whether libnvrtc can be loaded.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to open the library by its candidate names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// NVRTC's (major, minor) version.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    if !nvrtc_present() {
        return Err(CudaError::NoNvrtc);
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present (checked above); the pointers are valid for the call.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if r != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(CudaError::Compile {
            source_name: "nvrtcVersion".into(),
            arch: String::new(),
            log: format!("{r:?}"),
        });
    }
    Ok((major, minor))
}

/// Compiles `source` to PTX for the virtual architecture `arch` (e.g. `compute_90`), no cache.
pub fn compile_to_ptx(source_name: &str, source: &str, arch: &str) -> Result<String> {
    if !nvrtc_present() {
        return Err(CudaError::NoNvrtc);
    }
    let mut options: Vec<String> = NVRTC_FLAGS.iter().map(|s| s.to_string()).collect();
    options.push(format!("--gpu-architecture={arch}"));
    let opts = CompileOptions {
        options,
        name: Some(source_name.to_string()),
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(source, opts).map_err(|e| CudaError::Compile {
        source_name: source_name.to_string(),
        arch: arch.to_string(),
        log: match e {
            CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
            other => format!("{other:?}"),
        },
    })?;
    Ok(ptx.to_src())
}

/// The kernel cache folder: `$TF_CUDA_CACHE`, else `$XDG_CACHE_HOME/tensorfold/cuda`, else
/// `$HOME/.cache/tensorfold/cuda`, else the system temp folder's `tensorfold-cuda`.
pub fn cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("TF_CUDA_CACHE") {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(p).join("tensorfold/cuda");
    }
    if let Some(p) = std::env::var_os("HOME") {
        return PathBuf::from(p).join(".cache/tensorfold/cuda");
    }
    std::env::temp_dir().join("tensorfold-cuda")
}

/// The cache key of a program: sha256 over source, arch, flags and NVRTC version.
pub fn cache_key(source: &str, arch: &str, nvrtc: (i32, i32)) -> String {
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    h.update([0]);
    h.update(arch.as_bytes());
    for f in NVRTC_FLAGS {
        h.update([0]);
        h.update(f.as_bytes());
    }
    h.update(format!("\0nvrtc {}.{}", nvrtc.0, nvrtc.1).as_bytes());
    hex::encode(h.finalize())
}

/// Where a compile came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PtxOrigin {
    /// Read from the disk cache.
    Cache,
    /// Compiled now (and written to the cache when possible).
    Compiled,
    /// Read from the disk cache with the machine code of its PTX beside it, assembled ahead
    /// ([`program_cubin`]), which the driver loads without translating the PTX.
    Cubin,
}

/// The whole program's PTX for one architecture.
pub struct Program {
    /// The PTX text.
    pub ptx: Ptx,
    /// Where it came from.
    pub origin: PtxOrigin,
    /// Its file in the kernel cache (`KEY.ptx`), written or not.
    pub path: PathBuf,
}

/// The whole program's PTX for `arch`, from the disk cache or compiled now and cached. A cache
/// that cannot be written is not an error (the PTX is still returned).
pub fn program_ptx(arch: &str) -> Result<Program> {
    let source = program_source();
    let key = cache_key(&source, arch, nvrtc_version()?);
    let path = cache_dir().join(format!("{key}.ptx"));
    if let Ok(text) = std::fs::read_to_string(&path) {
        if text.contains(".entry") {
            let (ptx, origin) = (Ptx::from_src(text), PtxOrigin::Cache);
            return Ok(Program { ptx, origin, path });
        }
    }
    let ptx = compile_to_ptx("tensorfold.cu", &source, arch)?;
    let _ = write_atomic(&path, &ptx);
    let (ptx, origin) = (Ptx::from_src(ptx), PtxOrigin::Compiled);
    Ok(Program { ptx, origin, path })
}

/// The machine code for `sm` (e.g. `sm_90`) of the PTX cached at `ptx_path`, where the kernel
/// cache holds it beside it (`KEY.SM.cubin`, assembled ahead by ptxas:
/// scripts/device/ptx-cache.sh); nothing is ever assembled here.
pub fn program_cubin(ptx_path: &std::path::Path, sm: &str) -> Option<Vec<u8>> {
    std::fs::read(ptx_path.with_extension(format!("{sm}.cubin"))).ok()
}

/// Writes `text` to `path` through a temporary file and a rename.
fn write_atomic(path: &std::path::Path, text: &str) -> Result<()> {
    let err = |source| CudaError::Cache {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}
