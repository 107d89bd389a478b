//! Contract cases for the MoE operators: a whole MoE block (router matmul, routing, expert
//! dispatch, combine; Muse Spark's pre/post projections and norms) as one row operator, held
//! against an f64 reference that takes the CPU's f32 picks, checked for row invariance over
//! 1..=64 rows, and compared bit for bit with the CPU pipeline on 40 rows in one call.
//!
//! Planted controls: twin experts (equal router rows and biases, so every row ties at its k-th
//! pick) routed with the tie broken toward the higher id (Accuracy); Q4_1 expert matmuls whose
//! reduction order depends on the group's row count (RowVariance); the combine adding picks in
//! reverse order (caught by the CPU bit comparison: it is row-invariant and within tolerance).

use super::packed::HostWeights;
use super::{
    compare_bits, control, verdict, CaseResult, ControlResult, Depth, ErrSlot, SuiteResult,
};
use crate::device::Gpu;
use crate::error::Result;
use crate::moe::{self, ExpertMlp, ExpertNorm, GpuExperts, MoeBuffers, MoeLimits, Routing};
use crate::ops;
use crate::weights::{GpuFormat, GpuMatrix};
use cudarc::driver::CudaSlice;
use std::cell::RefCell;
use tf_kernels::contract::{Rng, RowOp, Tolerance};
use tf_kernels::matmul::PackedMatrix;
use tf_kernels::ops::{DroppedGroups, RouteParams};
use tf_kernels::pool::Pool;

/// Most rows any call of the harness makes.
const MAX_ROWS: usize = 100;

mod host;

use host::{packed_f64, shape_err, HostExpert, HostMoe, MuseHost, Weights64};

/// Which planted variant a GPU run uses.
#[derive(Clone, Copy, PartialEq)]
enum Plant {
    None,
    Tie,
    RowVar,
    Order,
}

/// The block's operands and buffers on the device.
struct MoeRig<'g> {
    gpu: &'g Gpu,
    host: &'g HostMoe,
    router: GpuMatrix,
    bias: CudaSlice<f32>,
    mlp: ExpertMlp,
    muse: Option<(GpuMatrix, CudaSlice<f32>, CudaSlice<f32>, GpuMatrix)>,
    bufs: RefCell<(MoeBuffers, [CudaSlice<f32>; 5])>,
}

