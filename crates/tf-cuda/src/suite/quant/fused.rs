//! Fused decode kernels (norm / SwiGLU in, residual add out) over K-quant and MLX weights, each
//! compared bit for bit with the CPU's separate operators, with a planted control.

use super::{cpu_err, upload, Weights, MAX_ROWS, U};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::fused::{matmul_fused, Epilogue, XForm};
use crate::suite::{compare_bits, control, verdict, CaseResult, Depth, ErrSlot, SuiteResult};
use crate::weights::{GpuFormat, GpuMatrix};
use std::cell::RefCell;
use tf_kernels::contract::{Rng, RowOp, Tolerance};
use tf_kernels::matmul::{matmul as cpu_matmul, FloatType};
use tf_kernels::ops::{rms_norm, silu_mul};
use tf_kernels::pool::Pool;

const EPS: f32 = 1e-5;

/// The transform and epilogue of a case (the three the llama decode uses).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    NormStore,
    NoneAdd,
    SiluAdd,
}

/// One input row: the matmul input (`cols`, or `2 * cols` for SwiGLU) and the residual row.
type Row = (Vec<f32>, Vec<f32>);

/// Runs the fused cases and their control.
pub(super) fn run(gpu: &Gpu, pool: &Pool, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    use FloatType::{BF16, F16, F32};
    use Kind::{NoneAdd, NormStore, SiluAdd};
    use Weights::{Blocks, Mlx};
    let (q4k, q6k) = (Blocks(GpuFormat::Q4K), Blocks(GpuFormat::Q6K));
    // (weights, rows, cols, kind, label, heavy)
    let cases = [
        (
            Mlx(4, 64, F16),
            960,
            576,
            NormStore,
            "[q|k|v] 960x576 with the input norm",
            false,
        ),
        (
            Mlx(4, 64, F16),
            576,
            576,
            NoneAdd,
            "o 576x576 with the residual add",
            false,
        ),
        (
            Mlx(4, 64, BF16),
            3072,
            576,
            NormStore,
            "[gate|up] 3072x576 with the MLP norm",
            false,
        ),
        (
            Mlx(4, 64, F16),
            576,
            1536,
            SiluAdd,
            "down 576x1536 with SwiGLU in, residual add",
            false,
        ),
        (
            Mlx(4, 64, F16),
            49152,
            576,
            NormStore,
            "tied head 49152x576 with the final norm",
            true,
        ),
        (
            Mlx(8, 64, BF16),
            960,
            576,
            NormStore,
            "[q|k|v] 960x576 with the input norm",
            false,
        ),
        (
            Mlx(8, 32, F32),
            576,
            1536,
            SiluAdd,
            "down 576x1536 with SwiGLU in, residual add",
            false,
        ),
        (
            Mlx(2, 32, F16),
            64,
            576,
            NoneAdd,
            "64x576, residual add",
            false,
        ),
        (
            Mlx(3, 64, BF16),
            64,
            576,
            NormStore,
            "64x576 with a norm",
            false,
        ),
        (
            Mlx(5, 128, F32),
            64,
            768,
            SiluAdd,
            "64x768 with SwiGLU",
            false,
        ),
        (
            Mlx(6, 64, F16),
            64,
            576,
            NormStore,
            "64x576 with a norm",
            false,
        ),
        (q4k, 1536, 512, NormStore, "1536x512 with a norm", false),
        (
            q4k,
            576,
            1536,
            SiluAdd,
            "down 576x1536 with SwiGLU in, residual add",
            false,
        ),
        (
            q4k,
            512,
            512,
            NoneAdd,
            "512x512 with the residual add",
            false,
        ),
        (
            q6k,
            576,
            1536,
            SiluAdd,
            "down 576x1536 with SwiGLU in, residual add",
            false,
        ),
        (
            q6k,
            8192,
            768,
            NormStore,
            "output head 8192x768 with the final norm",
            true,
        ),
    ];
    for (i, &(w, rows, cols, kind, label, heavy)) in cases.iter().enumerate() {
        let d = if heavy { Depth::Quick } else { depth };
        case(
            gpu,
            pool,
            d,
            w,
            rows,
            cols,
            kind,
            label,
            i == 0,
            out,
            i as u64,
        )?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn case(
    gpu: &Gpu,
    pool: &Pool,
    depth: Depth,
    weights: Weights,
    rows: usize,
    cols: usize,
    kind: Kind,
    label: &str,
    with_control: bool,
    out: &mut SuiteResult,
    seed: u64,
) -> Result<()> {
    let mut rng = Rng::new(0xf5e + seed);
    let hw = weights.draw(rows, cols, &mut rng);
    let wf: Vec<f64> = (0..rows).flat_map(|j| hw.row_f64(j)).collect();
    let wmax = wf.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let w = upload(gpu, &hw, false)?;
    let gain_h = rng.vec_uniform(cols, 0.5, 1.5);
    let gain = gpu.upload(&gain_h)?;
    let in_w = if kind == Kind::SiluAdd {
        2 * cols
    } else {
        cols
    };
    let bufs = RefCell::new((
        gpu.zeros::<f32>(MAX_ROWS * in_w)?,
        gpu.zeros::<f32>(MAX_ROWS * rows)?,
    ));
    let errs = ErrSlot::default();
    let run_on = |m: &GpuMatrix, rs: &[Row], o: &mut [f32]| {
        let r = (|| -> Result<()> {
            let mut b = bufs.borrow_mut();
            let (x, y) = &mut *b;
            let xs: Vec<f32> = rs.iter().flat_map(|r| r.0.iter().copied()).collect();
            gpu.write(&xs, x)?;
            let res: Vec<f32> = rs.iter().flat_map(|r| r.1.iter().copied()).collect();
            gpu.write(&res, y)?;
            let (xf, ep) = match kind {
                Kind::NormStore => (
                    XForm::Norm {
                        gain: &gain,
                        eps: EPS,
                    },
                    Epilogue::Store,
                ),
                Kind::NoneAdd => (XForm::None, Epilogue::Add),
                Kind::SiluAdd => (XForm::SiluMul, Epilogue::Add),
            };
            matmul_fused(gpu, m, x, in_w, xf, ep, rs.len(), y)?;
            o.copy_from_slice(&gpu.download(y, o.len())?);
            Ok(())
        })();
        if let Err(e) = r {
            errs.put(e, o);
        }
    };
    // Inputs: a norm row of scale ~1.5, plain rows in [-1, 1], SwiGLU gate/up of scale ~2 / ~1.
    let gen = |r: &mut Rng, _: usize| -> Row {
        let x = match kind {
            Kind::NormStore => r.vec_normal(cols, 1.5),
            Kind::NoneAdd => r.vec_uniform(cols, -1.0, 1.0),
            Kind::SiluAdd => {
                let mut v = r.vec_normal(cols, 2.0);
                v.extend(r.vec_uniform(cols, -1.0, 1.0));
                v
            }
        };
        let res = if kind == Kind::NormStore {
            Vec::new()
        } else {
            r.vec_uniform(rows, -1.0, 1.0)
        };
        (x, res)
    };
    let input_f64 = |x: &[f32]| -> Vec<f64> {
        match kind {
            Kind::NormStore => {
                let ss: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
                let r = 1.0 / (ss / cols as f64 + EPS as f64).sqrt();
                x.iter()
                    .zip(&gain_h)
                    .map(|(&v, &g)| g as f64 * v as f64 * r)
                    .collect()
            }
            Kind::NoneAdd => x.iter().map(|&v| v as f64).collect(),
            Kind::SiluAdd => (0..cols)
                .map(|k| {
                    let g = x[k] as f64;
                    g / (1.0 + (-g).exp()) * x[cols + k] as f64
                })
                .collect(),
        }
    };
    let reference = |row: &Row, o: &mut [f64]| {
        let h = input_f64(&row.0);
        for (j, oj) in o.iter_mut().enumerate() {
            let s: f64 = wf[j * cols..(j + 1) * cols]
                .iter()
                .zip(&h)
                .map(|(a, b)| a * b)
                .sum();
            *oj = s + row.1.get(j).map_or(0.0, |&v| v as f64);
        }
    };
    // |input| <= ~4.5 after a norm, <= ~2 after SwiGLU, <= 1 plain; the fmaf chains of k/16
    // terms, the fold, the input's own roundings, the weight's (two for f32 MLX scales), and the
    // residual add.
    let xmax = match kind {
        Kind::NormStore => 8.0,
        Kind::SiluAdd => 10.0,
        Kind::NoneAdd => 1.0,
    };
    let k = cols as f64;
    let abs = ((k / 16.0).ceil() + 8.0) * U * k * wmax * xmax
        + k * xmax * weights.f32_scale_slack()
        + 4.0 * U;
    let name = format!("fused matmul {} {kind:?}", weights.name());
    let op = RowOp {
        name: &name,
        out_width: rows,
        tolerance: Tolerance::new(abs, 2.0 * U),
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = depth.config(0x1f0 + seed);
    let run = |rs: &[Row], o: &mut [f32]| run_on(&w, rs, o);
    let v = verdict(&op, &run, &cfg, &errs);
    // GPU vs the CPU's separate operators on 24 fresh rows.
    let mut r2 = Rng::new(0x5eed ^ seed);
    let sample: Vec<Row> = (0..24).map(|i| gen(&mut r2, i)).collect();
    let mut g = vec![0f32; 24 * rows];
    run(&sample, &mut g);
    let flat: Vec<f32> = sample.iter().flat_map(|r| r.0.iter().copied()).collect();
    let shape = |op: &'static str| move |e: String| CudaError::Shape { op, detail: e };
    let h = match kind {
        Kind::NormStore => {
            let mut h = vec![0f32; 24 * cols];
            rms_norm(&flat, &gain_h, EPS, 24, &mut h)
                .map_err(|e| shape("cpu rms_norm")(e.to_string()))?;
            h
        }
        Kind::NoneAdd => flat,
        Kind::SiluAdd => {
            let (mut gs, mut us) = (Vec::new(), Vec::new());
            for r in &sample {
                gs.extend_from_slice(&r.0[..cols]);
                us.extend_from_slice(&r.0[cols..]);
            }
            let mut h = vec![0f32; 24 * cols];
            silu_mul(&gs, &us, &mut h).map_err(|e| shape("cpu silu_mul")(e.to_string()))?;
            h
        }
    };
    let mut c = vec![0f32; 24 * rows];
    cpu_matmul(&hw.packed(), &h, 24, &mut c, pool).map_err(cpu_err("cpu matmul"))?;
    if kind != Kind::NormStore {
        for (cr, r) in c.chunks_exact_mut(rows).zip(&sample) {
            for (a, &b) in cr.iter_mut().zip(&r.1) {
                *a += b;
            }
        }
    }
    let bits = compare_bits(&g, &c);
    out.cases.push(CaseResult {
        op: name.clone(),
        case: label.to_string(),
        verdict: bits.gate(v, "CPU bits"),
        cpu_bits: Some(bits),
    });
    if with_control {
        let bad = upload(gpu, &hw, true)?;
        let broken = |rs: &[Row], o: &mut [f32]| run_on(&bad, rs, o);
        let what = format!("{name}: scales re-laid one group off");
        out.controls.push(control(&what, &op, &broken, &cfg, &errs));
    }
    Ok(())
}
