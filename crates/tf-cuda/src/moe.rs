//! Mixture-of-experts operators on the GPU, bit-identical to the CPU routines they mirror (but
//! the MLX 4-bit and bf16 expert matmuls, which sum in the GPU's own order, `tf_slices`), with
//! every launch reading only device buffers (a round with MoE layers can be captured as a graph).
//!
//! A MoE layer on the GPU, for `n` rows of `x`:
//! 1. router logits: [`ops::matmul`](crate::ops::matmul) of the router matrix (`[n, experts]`);
//! 2. [`route`]: scores, top-k and weights per row ([`Routing`] picks which CPU routine is
//!    mirrored), then each expert's list of slots (slot = `row * top_k + pick`);
//! 3. [`experts`]: gathers each slot's input row, runs the expert MLP ([`ExpertMlp`]: SwiGLU or
//!    relu²) on each expert's group of rows with the row-invariant matmul, so a slot's bits do not
//!    depend on what else the expert got;
//! 4. [`combine`]: per row, `Σ w_j · f(y_j)` over the picks in pick order from zero, `f` the
//!    identity or Muse Spark's post-expert norm ([`ExpertNorm`]).
//!
//! Shared experts, latent projections and residual adds are plain matmuls and element-wise ops
//! ([`relu2`] is here for the relu² MLPs). Buffers ([`MoeBuffers`]) are sized once for the
//! largest round, top-k, expert count and widths; every call checks its shapes against them.

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::mma::{SplitX, Tail, GROUP};
use crate::ops::{grid, i32_of, need};
use crate::weights::geometry_kernel;
use cudarc::driver::{CudaSlice, LaunchConfig};
use tf_kernels::ops::{DroppedGroups, RouteParams};

#[cfg(test)]
mod combine_host;
mod experts;
#[cfg(test)]
mod route_host;

pub use experts::{ExpertMlp, GpuExperts};

/// Kernel entry points defined in kernels/moe.cu.
pub const KERNEL_NAMES: &[&str] = &[
    "tf_moe_mma_mlx4_split",
    "tf_moe_mma_mlx4_split_r1",
    "tf_moe_mma_mlx4_split_x4",
    "tf_moe_mma_mlx4_split_r1_x4",
    "tf_moe_mma_mlx4_split_x4_one",
    "tf_moe_mma_mlx4_split_r1_x4_one",
    "tf_moe_mma_mlx4_split_x4_xin",
    "tf_moe_mma_mlx4_split_r1_x4_xin",
    "tf_moe_mma_mlx4_split_x4_one_relu2",
    "tf_moe_mma_mlx4_split_r1_x4_one_relu2",
    "tf_moe_gather_split",
    "tf_moe_relu2_split",
    "tf_moe_route_grouped",
    "tf_moe_route_grouped_sorted",
    "tf_moe_route_grouped_sorted_lead",
    "tf_plant_moe_route_tie_high",
    "tf_moe_route_muse",
    "tf_moe_sort",
    "tf_moe_gather",
    "tf_moe_matmul_f32",
    "tf_moe_matmul_f16",
    "tf_moe_matmul_bf16",
    "tf_moe_matmul_q4_0",
    "tf_moe_matmul_q4_1",
    "tf_moe_matmul_q8_0",
    "tf_plant_moe_matmul_q4_1_rowvar",
    "tf_moe_matmul_q4_k",
    "tf_moe_matmul_q6_k",
    "tf_moe_matmul_mlx2",
    "tf_moe_matmul_mlx3",
    "tf_moe_matmul_mlx4",
    "tf_moe_matmul_mlx5",
    "tf_moe_matmul_mlx6",
    "tf_moe_matmul_mlx8",
    "tf_moe_slices_mlx4",
    "tf_moe_slices_mlx4_one",
    "tf_moe_slices_bf16",
    "tf_moe_slices_bf16_one",
    "tf_moe_mma_mlx4",
    "tf_moe_mma_mlx4_staged",
    "tf_moe_relu2",
    "tf_moe_combine",
    "tf_plant_moe_combine_reversed",
    "tf_moe_take_cols",
    "tf_moe_scale",
    "tf_moe_mul_cols",
    "tf_muse_sigmoid_mul",
    "tf_muse_gated_add",
    "tf_muse_softcap",
];

/// Threads per block of the routing, gather and combine kernels.
const THREADS: u32 = 128;
/// Threads per block of grouped routing (each ranks its experts against all the others).
const ROUTE_THREADS: u32 = 512;