impl<'g> MoeRig<'g> {
    fn new(gpu: &'g Gpu, host: &'g HostMoe) -> Result<MoeRig<'g>> {
        let stack =
            |f: &dyn Fn(&HostExpert) -> Option<&HostWeights>| -> Result<Option<GpuExperts>> {
                let ws: Option<Vec<PackedMatrix>> = host
                    .experts
                    .iter()
                    .map(|e| f(e).map(|w| w.packed()))
                    .collect();
                ws.map(|ws| GpuExperts::upload(gpu, &ws)).transpose()
            };
        let up = stack(&|e| Some(&e.up))?.ok_or_else(|| shape_err("moe rig")("no up".into()))?;
        let down =
            stack(&|e| Some(&e.down))?.ok_or_else(|| shape_err("moe rig")("no down".into()))?;
        let mlp = ExpertMlp::new(stack(&|e| e.gate.as_ref())?, up, down)?;
        let width = mlp.out_dim().max(mlp.dim()).max(host.dim);
        let limits = MoeLimits {
            max_rows: MAX_ROWS,
            max_top_k: host.routing.top_k(),
            max_experts: host.routing.n_experts(),
            max_dim: width,
            max_inter: mlp.inter(),
        };
        let muse = match &host.muse {
            Some(m) => Some((
                GpuMatrix::upload(gpu, &m.pre.packed())?,
                gpu.upload(&m.pre_gain)?,
                gpu.upload(&m.post_gain)?,
                GpuMatrix::upload(gpu, &m.post.packed())?,
            )),
            None => None,
        };
        let z = |len: usize| gpu.zeros::<f32>(MAX_ROWS * len);
        Ok(MoeRig {
            bufs: RefCell::new((
                MoeBuffers::new(gpu, limits)?,
                [
                    z(host.dim)?,
                    z(host.routing.n_experts())?,
                    z(width)?,
                    z(width)?,
                    z(width)?,
                ],
            )),
            router: GpuMatrix::upload(gpu, &host.router.packed())?,
            bias: gpu.upload(&host.bias)?,
            gpu,
            host,
            mlp,
            muse,
        })
    }

    fn run(&self, plant: Plant, rows: &[Vec<f32>], out: &mut [f32], errs: &ErrSlot) {
        if let Err(e) = self.try_run(plant, rows, out) {
            errs.put(e, out);
        }
    }

    fn try_run(&self, plant: Plant, rows: &[Vec<f32>], out: &mut [f32]) -> Result<()> {
        let g = self.gpu;
        let n = rows.len();
        let flat: Vec<f32> = rows.iter().flatten().copied().collect();
        let mut bufs = self.bufs.borrow_mut();
        let (mb, [x, logits, a, b, y]) = &mut *bufs;
        g.write(&flat, x)?;
        ops::matmul(g, &self.router, x, n, logits)?;
        moe::route_with(
            g,
            &self.host.routing,
            plant == Plant::Tie,
            logits,
            &self.bias,
            n,
            mb,
        )?;
        let input: &CudaSlice<f32> = match (&self.muse, &self.host.muse) {
            (Some((pre, pre_gain, _, _)), Some(m)) => {
                ops::matmul(g, pre, x, n, a)?;
                ops::rms_norm(g, a, pre_gain, m.eps, n, b)?;
                b
            }
            _ => x,
        };
        moe::experts_with(g, &self.mlp, plant == Plant::RowVar, input, None, mb)?;
        let kernel = if plant == Plant::Order {
            "tf_plant_moe_combine_reversed"
        } else {
            "tf_moe_combine"
        };
        let width = self.mlp.out_dim();
        match (&self.muse, &self.host.muse) {
            (Some((_, _, post_gain, post)), Some(m)) => {
                let norm = ExpertNorm {
                    gain: post_gain,
                    eps: m.eps,
                };
                moe::combine_with(g, kernel, mb, width, Some(norm), a)?;
                ops::matmul(g, post, a, n, y)?;
            }
            _ => moe::combine_with(g, kernel, mb, width, None, y)?,
        }
        out.copy_from_slice(&g.download(y, out.len())?);
        Ok(())
    }
}

/// A case: label, routing, expert format, widths (input, expert width for Muse, intermediate),
/// SwiGLU, twin experts, quick-only.
struct Case {
    label: &'static str,
    routing: Routing,
    format: GpuFormat,
    dim: usize,
    muse_width: Option<usize>,
    inter: usize,
    swiglu: bool,
    twins: bool,
    heavy: bool,
}

fn grouped(n: usize, k: usize, groups: usize, keep: usize, scaling: f32, norm: bool) -> Routing {
    Routing::Grouped(RouteParams {
        n_experts: n,
        top_k: k,
        n_group: groups,
        topk_group: keep,
        scaling,
        norm_topk_prob: norm,
        dropped: DroppedGroups::Zero,
    })
}

