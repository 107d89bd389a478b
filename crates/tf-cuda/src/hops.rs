//! What a decode step's kernel boundaries cost, measured on the device (kernels/hops.cu;
//! `tf-cuda-hops`): chains of kernels that do nothing but wait for the one before, replayed
//! from a graph whose edges are programmatic as a round's are (one block each, and a product's
//! grid), against grid-wide barriers inside one launch whose blocks are all resident, the
//! boundary a persistent kernel would have in place of a launch.

use crate::device::Gpu;
use crate::error::Result;
use crate::graphs::Graphs;
use cudarc::driver::{CudaSlice, LaunchConfig};
use std::time::Instant;

/// Kernel entry points defined in kernels/hops.cu.
pub const KERNEL_NAMES: [&str; 2] = ["tf_hop", "tf_hop_barriers"];

/// Threads a block of every probe.
const THREADS: u32 = 128;

/// Blocks an SM of the wide probes: about what a product's grid keeps resident.
const WIDE: usize = 4;

/// µs a boundary, each way of crossing it.
#[derive(Clone, Copy, Debug)]
pub struct Hops {
    /// Blocks of the wide probes.
    pub wide_blocks: usize,
    /// A launch of one block after one block.
    pub one_block: f64,
    /// The same, each letting the next launch at its start (`tf_lead`).
    pub one_block_lead: f64,
    /// A launch of the wide grid after another.
    pub wide: f64,
    /// The same, with `tf_lead`.
    pub wide_lead: f64,
    /// A grid barrier among one block an SM.
    pub barrier_one: f64,
    /// A grid barrier among the wide grid's blocks.
    pub barrier_wide: f64,
}

/// Measures each boundary over `hops` in a row, `reps` times.
pub fn probe(gpu: &Gpu, hops: usize, reps: usize) -> Result<Hops> {
    let sms = gpu.info().multiprocessors;
    let wide_blocks = sms * WIDE;
    let hops = hops.max(2);
    Ok(Hops {
        wide_blocks,
        one_block: chain(gpu, 1, false, hops, reps)?,
        one_block_lead: chain(gpu, 1, true, hops, reps)?,
        wide: chain(gpu, wide_blocks, false, hops, reps)?,
        wide_lead: chain(gpu, wide_blocks, true, hops, reps)?,
        barrier_one: barriers(gpu, sms, hops, reps)?,
        barrier_wide: barriers(gpu, wide_blocks, hops, reps)?,
    })
}

fn config(blocks: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// µs a launch of `hops` `tf_hop` launches of `blocks` blocks captured in a graph and replayed.
fn chain(gpu: &Gpu, blocks: usize, lead: bool, hops: usize, reps: usize) -> Result<f64> {
    let lead = lead as i32;
    let mut graphs = Graphs::default();
    let mut replay = || {
        graphs.run(gpu.stream().clone(), 0, true, || {
            for _ in 0..hops {
                let mut b = gpu.launcher("tf_hop")?;
                b.arg(&lead);
                // SAFETY: (i32); the kernel reads and writes no memory.
                unsafe { b.go(config(blocks), "launching a hop") }?;
            }
            Ok(())
        })
    };
    replay()?; // captured, and run once
    gpu.synchronize()?;
    let t = Instant::now();
    for _ in 0..reps {
        replay()?;
    }
    gpu.synchronize()?;
    Ok(t.elapsed().as_secs_f64() * 1e6 / (reps * hops) as f64)
}

/// µs a grid barrier among `blocks` resident blocks: a launch of `hops` barriers against one of
/// a single barrier, their difference over the `hops - 1` more.
fn barriers(gpu: &Gpu, blocks: usize, hops: usize, reps: usize) -> Result<f64> {
    let mut count: CudaSlice<u32> = gpu.zeros(1)?;
    let mut gen: CudaSlice<u32> = gpu.zeros(1)?;
    let mut time = |rounds: usize| -> Result<f64> {
        let r = rounds as i32;
        let mut launch = || -> Result<()> {
            let mut b = gpu.launcher("tf_hop_barriers")?;
            b.arg(&mut count).arg(&mut gen).arg(&r);
            // SAFETY: (u32*, u32*, i32); one element each; a cooperative launch keeps every
            // block resident, which the barrier needs, or fails.
            unsafe { b.go_cooperative(config(blocks), "launching grid barriers") }
        };
        launch()?;
        gpu.synchronize()?;
        let t = Instant::now();
        for _ in 0..reps {
            launch()?;
        }
        gpu.synchronize()?;
        Ok(t.elapsed().as_secs_f64() * 1e6 / reps as f64)
    };
    let one = time(1)?;
    let many = time(hops)?;
    Ok((many - one) / (hops - 1) as f64)
}