/// Which CPU routing routine the GPU router reproduces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Routing {
    /// `tf_kernels::ops::moe::route` (Nemotron-H): sigmoid, correction bias, grouped top-k,
    /// ties to the lower id, optional renormalisation (`+ 1e-20`), then `scaling`.
    Grouped(RouteParams),
    /// Muse Spark's router (`tf_models::muse_spark`): `score = sigmoid(logit * multiplier)` in
    /// the mirrored form, top-k of `score + bias` (ties to the lower id, NaN never picked),
    /// `w = score / (Σ picked + 1e-15) * scale`.
    Muse {
        /// Routed experts.
        n_experts: usize,
        /// Experts picked per row.
        top_k: usize,
        /// Multiplier on the router logits before the sigmoid.
        multiplier: f32,
        /// Multiplier on the final weights (`routed_scaling_factor`).
        scale: f32,
    },
}

impl Routing {
    /// Routed experts.
    pub fn n_experts(&self) -> usize {
        match self {
            Routing::Grouped(p) => p.n_experts,
            Routing::Muse { n_experts, .. } => *n_experts,
        }
    }

    /// Experts picked per row.
    pub fn top_k(&self) -> usize {
        match self {
            Routing::Grouped(p) => p.top_k,
            Routing::Muse { top_k, .. } => *top_k,
        }
    }

    /// Checks the parameters (the CPU's rules, plus `top_k <= n_experts` for Muse).
    pub fn validate(&self) -> Result<()> {
        match self {
            Routing::Grouped(p) => p.validate().map_err(|e| CudaError::Shape {
                op: "moe route",
                detail: e.to_string(),
            }),
            Routing::Muse {
                n_experts, top_k, ..
            } => {
                if *n_experts == 0 || *top_k == 0 || top_k > n_experts {
                    return Err(CudaError::Shape {
                        op: "moe route",
                        detail: format!("top_k {top_k} must be in 1..={n_experts} (n_experts)"),
                    });
                }
                Ok(())
            }
        }
    }
}

/// Muse Spark's post-expert norm inside the combine: `v = y * gain`, `f = v * inv_rms(v)`.
#[derive(Clone, Copy)]
pub struct ExpertNorm<'a> {
    /// Per-column gain applied before the norm (`[width]`).
    pub gain: &'a CudaSlice<f32>,
    /// The norm's epsilon.
    pub eps: f32,
}

/// Limits [`MoeBuffers`] are allocated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeLimits {
    /// Rows of a round.
    pub max_rows: usize,
    /// Largest top-k of any layer.
    pub max_top_k: usize,
    /// Largest expert count of any layer.
    pub max_experts: usize,
    /// Largest expert input or output width.
    pub max_dim: usize,
    /// Largest expert intermediate width.
    pub max_inter: usize,
}

/// Device buffers of the MoE operators for one round (reused by every layer).
pub struct MoeBuffers {
    limits: MoeLimits,
    /// Routing of the last [`route`]: `top_k` and `n_experts` it was made with.
    routed: Option<(usize, usize, usize)>,
    experts: CudaSlice<i32>,
    weights: CudaSlice<f32>,
    offsets: CudaSlice<i32>,
    order: CudaSlice<i32>,
    where_: CudaSlice<i32>,
    xg: CudaSlice<f32>,
    gate: CudaSlice<f32>,
    up: CudaSlice<f32>,
    act: CudaSlice<f32>,
    yg: CudaSlice<f32>,
    /// The gathered rows and the relu² rows split for the tensor cores' products, where the
    /// widths are whole 64-column groups (`None` with `TF_CUDA_MMA_SPLIT=0`).
    split: Option<(SplitX, SplitX)>,
}

