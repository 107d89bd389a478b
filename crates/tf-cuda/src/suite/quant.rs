//! Contract cases for the K-quant (Q4_K, Q6_K) and MLX affine (2, 3, 4, 5, 6, 8 bits) kernels:
//! matmul and embedding at real shapes, each compared bit for bit with the CPU kernels, with
//! planted controls per decoder family (a wrong decoder kernel, scales re-laid one group off).
//! The fused-kernel cases are in `quant/fused.rs`.

mod fused;
#[cfg(test)]
mod host_cpp;

use super::packed::HostWeights;
use super::{
    compare_bits, control, dense_reference, verdict, CaseResult, ControlResult, CpuBits, Depth,
    ErrSlot, SuiteResult,
};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::ops;
use crate::quant::{
    mlx_device_bytes_planted_scale_shift, PLANT_MLX4_FMA, PLANT_MLX4_NIBBLES, PLANT_Q4_K_SCALE,
    PLANT_Q6_K_SCALE,
};
use crate::weights::{GpuFormat, GpuMatrix};
use std::cell::RefCell;
use tf_kernels::contract::{Rng, RowOp, Tolerance};
use tf_kernels::matmul::{embedding_row, matmul as cpu_matmul, FloatType};
use tf_kernels::pool::Pool;

const U: f64 = 1.0 / (1u64 << 24) as f64;

/// Most rows any call of the harness makes.
const MAX_ROWS: usize = 100;

/// Which weights a case draws.
#[derive(Clone, Copy, Debug)]
pub(super) enum Weights {
    /// A K-quant (or any block format) from [`HostWeights::random`].
    Blocks(GpuFormat),
    /// MLX affine: bits, group size, scale/bias dtype.
    Mlx(u8, usize, FloatType),
}

impl Weights {
    /// The device format of these weights.
    fn gpu_format(self) -> GpuFormat {
        match self {
            Weights::Blocks(f) => f,
            Weights::Mlx(bits, ..) => GpuFormat::mlx(bits).unwrap_or(GpuFormat::F32),
        }
    }

    /// Random host weights of this kind.
    pub(super) fn draw(self, rows: usize, cols: usize, rng: &mut Rng) -> HostWeights {
        match self {
            Weights::Blocks(f) => HostWeights::random(f, rows, cols, rng),
            Weights::Mlx(bits, group, ty) => {
                HostWeights::random_mlx(bits, group, ty, rows, cols, rng)
            }
        }
    }

    /// A short name: `Q4K`, `MLX 4-bit g64 F16`.
    pub(super) fn name(self) -> String {
        match self {
            Weights::Blocks(f) => format!("{f:?}"),
            Weights::Mlx(bits, group, ty) => format!("MLX {bits}-bit g{group} {ty:?}"),
        }
    }

    /// The extra absolute error of one decoded weight: with f32 MLX scales `s * q` (at most
    /// 0.25 here) rounds too before `+ b`, so 0.6 units of 2^-24 of slack; else 0.
    fn f32_scale_slack(self) -> f64 {
        match self {
            Weights::Mlx(_, _, FloatType::F32) => 0.6 * U,
            _ => 0.0,
        }
    }
}

/// A planted control attached to a case.
#[derive(Clone, Copy)]
enum Plant {
    /// The matmul through a deliberately wrong decoder kernel.
    Kernel(&'static str, &'static str),
    /// A wrong decoder that stays accurate and row-invariant: only the CPU bits catch it.
    BitsKernel(&'static str, &'static str),
    /// MLX scales re-laid one group off (the right kernel on wrong device bytes).
    ScaleShift,
}

/// (weights, rows, cols, label, heavy (quick depth), planted controls) of a matmul case.
type MatmulCase<'a> = (Weights, usize, usize, &'a str, bool, &'a [Plant]);

/// Uploads `hw`, or for [`Plant::ScaleShift`] its MLX re-layout with scales one group off.
pub(super) fn upload(gpu: &Gpu, hw: &HostWeights, shifted: bool) -> Result<GpuMatrix> {
    if !shifted {
        return GpuMatrix::upload(gpu, &hw.packed());
    }
    let bytes = mlx_device_bytes_planted_scale_shift(&hw.packed(), 1)?;
    GpuMatrix::from_device_layout(gpu, hw.format, hw.rows, hw.cols, &bytes)
}

