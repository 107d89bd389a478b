//! `tf-cuda-select [--quick] [--iters N]`: the sampler's candidate selection on GPU 0. Checks
//! the GPU candidates against the host selection bit for bit (vocabularies 49152 and 131072,
//! 1..=64 rows, the logit gather, the planted ties-by-higher-id control caught), then times, per
//! vocabulary and row count, downloading whole logits rows against selecting and downloading
//! candidates (median wall time of N rounds, each ending in a synchronizing download). Prints
//! PASS/FAIL last. Exit status: 0 pass, 1 fail, 2 no usable GPU.

use std::process::ExitCode;
use std::time::Instant;
use tf_cuda::select::{select, GpuCandidates, SELECT_CAP};
use tf_cuda::suite::select::{test_rows, VOCABS};
use tf_cuda::suite::{Depth, SuiteResult};
use tf_cuda::Gpu;

fn median_us(mut f: impl FnMut() -> tf_cuda::Result<()>, iters: usize) -> tf_cuda::Result<f64> {
    f()?; // warm-up
    let mut t = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t0 = Instant::now();
        f()?;
        t.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

fn timings(gpu: &Gpu, iters: usize) -> tf_cuda::Result<String> {
    let mut s = String::from(
        "| vocab | rows | download rows (us) | select + download candidates (us) |\n| ---: | ---: | ---: | ---: |\n",
    );
    for vocab in VOCABS {
        let dev = gpu.upload(&test_rows(vocab, 9).concat())?;
        let mut cands = GpuCandidates::new(gpu, 64, SELECT_CAP)?;
        let rows: Vec<usize> = (0..64).collect();
        for n in [1usize, 8, 64] {
            let full = median_us(|| gpu.download(&dev, n * vocab).map(drop), iters)?;
            let sel = median_us(
                || {
                    select(gpu, &dev, &rows[..n], vocab, &mut cands)?;
                    cands.download(gpu, n).map(drop)
                },
                iters,
            )?;
            s.push_str(&format!("| {vocab} | {n} | {full:.1} | {sel:.1} |\n"));
        }
    }
    Ok(s)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let depth = if args.iter().any(|a| a == "--quick") {
        Depth::Quick
    } else {
        Depth::Full
    };
    let iters = args
        .iter()
        .position(|a| a == "--iters")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(50usize)
        .max(1);
    let gpu = match Gpu::open(0) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("tf-cuda-select: {e}");
            return ExitCode::from(2);
        }
    };
    println!("device: {} ({})", gpu.info().name, gpu.info().arch);
    let mut result = SuiteResult::default();
    if let Err(e) = tf_cuda::suite::select::run(&gpu, depth, &mut result) {
        eprintln!("tf-cuda-select: {e}");
        println!("FAIL: {e}");
        return ExitCode::from(1);
    }
    println!("{}", result.table());
    match timings(&gpu, iters) {
        Ok(t) => println!("{t}"),
        Err(e) => {
            println!("FAIL: timing: {e}");
            return ExitCode::from(1);
        }
    }
    if result.passed() {
        println!(
            "PASS: GPU candidates == host selection bit for bit; the planted control was caught"
        );
        ExitCode::SUCCESS
    } else {
        println!("FAIL");
        ExitCode::from(1)
    }
}