impl MoeBuffers {
    /// Allocates buffers for rounds within `limits`.
    pub fn new(gpu: &Gpu, limits: MoeLimits) -> Result<MoeBuffers> {
        let slots = limits.max_rows.max(1) * limits.max_top_k.max(1);
        i32_of(
            "moe buffers",
            "slots",
            slots * limits.max_dim.max(limits.max_inter),
        )?;
        Ok(MoeBuffers {
            limits,
            routed: None,
            experts: gpu.zeros(slots)?,
            weights: gpu.zeros(slots)?,
            offsets: gpu.zeros(limits.max_experts + 1)?,
            order: gpu.zeros(slots)?,
            where_: gpu.zeros(slots)?,
            xg: gpu.zeros(slots * limits.max_dim)?,
            gate: gpu.zeros(slots * limits.max_inter)?,
            up: gpu.zeros(slots * limits.max_inter)?,
            act: gpu.zeros(slots * limits.max_inter)?,
            yg: gpu.zeros(slots * limits.max_dim)?,
            split: match crate::mma::split_enabled()
                && limits.max_dim.is_multiple_of(GROUP)
                && limits.max_inter.is_multiple_of(GROUP)
                && limits.max_dim.min(limits.max_inter) > 0
            {
                true => Some((
                    SplitX::new(gpu, slots, limits.max_dim)?,
                    SplitX::new(gpu, slots, limits.max_inter)?,
                )),
                false => None,
            },
        })
    }

    /// The limits the buffers hold.
    pub fn limits(&self) -> MoeLimits {
        self.limits
    }

    /// Picked experts of the last [`route`], `[n, top_k]` (`-1`: no pick), downloaded.
    pub fn picks_host(&self, gpu: &Gpu) -> Result<(Vec<i32>, Vec<f32>)> {
        let (n, k, _) = self.routed()?;
        Ok((
            gpu.download(&self.experts, n * k)?,
            gpu.download(&self.weights, n * k)?,
        ))
    }

    fn routed(&self) -> Result<(usize, usize, usize)> {
        self.routed.ok_or_else(|| CudaError::Shape {
            op: "moe",
            detail: "no routing yet (call moe::route first)".into(),
        })
    }
}

/// Routes `n` rows of router `logits` (`[n, n_experts]`) with `bias` (the correction bias or
/// Muse's router bias, `[n_experts]`): picks and weights per row, then each expert's slots.
pub fn route(
    gpu: &Gpu,
    routing: &Routing,
    logits: &CudaSlice<f32>,
    bias: &CudaSlice<f32>,
    n: usize,
    buf: &mut MoeBuffers,
) -> Result<()> {
    route_with(gpu, routing, false, logits, bias, n, buf)
}