fn bits_text(b: CpuBits) -> String {
    format!(
        "GPU != CPU bits: {} of {} differ (max {:.2e})",
        b.differing, b.compared, b.max_abs_diff
    )
}

fn cpu_err(op: &'static str) -> impl Fn(tf_kernels::matmul::MatmulError) -> CudaError {
    move |e| CudaError::Shape {
        op,
        detail: e.to_string(),
    }
}

/// Runs the quant cases and their controls.
pub(super) fn run(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    let pool = Pool::new(std::thread::available_parallelism().map_or(1, |n| n.get()));
    use FloatType::{BF16, F16, F32};
    use Weights::{Blocks, Mlx};
    let mlx4_plants: &[Plant] = &[
        Plant::Kernel(
            PLANT_MLX4_NIBBLES,
            "matmul MLX 4-bit: the two nibbles of each byte swapped",
        ),
        Plant::ScaleShift,
    ];
    let mlx4_fma: &[Plant] = &[Plant::BitsKernel(
        PLANT_MLX4_FMA,
        "matmul MLX 4-bit f32 scales: fmaf(s, q, b) for (s * q) + b (only the CPU bits can tell)",
    )];
    let q4k_plant: &[Plant] = &[Plant::Kernel(
        PLANT_Q4_K_SCALE,
        "matmul Q4_K: (scale, min) of the neighbouring sub-block",
    )];
    let q6k_plant: &[Plant] = &[Plant::Kernel(
        PLANT_Q6_K_SCALE,
        "matmul Q6_K: a quadrant's first 16-group scale used for both its groups",
    )];
    let cases: [MatmulCase; 16] = [
        (
            Mlx(4, 64, F16),
            576,
            576,
            "q/o proj 576x576",
            false,
            mlx4_plants,
        ),
        (Mlx(4, 64, BF16), 1536, 576, "gate/up 1536x576", false, &[]),
        (Mlx(4, 64, F16), 576, 1536, "down 576x1536", false, &[]),
        (Mlx(8, 64, F16), 576, 576, "q/o proj 576x576", false, &[]),
        (Mlx(8, 64, BF16), 576, 1536, "down 576x1536", false, &[]),
        (Mlx(8, 32, F32), 192, 576, "k/v proj 192x576", false, &[]),
        (Mlx(4, 32, F32), 64, 576, "64x576", false, mlx4_fma),
        (Mlx(4, 128, BF16), 96, 1024, "96x1024", false, &[]),
        (Mlx(2, 64, F16), 64, 576, "64x576", false, &[]),
        (Mlx(3, 64, BF16), 64, 576, "64x576", false, &[]),
        (Mlx(5, 128, F16), 64, 640, "64x640", false, &[]),
        (Mlx(6, 128, F32), 64, 768, "64x768", false, &[]),
        (
            Mlx(4, 64, F16),
            49152,
            576,
            "tied head 49152x576",
            true,
            &[],
        ),
        (
            Blocks(GpuFormat::Q4K),
            576,
            1536,
            "down 576x1536",
            false,
            q4k_plant,
        ),
        (Blocks(GpuFormat::Q4K), 1536, 512, "1536x512", false, &[]),
        (
            Blocks(GpuFormat::Q6K),
            576,
            1536,
            "down 576x1536",
            false,
            q6k_plant,
        ),
    ];
    for (i, &(w, rows, cols, label, heavy, plants)) in cases.iter().enumerate() {
        let d = if heavy { Depth::Quick } else { depth };
        // Both geometries where the format has tf_mmq (4 threads a row) beside tf_mmv (16).
        for tpr in [16, 4] {
            let c = GeometryCase {
                weights: w,
                rows,
                cols,
                label,
                plants,
                tpr,
            };
            if tpr == 16 || w.gpu_format().has_mmq() {
                matmul_case(gpu, &pool, d, &c, out, i as u64)?;
            }
        }
    }
    let big_q6k = GeometryCase {
        weights: Blocks(GpuFormat::Q6K),
        rows: 8192,
        cols: 768,
        label: "output head 8192x768",
        plants: &[],
        tpr: 16,
    };
    matmul_case(gpu, &pool, Depth::Quick, &big_q6k, out, 99)?;
    embeddings(gpu, depth, out)?;
    fused::run(gpu, &pool, depth, out)
}

