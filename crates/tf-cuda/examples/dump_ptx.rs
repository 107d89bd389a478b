//! `dump_ptx [ARCH] [--probe]`: prints the program's PTX for an architecture (default
//! compute_90), compiled with NVRTC; `--probe`: the tensor-core probe's instead
//! (`tf_cuda::probe`).
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let probe = args.iter().any(|a| a == "--probe");
    let arch = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_else(|| "compute_90".into());
    let (name, source) = if probe {
        ("mma_mlx4.cu", tf_cuda::probe::MMA_MLX4_SOURCE.to_string())
    } else {
        ("tensorfold.cu", tf_cuda::compile::program_source())
    };
    match tf_cuda::compile::compile_to_ptx(name, &source, &arch) {
        Ok(ptx) => print!("{ptx}"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