/// [`route`], with `plant` running the planted tie-to-the-higher-id router (grouped routing only).
pub fn route_with(
    gpu: &Gpu,
    routing: &Routing,
    plant: bool,
    logits: &CudaSlice<f32>,
    bias: &CudaSlice<f32>,
    n: usize,
    buf: &mut MoeBuffers,
) -> Result<()> {
    const OP: &str = "moe route";
    routing.validate()?;
    let (e, k) = (routing.n_experts(), routing.top_k());
    let lim = buf.limits;
    if n > lim.max_rows || k > lim.max_top_k || e > lim.max_experts {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!(
                "{n} rows, top-{k} of {e} experts beyond buffers for {} rows, top-{} of {}",
                lim.max_rows, lim.max_top_k, lim.max_experts
            ),
        });
    }
    need(OP, "logits", logits.len(), n * e)?;
    need(OP, "bias", bias.len(), e)?;
    buf.routed = Some((n, k, e));
    if n == 0 {
        return Ok(());
    }
    let (e_, k_) = (i32_of(OP, "experts", e)?, i32_of(OP, "top_k", k)?);
    let cfg = |smem: usize, threads: u32| LaunchConfig {
        grid_dim: (n as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    let limit = 48 * 1024;
    match routing {
        Routing::Grouped(p) => {
            let e32 = e.div_ceil(32) * 32;
            let smem = 8 * e32 + (2 * e + p.n_group) * 4 + 4 * e32;
            if smem > limit {
                return Err(CudaError::Shape {
                    op: OP,
                    detail: format!("{e} experts need {smem} bytes of shared memory"),
                });
            }
            // A round of one row routes and sorts in one launch (the same code).
            let sorted = n == 1 && !plant;
            let kernel = match (plant, sorted) {
                (true, _) => "tf_plant_moe_route_tie_high",
                (false, true) if route_lead() => "tf_moe_route_grouped_sorted_lead",
                (false, true) => "tf_moe_route_grouped_sorted",
                (false, false) => "tf_moe_route_grouped",
            };
            let (g_, tg_) = (
                i32_of(OP, "n_group", p.n_group)?,
                i32_of(OP, "topk_group", p.topk_group)?,
            );
            let norm = i32::from(p.norm_topk_prob);
            let fill = match p.dropped {
                DroppedGroups::Zero => 0.0f32,
                DroppedGroups::NegInf => f32::NEG_INFINITY,
            };
            let mut b = gpu.launcher(kernel)?;
            b.arg(logits)
                .arg(bias)
                .arg(&mut buf.experts)
                .arg(&mut buf.weights)
                .arg(&e_)
                .arg(&k_)
                .arg(&g_)
                .arg(&tg_)
                .arg(&p.scaling)
                .arg(&norm)
                .arg(&fill);
            if sorted {
                b.arg(&mut buf.offsets)
                    .arg(&mut buf.order)
                    .arg(&mut buf.where_);
                // SAFETY: (f32*, f32*, i32*, f32*, i32 x4, f32, i32, f32, i32* x3); buffers
                // checked above; offsets holds e + 1, order and where_ k (one row).
                return unsafe { b.go(cfg(smem, ROUTE_THREADS), "launching moe route") };
            }
            // SAFETY: (f32*, f32*, i32*, f32*, i32 x4, f32, i32, f32); buffers checked above.
            unsafe { b.go(cfg(smem, ROUTE_THREADS), "launching moe route") }?;
        }
        Routing::Muse {
            multiplier, scale, ..
        } => {
            if plant {
                return Err(CudaError::Shape {
                    op: OP,
                    detail: "the planted router is grouped routing only".into(),
                });
            }
            let smem = (2 * e + k) * 4;
            if smem > limit {
                return Err(CudaError::Shape {
                    op: OP,
                    detail: format!("{e} experts need {smem} bytes of shared memory"),
                });
            }
            let mut b = gpu.launcher("tf_moe_route_muse")?;
            b.arg(logits)
                .arg(bias)
                .arg(&mut buf.experts)
                .arg(&mut buf.weights)
                .arg(&e_)
                .arg(&k_)
                .arg(multiplier)
                .arg(scale);
            // SAFETY: (f32*, f32*, i32*, f32*, i32, i32, f32, f32); buffers checked above.
            unsafe { b.go(cfg(smem, THREADS), "launching moe route") }?;
        }
    }
    let slots = i32_of(OP, "slots", n * k)?;
    let mut b = gpu.launcher("tf_moe_sort")?;
    b.arg(&buf.experts)
        .arg(&mut buf.offsets)
        .arg(&mut buf.order)
        .arg(&mut buf.where_)
        .arg(&slots)
        .arg(&e_);
    let one = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (SORT_THREADS, 1, 1),
        shared_mem_bytes: sort_smem(e) as u32,
    };
    // SAFETY: (i32*, i32*, i32*, i32*, i32, i32); offsets holds e + 1, the rest n * k.
    unsafe { b.go(one, "launching moe sort") }
}

/// Threads of the sort's one block (at most 1024: its scan takes 32 warp sums).
const SORT_THREADS: u32 = 512;

/// Dynamic shared memory of the sort over `e` experts: a cursor each, then 32 warp sums.
fn sort_smem(e: usize) -> usize {
    (e + 32) * 4
}

/// Runs the routed experts of the last [`route`] on `x` (`[n, mlp.dim()]`, the rows routing saw):
/// each slot's output row is left in the buffers for [`combine`].
/// `x_row`: x's row already split ([`SplitX`], row 0), which a one-token round's up product reads
/// for every pick instead of gathering and splitting copies (the same bits; see
/// [`reads_one_row`]).
pub fn experts(
    gpu: &Gpu,
    mlp: &ExpertMlp,
    x: &CudaSlice<f32>,
    x_row: Option<&SplitX>,
    buf: &mut MoeBuffers,
) -> Result<()> {
    experts_with(gpu, mlp, false, x, x_row, buf)
}

/// Whether a round of `n` rows through `mlp` reads its one row split once for every pick, with
/// no gather: one-token rounds of relu² experts in the mma tiles (unless `TF_CUDA_MOE_ONE=0`).
/// The same bits.
pub fn reads_one_row(mlp: &ExpertMlp, n: usize) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("TF_CUDA_MOE_ONE").map_or(true, |v| v != "0"));
    on && n == 1 && mlp.reads_split_rows()
}

/// Whether a one-row round's routing lets the experts' first launch launch at its start
/// (unless `TF_CUDA_ROUTE_LEAD=0`): the same bits.
fn route_lead() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("TF_CUDA_ROUTE_LEAD").map_or(true, |v| v != "0"))
}