/// A matmul case: weights, shape, label, planted controls and the launch geometry.
struct GeometryCase<'a> {
    weights: Weights,
    rows: usize,
    cols: usize,
    label: &'a str,
    plants: &'a [Plant],
    /// Threads a weight row: 16 (tf_mmv) or 4 (tf_mmq).
    tpr: usize,
}

/// One matmul case: the contract, GPU vs CPU bits on 40 rows, and its planted controls.
fn matmul_case(
    gpu: &Gpu,
    pool: &Pool,
    depth: Depth,
    case: &GeometryCase,
    out: &mut SuiteResult,
    seed: u64,
) -> Result<()> {
    let (weights, rows, cols, plants, tpr) =
        (case.weights, case.rows, case.cols, case.plants, case.tpr);
    let label = &format!("{}, {tpr} threads a row", case.label);
    let mut rng = Rng::new(0x9a1 + seed);
    let hw = weights.draw(rows, cols, &mut rng);
    let wf: Vec<f64> = (0..rows).flat_map(|j| hw.row_f64(j)).collect();
    let wmax = wf.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let w = upload(gpu, &hw, false)?;
    let bufs = RefCell::new((
        gpu.zeros::<f32>(MAX_ROWS * cols)?,
        gpu.zeros::<f32>(MAX_ROWS * rows)?,
    ));
    let errs = ErrSlot::default();
    let run_on = |m: &GpuMatrix, kernel: &'static str, xs: &[Vec<f32>], o: &mut [f32]| {
        let r = (|| -> Result<()> {
            let mut b = bufs.borrow_mut();
            let (x, y) = &mut *b;
            let flat: Vec<f32> = xs.iter().flatten().copied().collect();
            gpu.write(&flat, x)?;
            ops::matmul_geometry(gpu, kernel, m, x, xs.len(), y, tpr)?;
            o.copy_from_slice(&gpu.download(y, o.len())?);
            Ok(())
        })();
        if let Err(e) = r {
            errs.put(e, o);
        }
    };
    // |x| <= 1: the fmaf chains of k/16 terms plus the fold (4), the weight's own rounding, and
    // for f32 MLX scales the rounding of s * q.
    let k = cols as f64;
    let abs = ((k / 16.0).ceil() + 6.0) * U * k * wmax + k * weights.f32_scale_slack();
    let gen = |r: &mut Rng, _: usize| r.vec_uniform(cols, -1.0, 1.0);
    let reference = |x: &Vec<f32>, o: &mut [f64]| dense_reference(&wf, cols, x, o);
    let name = format!("matmul {}", weights.name());
    let op = RowOp {
        name: &name,
        out_width: rows,
        tolerance: Tolerance::new(abs, 0.0),
        gen_row: &gen,
        reference: &reference,
    };
    let kernel = w.format().matmul_kernel();
    let run = |xs: &[Vec<f32>], o: &mut [f32]| run_on(&w, kernel, xs, o);
    let cfg = depth.config(0x7c + seed);
    let v = verdict(&op, &run, &cfg, &errs);
    let mut r2 = Rng::new(0xb17 + seed);
    let xs: Vec<Vec<f32>> = (0..40).map(|_| r2.vec_uniform(cols, -1.0, 1.0)).collect();
    let mut g = vec![0f32; 40 * rows];
    run(&xs, &mut g);
    let mut c = vec![0f32; 40 * rows];
    let flat: Vec<f32> = xs.iter().flatten().copied().collect();
    cpu_matmul(&hw.packed(), &flat, 40, &mut c, pool).map_err(cpu_err("cpu matmul"))?;
    let bits = compare_bits(&g, &c);
    out.cases.push(CaseResult {
        op: name.clone(),
        case: label.to_string(),
        verdict: bits.gate(v, "CPU bits"),
        cpu_bits: Some(bits),
    });
    for plant in plants {
        match *plant {
            Plant::Kernel(kname, what) => {
                let broken = |xs: &[Vec<f32>], o: &mut [f32]| run_on(&w, kname, xs, o);
                out.controls.push(control(what, &op, &broken, &cfg, &errs));
            }
            Plant::BitsKernel(kname, what) => {
                let mut p = vec![0f32; 40 * rows];
                run_on(&w, kname, &xs, &mut p);
                let b = compare_bits(&p, &c);
                let caught = match errs.take() {
                    Some(e) => Err(format!("a GPU error is not a catch: {e}")),
                    None if b.differing > 0 => Ok(bits_text(b)),
                    None => Err("its bits equal the CPU's".into()),
                };
                out.controls.push(ControlResult {
                    control: what.to_string(),
                    caught,
                });
            }
            Plant::ScaleShift => {
                let bad = upload(gpu, &hw, true)?;
                let broken = |xs: &[Vec<f32>], o: &mut [f32]| run_on(&bad, kernel, xs, o);
                let what = format!(
                    "matmul {}: scales re-laid one group off (right kernel)",
                    weights.name()
                );
                out.controls.push(control(&what, &op, &broken, &cfg, &errs));
            }
        }
    }
    Ok(())
}

