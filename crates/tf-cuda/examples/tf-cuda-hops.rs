//! `tf-cuda-hops [HOPS] [REPS]`: what a decode step's kernel boundaries cost on this GPU
//! (`tf_cuda::hops`): µs a launch in a graph's chain of kernels that do nothing (one block, and
//! a product-sized grid; each with and without `tf_lead`), and µs a grid-wide barrier among
//! resident blocks, the boundary a persistent kernel would have instead. Defaults: 1000 hops,
//! 20 repetitions.

use std::process::ExitCode;
use tf_cuda::Gpu;

fn main() -> ExitCode {
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (hops, reps) = (arg(1, 1000), arg(2, 20));
    let run = || -> tf_cuda::Result<()> {
        let gpu = Gpu::open(0)?;
        let h = tf_cuda::hops::probe(&gpu, hops, reps)?;
        println!(
            "device: {} ({} SMs); {hops} hops, {reps} repetitions",
            gpu.info().name,
            gpu.info().multiprocessors
        );
        println!("| boundary | us a hop |\n| --- | ---: |");
        let wide = h.wide_blocks;
        for (what, us) in [
            ("launch, one block after one block".to_string(), h.one_block),
            ("the same, tf_lead".to_string(), h.one_block_lead),
            (format!("launch, {wide} blocks after {wide}"), h.wide),
            ("the same, tf_lead".to_string(), h.wide_lead),
            ("grid barrier, one block an SM".to_string(), h.barrier_one),
            (format!("grid barrier, {wide} blocks"), h.barrier_wide),
        ] {
            println!("| {what} | {us:.2} |");
        }
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tf-cuda-hops: {e}");
            ExitCode::FAILURE
        }
    }
}