/// [`experts`], with `plant` running the planted row-count-dependent matmul (q4_1 only).
pub fn experts_with(
    gpu: &Gpu,
    mlp: &ExpertMlp,
    plant: bool,
    x: &CudaSlice<f32>,
    x_row: Option<&SplitX>,
    buf: &mut MoeBuffers,
) -> Result<()> {
    const OP: &str = "moe experts";
    let (n, k, e) = buf.routed()?;
    let (dim, inter, out) = (mlp.dim(), mlp.inter(), mlp.out_dim());
    let lim = buf.limits;
    if mlp.n_experts() != e || dim.max(out) > lim.max_dim || inter > lim.max_inter {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!(
                "{} experts [{dim} -> {inter} -> {out}] after routing over {e}, buffers for widths {} / {}",
                mlp.n_experts(),
                lim.max_dim,
                lim.max_inter
            ),
        });
    }
    need(OP, "x", x.len(), n * dim)?;
    if n == 0 {
        return Ok(());
    }
    let slots = n * k;
    // relu² experts in the mma tiles read their rows split once (the same bits).
    let split = match &mut buf.split {
        Some((xs, acts))
            if mlp.reads_split_rows()
                && !plant
                && xs.holds(slots, dim)
                && acts.holds(slots, inter) =>
        {
            Some((xs, acts))
        }
        _ => None,
    };
    let (k_, dim_, e_) = (k as i32, i32_of(OP, "dim", dim)?, e as i32);
    if let Some((xs, acts)) = split {
        let (up1, down1) = crate::mma::one_tile_experts();
        let (up1, down1) = (n == 1 && up1, n == 1 && down1);
        let gathered = Groups::Gathered(&buf.offsets);
        let row = x_row.filter(|r| reads_one_row(mlp, n) && r.holds(1, dim));
        // One token: relu² made by the up product (the default, `mma::relu2_fold`), no relu²
        // kernel between.
        let fold = row.is_some() && crate::mma::relu2_fold().0;
        match row {
            // One token: its row split once serves every pick; no gather.
            Some(row) => {
                let picks = Groups::Picks(&buf.experts, &buf.where_);
                let tail = match fold {
                    true => Tail::Relu2(&mut buf.act, &mut *acts),
                    false => Tail::Plain,
                };
                expert_matmul_split(gpu, &mlp.up, row, &mut buf.up, picks, n, k, up1, tail)?;
            }
            None => {
                let mut b = gpu.launcher("tf_moe_gather_split")?;
                b.arg(x).arg(&buf.order).arg(&buf.offsets).arg(&mut buf.xg);
                b.arg(&mut xs.parts).arg(&mut xs.sums);
                b.arg(&k_).arg(&dim_).arg(&e_);
                // SAFETY: (f32*, i32*, i32*, f32*, uint4*, f32*, i32 x3); positions <
                // offsets[e] <= n * k rows of xg and of the split (checked above).
                unsafe { b.go(split_config(slots, dim), "launching moe gather (split)") }?;
                let (up, tail) = (&mlp.up, Tail::Plain);
                expert_matmul_split(gpu, up, xs, &mut buf.up, gathered, n, k, up1, tail)?;
            }
        }
        let tail = match fold {
            true => Tail::SumsInPlace,
            false => {
                relu2_split(gpu, &buf.up, &mut buf.act, acts, slots, inter)?;
                Tail::Plain
            }
        };
        return expert_matmul_split(
            gpu,
            &mlp.down,
            acts,
            &mut buf.yg,
            gathered,
            n,
            k,
            down1,
            tail,
        );
    }
    let mut b = gpu.launcher("tf_moe_gather")?;
    b.arg(x).arg(&buf.order).arg(&buf.offsets).arg(&mut buf.xg);
    b.arg(&k_).arg(&dim_).arg(&e_);
    // SAFETY: (f32*, i32*, i32*, f32*, i32 x3); positions < offsets[e] <= n * k rows of xg.
    unsafe { b.go(gather_config(slots), "launching moe gather") }?;
    let grouped = |w: &GpuExperts,
                   xin: &CudaSlice<f32>,
                   yout: &mut CudaSlice<f32>,
                   offsets: &CudaSlice<i32>|
     -> Result<()> {
        let kernel = if plant {
            "tf_plant_moe_matmul_q4_1_rowvar"
        } else {
            w.kernel
        };
        expert_matmul(gpu, kernel, plant, w, xin, yout, offsets, n, k)
    };
    match &mlp.gate {
        Some(g) => {
            grouped(g, &buf.xg, &mut buf.gate, &buf.offsets)?;
            grouped(&mlp.up, &buf.xg, &mut buf.up, &buf.offsets)?;
            crate::ops::silu_mul(gpu, &buf.gate, &buf.up, &mut buf.act, slots * inter)?;
        }
        None => {
            grouped(&mlp.up, &buf.xg, &mut buf.up, &buf.offsets)?;
            relu2(gpu, &buf.up, &mut buf.act, slots * inter)?;
        }
    }
    grouped(&mlp.down, &buf.act, &mut buf.yg, &buf.offsets)
}

