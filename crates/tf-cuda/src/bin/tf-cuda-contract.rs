//! `tf-cuda-contract [--quick] [--out FILE]`: runs the kernel contract suite on GPU 0 and prints
//! a markdown table. Exit status: 0 all passed, 1 a case failed or a control was not caught,
//! 2 no usable GPU (no driver, no NVRTC, no device, unsupported compute capability).

use std::process::ExitCode;
use std::time::Instant;
use tf_cuda::suite::{run_all, Depth};
use tf_cuda::Gpu;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let depth = if args.iter().any(|a| a == "--quick") {
        Depth::Quick
    } else {
        Depth::Full
    };
    let out_path = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let t0 = Instant::now();
    let gpu = match Gpu::open(0) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("tf-cuda-contract: {e}");
            return ExitCode::from(2);
        }
    };
    let info = gpu.info();
    let header = format!(
        "device: {} (compute capability {}.{}, {:.1} GiB), kernels for {} ({:?}, {:.2} s to compile/load)\ndepth: {depth:?}\n",
        info.name,
        info.compute_capability.0,
        info.compute_capability.1,
        info.total_memory as f64 / (1u64 << 30) as f64,
        info.arch,
        info.ptx_origin,
        info.load_time.as_secs_f64()
    );
    print!("{header}");
    let result = match run_all(&gpu, depth) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tf-cuda-contract: {e}");
            return ExitCode::from(1);
        }
    };
    let table = result.table();
    let verdict = if result.passed() {
        "PASS: every case passed, every planted control was caught"
    } else {
        "FAIL"
    };
    let text = format!(
        "{header}\n{table}\n{verdict} ({:.1} s)\n",
        t0.elapsed().as_secs_f64()
    );
    println!("\n{table}\n{verdict} ({:.1} s)", t0.elapsed().as_secs_f64());
    if let Some(p) = out_path {
        if let Err(e) = std::fs::write(&p, text) {
            eprintln!("tf-cuda-contract: writing {p}: {e}");
        }
    }
    if result.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