fn cases() -> Vec<Case> {
    let mut neg = grouped(8, 2, 2, 1, 1.0, true);
    if let Routing::Grouped(p) = &mut neg {
        p.dropped = DroppedGroups::NegInf;
    }
    let c = |label, routing, format, dim, muse_width, inter, swiglu, twins, heavy| Case {
        label,
        routing,
        format,
        dim,
        muse_width,
        inter,
        swiglu,
        twins,
        heavy,
    };
    vec![
        c(
            "grouped: 4 groups keep 2, top-4 of 16, norm, x2.5, relu2, Q4_1 64->96",
            grouped(16, 4, 4, 2, 2.5, true),
            GpuFormat::Q4_1,
            64,
            None,
            96,
            false,
            false,
            false,
        ),
        c(
            "twin experts: top-3 of 16 (tie at the 3rd pick), relu2, BF16 48->40",
            grouped(16, 3, 1, 1, 1.0, false),
            GpuFormat::Bf16,
            48,
            None,
            40,
            false,
            true,
            false,
        ),
        c(
            "-inf dropped groups: 2 keep 1, top-2 of 8, SwiGLU, F32 33->17",
            neg,
            GpuFormat::F32,
            33,
            None,
            17,
            true,
            false,
            false,
        ),
        c(
            "muse: sigmoid(x*m)+bias top-4 of 16, SwiGLU, post-expert norm, BF16 96->64->32",
            Routing::Muse {
                n_experts: 16,
                top_k: 4,
                multiplier: 1.5,
                scale: 2.0,
            },
            GpuFormat::Bf16,
            96,
            Some(64),
            32,
            true,
            false,
            false,
        ),
        c(
            "muse: twin experts, top-3 of 8, Q8_0 64->64->32",
            Routing::Muse {
                n_experts: 8,
                top_k: 3,
                multiplier: 1.0,
                scale: 1.0,
            },
            GpuFormat::Q8_0,
            64,
            Some(64),
            32,
            true,
            true,
            false,
        ),
        c(
            "muse: MLX 4-bit experts (group 64), top-2 of 8, 64->64->64",
            Routing::Muse {
                n_experts: 8,
                top_k: 2,
                multiplier: 0.5,
                scale: 2.5,
            },
            GpuFormat::Mlx4,
            64,
            Some(64),
            64,
            true,
            false,
            false,
        ),
        c(
            "128 experts top-6, 8 groups keep 4, relu2, Q8_0 256->128",
            grouped(128, 6, 8, 4, 2.5, true),
            GpuFormat::Q8_0,
            256,
            None,
            128,
            false,
            false,
            true,
        ),
    ]
}

fn host_moe(case: &Case, rng: &mut Rng) -> HostMoe {
    let e = case.routing.n_experts();
    let width = case.muse_width.unwrap_or(case.dim);
    let mut router = HostWeights::random(GpuFormat::F32, e, case.dim, rng);
    let mut bias: Vec<f32> = rng.vec_uniform(e, -0.05, 0.05);
    if case.twins {
        // Expert 2j + 1 routes exactly like 2j: equal router rows and biases.
        let rb = case.dim * 4;
        for j in (0..e).step_by(2) {
            let (lo, hi) = router.bytes.split_at_mut((j + 1) * rb);
            hi[..rb].copy_from_slice(&lo[j * rb..]);
            bias[j + 1] = bias[j];
        }
    }
    let experts = (0..e)
        .map(|_| HostExpert {
            gate: case
                .swiglu
                .then(|| HostWeights::random(case.format, case.inter, width, rng)),
            up: HostWeights::random(case.format, case.inter, width, rng),
            down: HostWeights::random(case.format, width, case.inter, rng),
        })
        .collect();
    let muse = case.muse_width.map(|c| MuseHost {
        pre: HostWeights::random(GpuFormat::Bf16, c, case.dim, rng),
        pre_gain: rng.vec_uniform(c, 0.5, 1.5),
        post_gain: rng.vec_uniform(c, 0.5, 1.5),
        post: HostWeights::random(GpuFormat::Bf16, case.dim, c, rng),
        eps: 1e-6,
    });
    HostMoe {
        routing: case.routing,
        dim: case.dim,
        router,
        bias,
        experts,
        muse,
    }
}

