//! L2 prefetches of the weights a product will read, launched on their own stream
//! ([`Gpu::beside_l2`]) while the kernels before that product run (kernels/l2.cu): a decode
//! step's small kernels (norms, the Mamba scan, attention) leave DRAM idle, and a product whose
//! weights are already in L2 runs faster. A prefetch writes nothing, so no result depends on it.
//!
//! `TF_CUDA_L2` picks where Nemotron-H prefetches in one-row rounds: a comma list of `within`
//! (a mixer's later products: Mamba's out_proj, attention's o), `next` (the next layer's first
//! products on the path, during its norm: `Layer::first_products`). Unset means `within,next`,
//! `0` none. Sites measured slower or even and dropped (docs/perf.md): the next layer's first
//! products asked for before the last product of the layer before (sessions 29 and 45), the
//! routed experts' down matrices after the routing (29, and 47 in the mma tiles' places), a
//! latent MoE's fc2 anywhere in its layer (33, 45 and 47).

use crate::device::Gpu;
use crate::error::Result;
use crate::weights::GpuMatrix;
use cudarc::driver::{CudaView, LaunchConfig};
use std::ops::Range;

/// Kernel entry points defined in kernels/l2.cu.
pub const KERNEL_NAMES: [&str; 1] = ["tf_l2_prefetch"];

/// Threads a block of the prefetch kernels, a piece each: a 16 MB ask takes 8 SMs' bulk copy
/// engines. 16 to 64 threads (more SMs) and 256 or 512 (fewer) measured slower (docs/perf.md,
/// session 45).
pub(crate) const THREADS: u32 = 128;

/// Bytes a thread asks for at a time. An SM's bulk copy engine takes its asks in turn, yet
/// 1 KiB pieces over every SM measured slower than these over a few (docs/perf.md, session 28).
pub const PIECE: u32 = 16 << 10;

/// Bytes of a Mamba in_proj the `next` site asks for (of its rows on the path), not all of
/// them (24 MB measured slower, while a MoE layer's asks still took its shared expert:
/// docs/perf.md, session 44).
pub const IN_PROJ_HEAD: usize = 16 << 20;

/// Where a round prefetches (`TF_CUDA_L2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sites {
    /// A mixer's later products, during the kernels before them.
    pub within: bool,
    /// The next layer's first products, during its norm.
    pub next: bool,
}

impl Sites {
    /// Parses `TF_CUDA_L2`'s value (`None`: unset).
    pub fn parse(v: Option<&str>) -> Sites {
        let v = v.unwrap_or("within,next");
        let on = |name: &str| v.split(',').any(|s| s.trim() == name);
        Sites {
            within: on("within"),
            next: on("next"),
        }
    }

    /// The process's sites (read once) for a round of `n` rows: none but for one row, the
    /// only round measured to gain.
    pub fn for_rows(n: usize) -> Sites {
        static S: std::sync::OnceLock<Sites> = std::sync::OnceLock::new();
        let s = *S.get_or_init(|| Sites::parse(std::env::var("TF_CUDA_L2").ok().as_deref()));
        Sites {
            within: s.within && n == 1,
            next: s.next && n == 1,
        }
    }
}

/// Blocks for `bytes` bytes in [`PIECE`]s, one a thread, at most `max` blocks.
pub(crate) fn blocks(bytes: usize, max: usize) -> u32 {
    bytes
        .div_ceil(PIECE as usize)
        .div_ceil(THREADS as usize)
        .clamp(1, max.max(1)) as u32
}

/// Asks L2 for each byte range of a matrix's device bytes (clipped to them), on the prefetch
/// stream; nothing without side streams.
pub fn prefetch(g: &Gpu, parts: &[(&GpuMatrix, Range<usize>)]) -> Result<()> {
    let views: Vec<CudaView<u8>> = parts
        .iter()
        .map(|(m, r)| {
            let end = r.end.min(m.storage_bytes());
            m.bytes().slice(r.start.min(end)..end)
        })
        .filter(|v| !v.is_empty())
        .collect();
    for four in views.chunks(4) {
        let len = |i: usize| four.get(i).map_or(0, |v| v.len() as u64);
        let total: u64 = (0..4).map(len).sum();
        let view = |i: usize| four.get(i).unwrap_or(&four[0]);
        let cfg = LaunchConfig {
            grid_dim: (blocks(total as usize, g.info().multiprocessors), 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        g.beside_l2(|| {
            let mut b = g.launcher("tf_l2_prefetch")?;
            b.arg(view(0)).arg(view(1)).arg(view(2)).arg(view(3));
            let (n0, n1, n2, n3) = (len(0), len(1), len(2), len(3));
            b.arg(&n0).arg(&n1).arg(&n2).arg(&n3).arg(&PIECE);
            // SAFETY: (u8* x4, u64 x4, u32); each length is its view's, and the kernel only
            // asks L2 for those bytes (it reads and writes nothing).
            unsafe { b.go(cfg, "launching an L2 prefetch") }
        })?;
    }
    Ok(())
}

/// Each matrix whole.
pub fn prefetch_whole(g: &Gpu, ms: &[&GpuMatrix]) -> Result<()> {
    let parts: Vec<_> = ms.iter().map(|m| (*m, 0..usize::MAX)).collect();
    prefetch(g, &parts)
}

#[cfg(test)]
mod tests;
