//! L2 prefetches of the weights a product will read, launched on their own stream
//! ([`Gpu::beside_l2`]) while the kernels before that product run (kernels/l2.cu): a decode
//! step's small kernels (norms, routing, the Mamba scan) leave DRAM idle, and a product whose
//! weights are already in L2 runs faster. A prefetch writes nothing, so no result depends on it.
//!
//! `TF_CUDA_L2` picks where Nemotron-H prefetches: a comma list of `within` (a mixer's later
//! products: Mamba's out_proj, attention's o), `experts` (the routed experts' matrices and fc2,
//! after the routing), `next` (the next layer's first products, during its norm); unset means
//! all, `0` none.

use crate::device::Gpu;
use crate::error::Result;
use crate::weights::GpuMatrix;
use cudarc::driver::{CudaSlice, LaunchConfig};

/// Kernel entry points defined in kernels/l2.cu.
pub const KERNEL_NAMES: [&str; 2] = ["tf_l2_prefetch", "tf_moe_l2_prefetch"];

/// Threads a block of the prefetch kernels.
pub(crate) const THREADS: u32 = 128;

/// Where a round prefetches (`TF_CUDA_L2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sites {
    /// A mixer's later products, during the kernels before them.
    pub within: bool,
    /// The routed experts a round picked (and the latent fc2), after the routing.
    pub experts: bool,
    /// The next layer's first products, during its norm.
    pub next: bool,
}

impl Sites {
    /// Parses `TF_CUDA_L2`'s value (`None`: unset).
    pub fn parse(v: Option<&str>) -> Sites {
        let on = |name: &str| match v {
            None => true,
            Some(v) => v.split(',').any(|s| s.trim() == name),
        };
        Sites {
            within: on("within"),
            experts: on("experts"),
            next: on("next"),
        }
    }

    /// The process's sites (read once) for a round of `n` rows: none past [`MAX_ROWS`] (their
    /// products are less held by memory), the routed experts only for one row (more rows'
    /// experts would not fit in L2).
    pub fn for_rows(n: usize) -> Sites {
        static S: std::sync::OnceLock<Sites> = std::sync::OnceLock::new();
        let s = *S.get_or_init(|| Sites::parse(std::env::var("TF_CUDA_L2").ok().as_deref()));
        Sites {
            within: s.within && n <= MAX_ROWS,
            experts: s.experts && n == 1,
            next: s.next && n <= MAX_ROWS,
        }
    }
}

/// Rows a round may have and still prefetch.
pub const MAX_ROWS: usize = 4;

/// Bytes of a Mamba in_proj the `next` site asks for (`TF_CUDA_L2_HEAD`, MiB; default 16):
/// its first blocks' tiles, not all of it, which would not fit in L2 beside the rest.
pub fn head_bytes() -> usize {
    static H: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *H.get_or_init(|| {
        std::env::var("TF_CUDA_L2_HEAD")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(16)
            << 20
    })
}

/// The bytes a thread asks for at a time, for `bytes` bytes over `threads` threads: one piece
/// each, whole 16-byte units, 1 KiB to 64 KiB (`TF_CUDA_L2_CHUNK` fixes it). Spread wide: an
/// SM's bulk copy engine takes the asks in turn, so a few SMs asking for many bytes are slow.
pub fn piece(bytes: usize, threads: usize) -> u32 {
    static C: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let fixed = *C.get_or_init(|| {
        std::env::var("TF_CUDA_L2_CHUNK")
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|&c| c >= 16 && c.is_multiple_of(16))
    });
    fixed.unwrap_or_else(|| {
        bytes
            .div_ceil(threads.max(1))
            .next_multiple_of(16)
            .clamp(1 << 10, 64 << 10) as u32
    })
}

/// Blocks for `bytes` bytes in pieces of `piece`, one piece a thread, at most `max` blocks.
pub(crate) fn blocks(bytes: usize, piece: u32, max: usize) -> u32 {
    bytes
        .div_ceil(piece as usize)
        .div_ceil(THREADS as usize)
        .clamp(1, max.max(1)) as u32
}

/// Asks L2 for the first `bytes` bytes of each matrix (all of it where `bytes` is at least its
/// size), on the prefetch stream; nothing without side streams.
pub fn prefetch(g: &Gpu, parts: &[(&GpuMatrix, usize)]) -> Result<()> {
    for four in parts.chunks(4) {
        let len = |i: usize| -> u64 {
            four.get(i)
                .map_or(0, |(m, b)| (*b).min(m.storage_bytes()) as u64)
        };
        let total: u64 = (0..4).map(len).sum();
        if total == 0 {
            continue;
        }
        let ptr = |i: usize| -> &CudaSlice<u8> { four.get(i).unwrap_or(&four[0]).0.bytes() };
        let sms = g.info().multiprocessors;
        let c = piece(total as usize, sms * THREADS as usize);
        let cfg = LaunchConfig {
            grid_dim: (blocks(total as usize, c, sms), 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        g.beside_l2(|| {
            let mut b = g.launcher("tf_l2_prefetch")?;
            b.arg(ptr(0)).arg(ptr(1)).arg(ptr(2)).arg(ptr(3));
            let (n0, n1, n2, n3) = (len(0), len(1), len(2), len(3));
            b.arg(&n0).arg(&n1).arg(&n2).arg(&n3).arg(&c);
            // SAFETY: (u8* x4, u64 x4, u32); each length is at most its buffer's size, and the
            // kernel only asks L2 for those bytes (it reads and writes nothing).
            unsafe { b.go(cfg, "launching an L2 prefetch") }
        })?;
    }
    Ok(())
}

/// Each matrix whole.
pub fn prefetch_whole(g: &Gpu, ms: &[&GpuMatrix]) -> Result<()> {
    let parts: Vec<_> = ms.iter().map(|m| (*m, usize::MAX)).collect();
    prefetch(g, &parts)
}

#[cfg(test)]
mod tests;
