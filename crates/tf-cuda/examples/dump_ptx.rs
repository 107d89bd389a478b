//! `dump_ptx [ARCH]`: prints the program's PTX for an architecture (default compute_90),
//! compiled with NVRTC.
fn main() {
    let arch = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "compute_90".into());
    match tf_cuda::compile::compile_to_ptx(
        "tensorfold.cu",
        &tf_cuda::compile::program_source(),
        &arch,
    ) {
        Ok(ptx) => print!("{ptx}"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