/// One grouped expert matmul over the `n * k` gathered rows of `n` tokens' `k` picks (each
/// expert's group from `offsets`; a group holds at most `n` rows); `plant`: `kernel` is a
/// planted control, run as it is.
#[allow(clippy::too_many_arguments)]
pub(crate) fn expert_matmul(
    gpu: &Gpu,
    kernel: &'static str,
    plant: bool,
    w: &GpuExperts,
    x: &CudaSlice<f32>,
    y: &mut CudaSlice<f32>,
    offsets: &CudaSlice<i32>,
    n: usize,
    k: usize,
) -> Result<()> {
    const OP: &str = "moe expert matmul";
    let slots = n * k;
    need(OP, "x", x.len(), slots * w.cols())?;
    need(OP, "y", y.len(), slots * w.rows())?;
    need(OP, "offsets", offsets.len(), w.n_experts() + 1)?;
    let (rows, cols) = (i32_of(OP, "rows", w.rows())?, i32_of(OP, "cols", w.cols())?);
    let n_experts = i32_of(OP, "experts", w.n_experts())?;
    // Block row y takes the y-th expert with rows (kernels/moe.cu): a round has at most
    // min(n_experts, slots) non-empty groups, so no block is launched for an empty expert.
    let groups = w.n_experts().min(slots).max(1);
    let format = w.matrix.format();
    let (name, cfg, during) = if w.matrix.layout().is_mma() && !plant {
        let tiles = crate::mma::MOE_TILES;
        let (name, cfg) = crate::mma::experts_launch(w.rows(), w.cols(), n, groups, tiles)?;
        let name = crate::mma::entry_for(name, w.matrix.layout()).into_owned();
        (name, cfg, "launching moe mma matmul")
    } else {
        w.matrix.need_rows(OP)?;
        // MLX 4-bit and bf16 in the GPU's own order (tf_slices; its one-row body when a round
        // has one token, so every group is one row).
        let (name, mut cfg) = match crate::slices::kernel(format, w.cols()) {
            Some(_) if !plant => (
                format!(
                    "tf_moe_slices_{}{}",
                    format.kernel_tag(),
                    if n == 1 { "_one" } else { "" }
                ),
                crate::slices::launch_config(format, w.rows(), w.cols(), n, 1),
            ),
            _ => {
                let tpr = format.matmul_threads_per_row(w.rows() * groups, n);
                (geometry_kernel(kernel, tpr), grid(w.rows() * tpr, THREADS))
            }
        };
        cfg.grid_dim.1 = grid_rows(OP, "expert groups", groups)?;
        (name, cfg, "launching moe expert matmul")
    };
    let mut b = gpu.launcher(&name)?;
    b.arg(w.matrix.bytes())
        .arg(x)
        .arg(y)
        .arg(offsets)
        .arg(&rows)
        .arg(&cols)
        .arg(&n_experts);
    // SAFETY: (u8*, f32*, f32*, i32*, i32, i32, i32); the stacked weight holds n_experts * rows
    // rows (validated at upload; in the mma tiles, n_experts * rows / 16 tiles made for this
    // shape, `rows` a multiple of 16); every group lies within the `slots` rows checked above.
    unsafe { b.go(cfg, during) }
}

