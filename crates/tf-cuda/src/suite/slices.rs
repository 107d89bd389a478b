//! Contract cases for the matmuls in the GPU's own order (`tf_slices`: MLX 4-bit and bf16):
//! accuracy against an f64 reference and row invariance at every row count, and bit for bit
//! the order's host reference ([`crate::slices::reference`]), not the CPU's. Planted controls:
//! units in an order that follows the row count (the harness must catch it), and a lane's
//! chains added in another order (accurate and row-invariant: only the reference bits catch it).

use super::packed::HostWeights;
use super::quant::Weights;
use super::{
    compare_bits, control, dense_reference, verdict, CaseResult, ControlResult, Depth, ErrSlot,
    SuiteResult,
};
use crate::device::Gpu;
use crate::error::Result;
use crate::slices::{self, PLANT_LANE_SUM, PLANT_ROW_VARIANT};
use crate::weights::{device_bytes, GpuFormat, GpuMatrix};
use std::cell::RefCell;
use tf_kernels::contract::{Rng, RowOp, Tolerance};
use tf_kernels::matmul::FloatType;

const U: f64 = 1.0 / (1u64 << 24) as f64;

/// Most rows any call of the harness makes.
const MAX_ROWS: usize = 100;

/// Rows compared with the host reference.
const BIT_ROWS: usize = 40;

/// Runs the `tf_slices` cases and their controls.
pub(super) fn run(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    use FloatType::{BF16, F16, F32};
    use Weights::{Blocks, Mlx};
    let cases = [
        (Mlx(4, 64, F16), 576, 576, "q/o proj 576x576", false),
        (Mlx(4, 32, F32), 67, 1184, "67x1184, 37 units a row", false),
        // Four units a lane: the planted unit order changes sums.
        (Mlx(4, 64, BF16), 1536, 4096, "1536x4096", true),
        (Blocks(GpuFormat::Bf16), 368, 4096, "router 368x4096", false),
        (Blocks(GpuFormat::Bf16), 96, 1024, "96x1024", false),
    ];
    for (i, &(weights, rows, cols, label, plants)) in cases.iter().enumerate() {
        let mut rng = Rng::new(0x51ce + i as u64);
        let hw = weights.draw(rows, cols, &mut rng);
        case(gpu, depth, &hw, weights, label, plants, i as u64, out)?;
    }
    Ok(())
}

