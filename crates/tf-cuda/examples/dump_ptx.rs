//! `dump_ptx [ARCH] [--cache]`: prints the program's PTX for an architecture (default
//! compute_90), compiled with NVRTC; with `--cache`, writes it into the kernel cache instead
//! (`$TF_CUDA_CACHE`, ...: `tf_cuda::compile::cache_dir`) and prints the file's path, so a GPU
//! machine given that folder skips the compile (the key holds NVRTC's major and minor version:
//! use the NVRTC the GPU machine has, `nvidia-cuda-nvrtc==13.0.88`).
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cache = args.iter().any(|a| a == "--cache");
    let arch = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_else(|| "compute_90".into());
    let done = if cache {
        tf_cuda::compile::program_ptx(&arch).map(|p| {
            let nvrtc = tf_cuda::compile::nvrtc_version().unwrap_or_default();
            println!("{} (NVRTC {}.{})", p.path.display(), nvrtc.0, nvrtc.1);
        })
    } else {
        tf_cuda::compile::compile_to_ptx(
            "tensorfold.cu",
            &tf_cuda::compile::program_source(),
            &arch,
        )
        .map(|ptx| print!("{ptx}"))
    };
    if let Err(e) = done {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