/// Embedding rows of every new format: the decoded weight row of each token.
fn embeddings(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    use FloatType::{BF16, F16, F32};
    use Weights::{Blocks, Mlx};
    let cases = [
        (Mlx(4, 64, F16), 49152, 576),
        (Mlx(8, 32, BF16), 300, 576),
        (Mlx(2, 128, F32), 300, 768),
        (Mlx(3, 32, F16), 300, 576),
        (Mlx(5, 64, BF16), 300, 576),
        (Mlx(6, 32, F32), 300, 576),
        (Blocks(GpuFormat::Q4K), 300, 1536),
        (Blocks(GpuFormat::Q6K), 300, 1536),
    ];
    for (i, &(weights, rows, cols)) in cases.iter().enumerate() {
        let mut rng = Rng::new(0xe4b + i as u64);
        let hw = weights.draw(rows, cols, &mut rng);
        let good = upload(gpu, &hw, false)?;
        let tok = RefCell::new(gpu.zeros::<i32>(MAX_ROWS)?);
        let dst = RefCell::new(gpu.zeros::<f32>(MAX_ROWS * cols)?);
        let errs = ErrSlot::default();
        let run_on = |w: &GpuMatrix, ids: &[usize], o: &mut [f32]| {
            let r = (|| -> Result<()> {
                let ids: Vec<i32> = ids.iter().map(|&t| t as i32).collect();
                let (mut t, mut d) = (tok.borrow_mut(), dst.borrow_mut());
                gpu.write(&ids, &mut t)?;
                ops::embed(gpu, w, &t, ids.len(), &mut d)?;
                o.copy_from_slice(&gpu.download(&d, o.len())?);
                Ok(())
            })();
            if let Err(e) = r {
                errs.put(e, o);
            }
        };
        let gen = |r: &mut Rng, _: usize| r.below(rows);
        let reference = |t: &usize, o: &mut [f64]| o.copy_from_slice(&hw.row_f64(*t));
        let name = format!("embedding {}", weights.name());
        // One rounding of each value (two for f32 MLX scales: s * q, then + b).
        let op = RowOp {
            name: &name,
            out_width: cols,
            tolerance: Tolerance::new(weights.f32_scale_slack(), 1.2e-7),
            gen_row: &gen,
            reference: &reference,
        };
        let cfg = depth.config(0x4e + i as u64);
        let run = |ids: &[usize], o: &mut [f32]| run_on(&good, ids, o);
        let v = verdict(&op, &run, &cfg, &errs);
        let ids: Vec<usize> = (0..64).map(|_| rng.below(rows)).collect();
        let mut g = vec![0f32; 64 * cols];
        run(&ids, &mut g);
        let mut c = vec![0f32; 64 * cols];
        for (t, row) in ids.iter().zip(c.chunks_exact_mut(cols)) {
            embedding_row(&hw.packed(), *t, row).map_err(cpu_err("cpu embedding"))?;
        }
        let bits = compare_bits(&g, &c);
        out.cases.push(CaseResult {
            op: name.clone(),
            case: format!("{rows}x{cols}"),
            verdict: bits.gate(v, "CPU bits"),
            cpu_bits: Some(bits),
        });
        if i == 1 {
            let bad = upload(gpu, &hw, true)?;
            let broken = |ids: &[usize], o: &mut [f32]| run_on(&bad, ids, o);
            let what = format!("{name}: scales re-laid one group off");
            out.controls.push(control(&what, &op, &broken, &cfg, &errs));
        }
    }
    Ok(())
}
