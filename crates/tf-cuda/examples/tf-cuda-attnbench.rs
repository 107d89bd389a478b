//! `tf-cuda-attnbench [--iters N]`: attention alone at decode (every row at the last position
//! of its own full cache), timed across context lengths up to 262,144 positions, on the shapes
//! of Nemotron-H 8B (32q/8kv x 128) and the default model (9q/3kv x 64).
//!
//! For each shape the capacities are 4096, the largest whose scores fit shared memory in one
//! tile (`S`), `S + 16` (the launch then tiles: the longest rows take two passes over their
//! keys), 131,072 and 262,144; rows 1 and 8. Back-to-back `ops::attend` launches between two
//! CUDA events: microseconds per call, and GB/s of the cache bytes a call must read at least
//! once (keys and values of every row's kv heads; a tiled row reads its keys twice, and every
//! query head of a group reads its kv head again). Correctness is the contract suite's
//! (tf-cuda-contract: GPU == CPU bits in one tile and in many); this only times. Prints PASS
//! last when every launch ran, FAIL and a non-zero exit on an error.

use std::process::ExitCode;
use tf_cuda::ops::{self, AttnShape, GpuRows};
use tf_cuda::{Gpu, GpuKv};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let iters = args
        .iter()
        .position(|a| a == "--iters")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(20)
        .max(1);
    match run(iters) {
        Ok(()) => {
            println!("\nPASS: every launch ran (timing only; correctness: tf-cuda-contract)");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("\nFAIL: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(iters: usize) -> Res<()> {
    let gpu = Gpu::open(0)?;
    let limit = gpu.info().smem_per_block;
    println!(
        "device: {}, {limit} bytes of shared memory per block\n",
        gpu.info().name
    );
    println!("| shape | capacity | tile (keys) | passes | rows | us per call | cache GB/s |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (label, heads, kv_heads, hd) in [
        ("32q/8kv x 128", 32usize, 8usize, 128usize),
        ("9q/3kv x 64", 9, 3, 64),
    ] {
        // The largest capacity held in one tile: scores + query + two value chunks.
        let one = (limit / 4 - hd.div_ceil(4) * 4 - 2 * 64 * hd) / 4 * 4;
        for capacity in [4096, one, one + 16, 131_072, 262_144] {
            for rows in [1usize, 8] {
                bench(&gpu, label, (heads, kv_heads, hd), capacity, rows, iters)?;
            }
        }
    }
    Ok(())
}

fn bench(
    gpu: &Gpu,
    label: &str,
    (heads, kv_heads, hd): (usize, usize, usize),
    capacity: usize,
    rows: usize,
    iters: usize,
) -> Res<()> {
    let limit = gpu.info().smem_per_block;
    let tile = ops::attend_tile(capacity, hd, limit).ok_or("no tile fits")?;
    // One slot per row, every row at the last position (keys 0..capacity).
    let kv = GpuKv::new(gpu, rows, 1, capacity, kv_heads, hd)?;
    let mut r = GpuRows::new(gpu, rows)?;
    let slots: Vec<usize> = (0..rows).collect();
    r.set(gpu, &kv, &slots, &vec![capacity - 1; rows])?;
    let q: Vec<f32> = (0..rows * heads * hd)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let q = gpu.upload(&q)?;
    let mut out = gpu.zeros::<f32>(rows * heads * hd)?;
    let shape = AttnShape {
        heads,
        kv_heads,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
        window: None,
    };
    ops::attend(gpu, &q, &kv, &r, 0, &shape, &mut out)?;
    gpu.synchronize()?;
    let stream = gpu.stream();
    let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
    let t0 = stream.record_event(flags)?;
    for _ in 0..iters {
        ops::attend(gpu, &q, &kv, &r, 0, &shape, &mut out)?;
    }
    let t1 = stream.record_event(flags)?;
    t1.synchronize()?;
    let us = t0.elapsed_ms(&t1)? as f64 * 1e3 / iters as f64;
    let bytes = (rows * capacity * kv_heads * hd * 4 * 2) as f64;
    let passes = if capacity <= tile { 1 } else { 2 };
    println!(
        "| {label} | {capacity} | {tile} | {passes} | {rows} | {us:.1} | {:.0} |",
        bytes / (us * 1e-6) / 1e9
    );
    Ok(())
}