/// The split kernels' blocks (kernels/moe.cu): a warp a (row, group), 4 groups a block.
fn split_config(slots: usize, width: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (slots as u32, (width / GROUP).div_ceil(4) as u32, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A block a gathered row.
fn gather_config(slots: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (slots as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Where a split expert product finds each block row's expert and rows.
#[derive(Clone, Copy)]
pub(crate) enum Groups<'a> {
    /// Each non-empty expert's group of gathered rows, from the offsets (the split's rows are
    /// the gathered ones).
    Gathered(&'a CudaSlice<i32>),
    /// A one-token round: block row j takes pick j (the routing's experts and where_), and every
    /// pick reads the split's row 0, the token's.
    Picks(&'a CudaSlice<i32>, &'a CudaSlice<i32>),
}

/// [`expert_matmul`] of rows split once (`x`: their [`SplitX`]), `w` in the mma tiles, two
/// tiles a block or (`one_tile`: more blocks for few rows an expert) one: the same bits.
#[allow(clippy::too_many_arguments)]
pub(crate) fn expert_matmul_split(
    gpu: &Gpu,
    w: &GpuExperts,
    x: &SplitX,
    y: &mut CudaSlice<f32>,
    groups: Groups,
    n: usize,
    k: usize,
    one_tile: bool,
    tail: Tail,
) -> Result<()> {
    const OP: &str = "moe expert matmul (split x)";
    let slots = n * k;
    let one = matches!(groups, Groups::Picks(..));
    x.check(OP, if one { 1 } else { slots }, w.cols())?;
    need(OP, "y", y.len(), slots * w.rows())?;
    let four = crate::mma::split_rows_a_block(n) == 4;
    // The relu² entries are the one-token ones, the in-place sums the gathered ones.
    let fits = match tail {
        Tail::Plain => true,
        Tail::Relu2(..) => one,
        Tail::SumsInPlace => !one,
    };
    if !fits {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!(
                "no entry takes this tail {}",
                if one { "for picks" } else { "gathered" }
            ),
        });
    }
    tail.check(OP, four, w.rows(), slots)?;
    match groups {
        Groups::Gathered(offsets) => need(OP, "offsets", offsets.len(), w.n_experts() + 1)?,
        Groups::Picks(experts, where_) => need(OP, "picks", experts.len().min(where_.len()), k)?,
    }
    let (rows, cols) = (i32_of(OP, "rows", w.rows())?, i32_of(OP, "cols", w.cols())?);
    let n_experts = i32_of(OP, "experts", w.n_experts())?;
    // Block rows: a pick each, or as many as a round can have non-empty experts.
    let block_rows = if one { k } else { w.n_experts().min(slots) }.max(1);
    let tiles = if one_tile { 1 } else { crate::mma::MOE_TILES };
    let (_, mut cfg) = crate::mma::experts_launch(w.rows(), w.cols(), n, block_rows, tiles)?;
    cfg.shared_mem_bytes = 0;
    // An expert takes at most n rows of a round: its rows 4 at a time where n is at most 4.
    let kernel = match (one, one_tile, four) {
        (true, true, _) => "tf_moe_mma_mlx4_split_r1_x4_one",
        (true, false, _) => "tf_moe_mma_mlx4_split_x4_one",
        (false, true, true) => "tf_moe_mma_mlx4_split_r1_x4",
        (false, true, false) => "tf_moe_mma_mlx4_split_r1",
        (false, false, true) => "tf_moe_mma_mlx4_split_x4",
        (false, false, false) => "tf_moe_mma_mlx4_split",
    };
    let kernel = tail.entry(kernel);
    let mut b = gpu.launcher(&crate::mma::entry_for(&kernel, w.matrix.layout()))?;
    b.arg(w.matrix.bytes()).arg(&x.parts).arg(&x.sums).arg(y);
    match groups {
        Groups::Gathered(offsets) => b.arg(offsets),
        Groups::Picks(experts, where_) => b.arg(experts).arg(where_),
    };
    b.arg(&rows).arg(&cols).arg(&n_experts);
    if let Tail::Relu2(act, acts) = tail {
        b.arg(act).arg(&mut acts.parts);
    }
    // SAFETY: (u8*, uint4*, f32*, f32*, i32*, i32, i32, i32), or with the picks (i32*, i32*) in
    // place of the offsets (the `_one` entries, n = 1), and (f32*, uint4*) after (`_relu2`);
    // the tiles hold n_experts * rows / 16 tiles made for this shape; every group lies within
    // the `slots` rows of the split (its row 0 for the picks), of y and of act and its split
    // (rows a multiple of 64) checked above, and a pick's expert is < n_experts or -1.
    unsafe { b.go(cfg, "launching moe mma matmul (split x)") }
}

/// [`relu2`] of `slots` rows of `width`, the rows also split into `s`.
pub(crate) fn relu2_split(
    gpu: &Gpu,
    x: &CudaSlice<f32>,
    out: &mut CudaSlice<f32>,
    s: &mut SplitX,
    slots: usize,
    width: usize,
) -> Result<()> {
    const OP: &str = "relu2 (split)";
    s.check(OP, slots, width)?;
    need(OP, "x", x.len(), slots * width)?;
    need(OP, "out", out.len(), slots * width)?;
    let w = i32_of(OP, "width", width)?;
    let mut b = gpu.launcher("tf_moe_relu2_split")?;
    b.arg(x).arg(out).arg(&mut s.parts).arg(&mut s.sums).arg(&w);
    // SAFETY: (f32*, f32*, uint4*, f32*, i32); slots rows of width in each (checked above).
    unsafe { b.go(split_config(slots, width), "launching relu2 (split)") }
}

/// `v` as a grid's y dimension (at most 65535).
fn grid_rows(op: &'static str, what: &'static str, v: usize) -> Result<u32> {
    u32::try_from(v)
        .ok()
        .filter(|&g| g <= 65535)
        .ok_or(CudaError::Param {
            op,
            what,
            value: v as f64,
            why: "exceeds the grid",
        })
}

/// Adds each row's picks of the last [`route`]: `out[i] = Σ_j w_ij · f(y_ij)` in pick order from
/// zero (`out` is `[n, width]`, `width` the experts' output width), `f` the identity or `norm`.
pub fn combine(
    gpu: &Gpu,
    buf: &MoeBuffers,
    width: usize,
    norm: Option<ExpertNorm>,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    combine_with(gpu, "tf_moe_combine", buf, width, norm, out)
}

/// [`combine`] through a named kernel (the planted control adds the picks in reverse).
pub fn combine_with(
    gpu: &Gpu,
    kernel: &'static str,
    buf: &MoeBuffers,
    width: usize,
    norm: Option<ExpertNorm>,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    const OP: &str = "moe combine";
    let (n, k, _) = buf.routed()?;
    if width > buf.limits.max_dim {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!("width {width} beyond buffers for {}", buf.limits.max_dim),
        });
    }
    need(OP, "out", out.len(), n * width)?;
    let (gain, eps, on) = match norm {
        Some(ExpertNorm { gain, eps }) => {
            need(OP, "gain", gain.len(), width)?;
            if !(eps.is_finite() && eps >= 0.0) {
                return Err(CudaError::Param {
                    op: OP,
                    what: "eps",
                    value: eps as f64,
                    why: "must be finite and >= 0",
                });
            }
            (gain, eps, 1i32)
        }
        // The kernel does not read the gain without the norm; any buffer fills the slot.
        None => (&buf.weights, 0.0, 0),
    };
    if n == 0 {
        return Ok(());
    }
    let (k_, w_) = (k as i32, i32_of(OP, "width", width)?);
    let mut b = gpu.launcher(kernel)?;
    b.arg(&buf.yg)
        .arg(&buf.where_)
        .arg(&buf.weights)
        .arg(gain)
        .arg(out)
        .arg(&k_)
        .arg(&w_)
        .arg(&on)
        .arg(&eps);
    // The norm needs a whole row in one block; without it, a block per THREADS columns.
    let col_blocks = if on != 0 {
        1
    } else {
        width.div_ceil(THREADS as usize)
    };
    let cfg = LaunchConfig {
        grid_dim: (n as u32, grid_rows(OP, "column blocks", col_blocks)?, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: (f32*, i32*, f32*, f32*, f32*, i32 x3, f32); where_ holds n * k positions into yg.
    unsafe { b.go(cfg, "launching moe combine") }
}

/// relu²: `out[e] = max(x[e], 0)²` for the first `len` elements (tf_kernels' `relu2`).
pub fn relu2(gpu: &Gpu, x: &CudaSlice<f32>, out: &mut CudaSlice<f32>, len: usize) -> Result<()> {
    need("relu2", "x", x.len(), len)?;
    need("relu2", "out", out.len(), len)?;
    let len_ = i32_of("relu2", "len", len)?;
    if len == 0 {
        return Ok(());
    }
    let mut b = gpu.launcher("tf_moe_relu2")?;
    b.arg(x).arg(out).arg(&len_);
    // SAFETY: (f32*, f32*, i32); lengths checked above.
    unsafe { b.go(grid(len, 256), "launching relu2") }
}

#[cfg(test)]
mod tests;