/// One matrix: the contract verdict, the reference bits, and (`plants`) the two controls.
#[allow(clippy::too_many_arguments)]
fn case(
    gpu: &Gpu,
    depth: Depth,
    hw: &HostWeights,
    weights: Weights,
    label: &str,
    plants: bool,
    seed: u64,
    out: &mut SuiteResult,
) -> Result<()> {
    let (rows, cols) = (hw.rows, hw.cols);
    let wf: Vec<f64> = (0..rows).flat_map(|j| hw.row_f64(j)).collect();
    let wmax = wf.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let w = GpuMatrix::upload(gpu, &hw.packed())?;
    let dev = device_bytes(&hw.packed())?.into_owned();
    let Some(kernel) = slices::kernel(w.format(), cols) else {
        return Err(crate::error::CudaError::Shape {
            op: "slices suite",
            detail: format!("{label}: no tf_slices kernel"),
        });
    };
    let bufs = RefCell::new((
        gpu.zeros::<f32>(MAX_ROWS * cols)?,
        gpu.zeros::<f32>(MAX_ROWS * rows)?,
    ));
    let errs = ErrSlot::default();
    // `per`: row groups a warp at one row (None: the launcher's choice).
    let run_per = |kernel: &str, per: Option<usize>, xs: &[Vec<f32>], o: &mut [f32]| {
        let r = (|| -> Result<()> {
            let mut b = bufs.borrow_mut();
            let (x, y) = &mut *b;
            let flat: Vec<f32> = xs.iter().flatten().copied().collect();
            gpu.write(&flat, x)?;
            match per {
                Some(p) => slices::matmul_geometry(gpu, kernel, &w, x, xs.len(), y, p)?,
                None => slices::matmul_with(gpu, kernel, &w, x, xs.len(), y)?,
            }
            o.copy_from_slice(&gpu.download(y, o.len())?);
            Ok(())
        })();
        if let Err(e) = r {
            errs.put(e, o);
        }
    };
    let run_on = |kernel: &str, xs: &[Vec<f32>], o: &mut [f32]| run_per(kernel, None, xs, o);
    // |x| <= 1: chains of 8 terms a unit for ceil(units / 32) units, the lane sum (2) and the
    // fold (5), and the weight's one rounding.
    let k = cols as f64;
    let chain = 8.0 * (cols / 32).div_ceil(32) as f64;
    let abs = (chain + 8.0) * U * k * wmax + U * k * wmax;
    let gen = |r: &mut Rng, _: usize| r.vec_uniform(cols, -1.0, 1.0);
    let reference = |x: &Vec<f32>, o: &mut [f64]| dense_reference(&wf, cols, x, o);
    let name = format!("matmul tf_slices {}", weights.name());
    let op = RowOp {
        name: &name,
        out_width: rows,
        tolerance: Tolerance::new(abs, 0.0),
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = depth.config(0x5e1 + seed);
    let run = |xs: &[Vec<f32>], o: &mut [f32]| run_on(kernel, xs, o);
    let v = verdict(&op, &run, &cfg, &errs);
    // Bit for bit the host reference of the order, at BIT_ROWS rows, and at one (the _one
    // entry, with the launcher's row groups a warp and with 3).
    let mut r2 = Rng::new(0x5e2 + seed);
    let xs: Vec<Vec<f32>> = (0..BIT_ROWS)
        .map(|_| r2.vec_uniform(cols, -1.0, 1.0))
        .collect();
    let flat: Vec<f32> = xs.iter().flatten().copied().collect();
    let want = slices::reference(w.format(), &dev, rows, cols, &flat, BIT_ROWS);
    let mut g = vec![0f32; BIT_ROWS * rows];
    run(&xs, &mut g);
    let mut all_want = want.clone();
    for per in [None, Some(3)] {
        let mut g1 = vec![0f32; rows];
        run_per(kernel, per, &xs[..1], &mut g1);
        g.extend_from_slice(&g1);
        all_want.extend_from_slice(&want[..rows]);
    }
    let bits = compare_bits(&g, &all_want);
    let verdict = bits.gate(v, "the tf_slices reference");
    out.cases.push(CaseResult {
        op: name.clone(),
        case: format!("{label} (bits: the tf_slices reference, not the CPU)"),
        verdict,
        cpu_bits: Some(bits),
    });
    if plants {
        let broken = |xs: &[Vec<f32>], o: &mut [f32]| run_on(PLANT_ROW_VARIANT, xs, o);
        let what = "matmul tf_slices MLX 4-bit: units in descending order when n > 1";
        out.controls.push(control(what, &op, &broken, &cfg, &errs));
        let mut p = vec![0f32; BIT_ROWS * rows];
        run_on(PLANT_LANE_SUM, &xs, &mut p);
        let b = compare_bits(&p, &all_want[..BIT_ROWS * rows]);
        let caught = match errs.take() {
            Some(e) => Err(format!("a GPU error is not a catch: {e}")),
            None if b.differing > 0 => Ok(format!(
                "GPU != the tf_slices reference: {} of {} differ",
                b.differing, b.compared
            )),
            None => Err("its bits equal the reference's".into()),
        };
        out.controls.push(ControlResult {
            control: "matmul tf_slices MLX 4-bit: a lane's chains as (c0 + c2) + (c1 + c3) (only the reference bits can tell)".into(),
            caught,
        });
    }
    Ok(())
}