/// Runs the MoE cases and their controls.
pub(super) fn run(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    let pool = Pool::new(std::thread::available_parallelism().map_or(1, |n| n.get()));
    for (i, case) in cases().iter().enumerate() {
        let mut rng = Rng::new(0x3e0e + i as u64);
        let host = host_moe(case, &mut rng);
        let w64 = Weights64 {
            experts: host
                .experts
                .iter()
                .map(|e| {
                    (
                        e.gate.as_ref().map(packed_f64),
                        packed_f64(&e.up),
                        packed_f64(&e.down),
                    )
                })
                .collect(),
            pre: host.muse.as_ref().map(|m| packed_f64(&m.pre)),
            post: host.muse.as_ref().map(|m| packed_f64(&m.post)),
        };
        let rig = MoeRig::new(gpu, &host)?;
        let out_width = if host.muse.is_some() {
            case.dim
        } else {
            rig.mlp.out_dim()
        };
        let dim = case.dim;
        let gen = |r: &mut Rng, _: usize| r.vec_uniform(dim, -1.0, 1.0);
        let reference = |x: &Vec<f32>, o: &mut [f64]| host.reference(x, &w64, &pool, o);
        let name = format!("moe {:?}", case.format);
        let op = RowOp {
            name: &name,
            out_width,
            tolerance: Tolerance::new(1e-4, 1e-4),
            gen_row: &gen,
            reference: &reference,
        };
        let errs = ErrSlot::default();
        let run = |r: &[Vec<f32>], o: &mut [f32]| rig.run(Plant::None, r, o, &errs);
        let seed = 0x70e + i as u64;
        let cfg = if case.heavy {
            Depth::Quick.config(seed)
        } else {
            depth.config(seed)
        };
        let verdict = verdict(&op, &run, &cfg, &errs);
        // GPU vs the CPU pipeline's bits on 40 fresh rows in one call.
        let mut r2 = Rng::new(0xc0b + i as u64);
        let xs: Vec<Vec<f32>> = (0..40).map(|_| r2.vec_uniform(dim, -1.0, 1.0)).collect();
        let mut g = vec![0f32; 40 * out_width];
        rig.run(Plant::None, &xs, &mut g, &errs);
        let mut c = Vec::with_capacity(40 * out_width);
        for x in &xs {
            c.extend(host.cpu_row(x, &pool)?);
        }
        out.cases.push(CaseResult {
            op: name.clone(),
            case: case.label.to_string(),
            verdict,
            cpu_bits: Some(compare_bits(&g, &c)),
        });
        if case.twins && matches!(case.routing, Routing::Grouped(_)) {
            let broken = |r: &[Vec<f32>], o: &mut [f32]| rig.run(Plant::Tie, r, o, &errs);
            out.controls.push(control(
                "moe route: ties at the k-th pick broken toward the higher expert id",
                &op,
                &broken,
                &cfg,
                &errs,
            ));
        }
        if case.format == GpuFormat::Q4_1 {
            let broken = |r: &[Vec<f32>], o: &mut [f32]| rig.run(Plant::RowVar, r, o, &errs);
            out.controls.push(control(
                "moe expert matmul Q4_1: blocks summed in descending order when an expert has > 1 rows",
                &op,
                &broken,
                &cfg,
                &errs,
            ));
        }
        // Two picks added in either order from zero give the same sum ((0+a)+b == (0+b)+a),
        // so the reversed-order control needs at least three picks to be catchable.
        if (i == 0 || host.muse.is_some() && !case.twins) && case.routing.top_k() >= 3 {
            let mut p = vec![0f32; 40 * out_width];
            rig.run(Plant::Order, &xs, &mut p, &errs);
            let b = compare_bits(&p, &c);
            out.controls.push(ControlResult {
                control: format!("moe combine: picks added in reverse order ({})", case.label),
                caught: match errs.take() {
                    Some(e) => Err(format!("a GPU error is not a catch: {e}")),
                    None if b.differing > 0 => Ok(format!(
                        "CPU bits: {} of {} values differ",
                        b.differing, b.compared
                    )),
                    None => Err("every value equals the CPU's bits".into()),
                },
            });
        }
    }
    Ok(())
}
