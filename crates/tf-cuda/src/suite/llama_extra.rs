//! Contract cases for the llama extras (`llama::extra`): the projection bias add, the output
//! bias with the residual add, and the per-head q/k RMSNorm over `[q | k | v]` rows. Each case's
//! verdict also requires the GPU's bits to equal the CPU forward's (`tf_models::llama`: `a += b`
//! per row, `add_inplace`, `rms_norm_inplace` per head).

use super::{
    compare_bits, control, verdict, CaseResult, ControlResult, CpuBits, Depth, ErrSlot, SuiteResult,
};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::llama::extra::{self, HeadRun};
use std::cell::RefCell;
use tf_kernels::contract::{Rng, RowOp, Tolerance};
use tf_kernels::ops::{add_inplace as cpu_add_inplace, rms_norm_inplace as cpu_rms_norm_inplace};

const MAX_ROWS: usize = 100;
/// Rows of the GPU-vs-CPU bit comparison.
const BIT_ROWS: usize = 33;

fn cpu_err(op: &'static str) -> impl Fn(tf_kernels::ops::OpError) -> CudaError {
    move |e| CudaError::Shape {
        op,
        detail: e.to_string(),
    }
}

/// The CPU forward's bias add (`add_rows` in tf_models::llama): `a += b` on every row.
fn cpu_add_rows(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (a, b) in row.iter_mut().zip(bias) {
            *a += b;
        }
    }
}

/// A control caught by the bit comparison with the CPU (a reordering the harness's tolerance
/// admits).
fn bits_control(name: &str, bits: CpuBits, errs: &ErrSlot) -> ControlResult {
    let caught = match errs.take() {
        Some(e) => Err(format!("a GPU error is not a catch: {e}")),
        None if bits.differing > 0 => Ok(format!(
            "GPU != CPU bits: {} of {} differ",
            bits.differing, bits.compared
        )),
        None => Err("every value had the CPU's bits".into()),
    };
    ControlResult {
        control: name.to_string(),
        caught,
    }
}

/// Runs the llama-extra cases and controls.
pub(crate) fn run(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    // A [q | k | v] row of 14 + 2 * 2 heads of 64, and an odd width.
    bias(gpu, depth, 1152, true, out, 0xB0)?;
    bias(gpu, depth, 577, false, out, 0xB1)?;
    bias_residual(gpu, depth, 896, true, out, 0xB2)?;
    bias_residual(gpu, depth, 577, false, out, 0xB3)?;
    head_norm(gpu, depth, (4, 2, 64), true, out, 0xB4)?;
    head_norm(gpu, depth, (16, 8, 128), false, out, 0xB5)?;
    head_norm(gpu, depth, (3, 1, 100), false, out, 0xB6)
}

fn bias(
    gpu: &Gpu,
    depth: Depth,
    width: usize,
    with_controls: bool,
    out: &mut SuiteResult,
    seed: u64,
) -> Result<()> {
    let mut rng = Rng::new(seed);
    // Every bias at least 0.5 from zero: a skipped one is far outside the tolerance.
    let bias_h: Vec<f32> = rng
        .vec_uniform(width, 0.5, 1.5)
        .into_iter()
        .enumerate()
        .map(|(j, b)| if j % 2 == 0 { b } else { -b })
        .collect();
    let b = gpu.upload(&bias_h)?;
    let y = RefCell::new(gpu.zeros::<f32>(MAX_ROWS * width)?);
    let errs = ErrSlot::default();
    let run_with = |kernel: &'static str, rows: &[Vec<f32>], o: &mut [f32]| {
        let r = (|| -> Result<()> {
            let flat: Vec<f32> = rows.iter().flatten().copied().collect();
            let mut yb = y.borrow_mut();
            gpu.write(&flat, &mut yb)?;
            extra::bias_rows_with(gpu, kernel, &mut yb, &b, rows.len())?;
            o.copy_from_slice(&gpu.download(&yb, o.len())?);
            Ok(())
        })();
        if let Err(e) = r {
            errs.put(e, o);
        }
    };
    let gen = |r: &mut Rng, _: usize| r.vec_normal(width, 2.0);
    let reference = |x: &Vec<f32>, o: &mut [f64]| {
        for ((o, &v), &c) in o.iter_mut().zip(x).zip(&bias_h) {
            *o = v as f64 + c as f64;
        }
    };
    let op = RowOp {
        name: "bias_rows",
        out_width: width,
        tolerance: Tolerance::new(1e-6, 1e-6),
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = depth.config(seed);
    let run = |rows: &[Vec<f32>], o: &mut [f32]| run_with("tf_bias_rows", rows, o);
    let v = verdict(&op, &run, &cfg, &errs);
    let xs: Vec<Vec<f32>> = (0..BIT_ROWS).map(|i| gen(&mut rng, i)).collect();
    let mut g = vec![0f32; BIT_ROWS * width];
    run(&xs, &mut g);
    let mut c: Vec<f32> = xs.iter().flatten().copied().collect();
    cpu_add_rows(&mut c, &bias_h);
    let bits = compare_bits(&g, &c);
    out.cases.push(CaseResult {
        op: "bias_rows (q/k/v, gate/up biases)".into(),
        case: format!("width {width}"),
        verdict: errs
            .take()
            .map_or_else(|| bits.gate(v, "the CPU's bits"), Err),
        cpu_bits: Some(bits),
    });
    if with_controls {
        let skip =
            |rows: &[Vec<f32>], o: &mut [f32]| run_with("tf_plant_bias_rows_skip_last", rows, o);
        out.controls.push(control(
            "bias_rows: the last column gets no bias",
            &op,
            &skip,
            &cfg,
            &errs,
        ));
    }
    Ok(())
}

fn bias_residual(
    gpu: &Gpu,
    depth: Depth,
    width: usize,
    with_controls: bool,
    out: &mut SuiteResult,
    seed: u64,
) -> Result<()> {
    let mut rng = Rng::new(seed);
    let bias_h = rng.vec_normal(width, 1.0);
    let b = gpu.upload(&bias_h)?;
    let xb = RefCell::new(gpu.zeros::<f32>(MAX_ROWS * width)?);
    let sb = RefCell::new(gpu.zeros::<f32>(MAX_ROWS * width)?);
    let errs = ErrSlot::default();
    type Pair = (Vec<f32>, Vec<f32>);
    let run_with = |kernel: &'static str, rows: &[Pair], o: &mut [f32]| {
        let r = (|| -> Result<()> {
            let x: Vec<f32> = rows.iter().flat_map(|r| r.0.iter().copied()).collect();
            let s: Vec<f32> = rows.iter().flat_map(|r| r.1.iter().copied()).collect();
            let (mut xg, mut sg) = (xb.borrow_mut(), sb.borrow_mut());
            gpu.write(&x, &mut xg)?;
            gpu.write(&s, &mut sg)?;
            extra::bias_residual_with(gpu, kernel, &mut xg, &sg, &b, rows.len())?;
            o.copy_from_slice(&gpu.download(&xg, o.len())?);
            Ok(())
        })();
        if let Err(e) = r {
            errs.put(e, o);
        }
    };
    // The residual stream larger than the projection, as in a model.
    let gen = |r: &mut Rng, _: usize| (r.vec_normal(width, 4.0), r.vec_normal(width, 1.0));
    let reference = |row: &Pair, o: &mut [f64]| {
        for (j, o) in o.iter_mut().enumerate() {
            *o = row.0[j] as f64 + row.1[j] as f64 + bias_h[j] as f64;
        }
    };
    let op = RowOp {
        name: "bias_residual",
        out_width: width,
        tolerance: Tolerance::new(1e-6, 1e-6),
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = depth.config(seed);
    let run = |rows: &[Pair], o: &mut [f32]| run_with("tf_bias_residual", rows, o);
    let v = verdict(&op, &run, &cfg, &errs);
    let rows: Vec<Pair> = (0..BIT_ROWS).map(|i| gen(&mut rng, i)).collect();
    // The CPU forward: o += bias, then x += o.
    let mut cx: Vec<f32> = rows.iter().flat_map(|r| r.0.iter().copied()).collect();
    let mut co: Vec<f32> = rows.iter().flat_map(|r| r.1.iter().copied()).collect();
    cpu_add_rows(&mut co, &bias_h);
    cpu_add_inplace(&mut cx, &co).map_err(cpu_err("cpu add_inplace"))?;
    let mut g = vec![0f32; BIT_ROWS * width];
    run(&rows, &mut g);
    let bits = compare_bits(&g, &cx);
    out.cases.push(CaseResult {
        op: "bias_residual (o, down biases)".into(),
        case: format!("width {width}"),
        verdict: errs
            .take()
            .map_or_else(|| bits.gate(v, "the CPU's bits"), Err),
        cpu_bits: Some(bits),
    });
    if with_controls {
        let mut p = vec![0f32; BIT_ROWS * width];
        run_with("tf_plant_bias_residual_reordered", &rows, &mut p);
        out.controls.push(bits_control(
            "bias_residual: (x + o) + b (a fused residual, then the bias)",
            compare_bits(&p, &cx),
            &errs,
        ));
    }
    Ok(())
}

fn head_norm(
    gpu: &Gpu,
    depth: Depth,
    (nh, nkv, hd): (usize, usize, usize),
    with_controls: bool,
    out: &mut SuiteResult,
    seed: u64,
) -> Result<()> {
    let eps = 1e-6f32;
    let (qw, kw) = (nh * hd, nkv * hd);
    let width = qw + 2 * kw;
    let mut rng = Rng::new(seed);
    let (gq_h, gk_h) = (rng.vec_uniform(hd, 0.5, 1.5), rng.vec_uniform(hd, 0.5, 1.5));
    let (gq, gk) = (gpu.upload(&gq_h)?, gpu.upload(&gk_h)?);
    let x = RefCell::new(gpu.zeros::<f32>(MAX_ROWS * width)?);
    let errs = ErrSlot::default();
    let run_with =
        |kernel: &'static str, eps_n: &dyn Fn(usize) -> f32, rows: &[Vec<f32>], o: &mut [f32]| {
            let r = (|| -> Result<()> {
                let flat: Vec<f32> = rows.iter().flatten().copied().collect();
                let mut xb = x.borrow_mut();
                gpu.write(&flat, &mut xb)?;
                let (n, e) = (rows.len(), eps_n(rows.len()));
                let run = |heads, offset| HeadRun {
                    heads,
                    row_stride: width,
                    offset,
                };
                extra::head_rms_norm_with(gpu, kernel, &mut xb, &gq, e, n, run(nh, 0))?;
                extra::head_rms_norm_with(gpu, kernel, &mut xb, &gk, e, n, run(nkv, qw))?;
                o.copy_from_slice(&gpu.download(&xb, o.len())?);
                Ok(())
            })();
            if let Err(e) = r {
                errs.put(e, o);
            }
        };
    // Projection outputs with a bias-like offset per element (qwen2/3 q/k rows are far from
    // zero-mean).
    let gen = |r: &mut Rng, _: usize| {
        let mut v = r.vec_normal(width, 1.5);
        for (j, e) in v.iter_mut().enumerate() {
            *e += (j % 7) as f32 - 3.0;
        }
        v
    };
    let reference = |row: &Vec<f32>, o: &mut [f64]| {
        o.iter_mut().zip(row).for_each(|(o, &v)| *o = v as f64);
        let heads = (0..nh)
            .map(|h| (h * hd, &gq_h))
            .chain((0..nkv).map(|h| (qw + h * hd, &gk_h)));
        for (start, gain) in heads {
            let head = &row[start..start + hd];
            let ss: f64 = head.iter().map(|&v| v as f64 * v as f64).sum();
            let r = 1.0 / (ss / hd as f64 + eps as f64).sqrt();
            for (k, (&v, &g)) in head.iter().zip(gain.iter()).enumerate() {
                o[start + k] = g as f64 * v as f64 * r;
            }
        }
    };
    let op = RowOp {
        name: "head_rms_norm",
        out_width: width,
        tolerance: Tolerance::new(1e-6, 2e-6),
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = depth.config(seed);
    let run = |rows: &[Vec<f32>], o: &mut [f32]| run_with("tf_head_rms_norm", &|_| eps, rows, o);
    let v = verdict(&op, &run, &cfg, &errs);
    let xs: Vec<Vec<f32>> = (0..BIT_ROWS).map(|i| gen(&mut rng, i)).collect();
    let mut g = vec![0f32; BIT_ROWS * width];
    run(&xs, &mut g);
    // The CPU forward: rms_norm_inplace over the q heads, then the k heads.
    let mut c: Vec<f32> = xs.iter().flatten().copied().collect();
    for row in c.chunks_exact_mut(width) {
        cpu_rms_norm_inplace(&mut row[..qw], &gq_h, eps, nh).map_err(cpu_err("cpu q norm"))?;
        cpu_rms_norm_inplace(&mut row[qw..qw + kw], &gk_h, eps, nkv)
            .map_err(cpu_err("cpu k norm"))?;
    }
    let bits = compare_bits(&g, &c);
    out.cases.push(CaseResult {
        op: "head_rms_norm (q/k norms)".into(),
        case: format!("[q | k | v] of {nh} + {nkv} + {nkv} heads x {hd}, eps 1e-6"),
        verdict: errs
            .take()
            .map_or_else(|| bits.gate(v, "the CPU's bits"), Err),
        cpu_bits: Some(bits),
    });
    if with_controls {
        let short = |rows: &[Vec<f32>], o: &mut [f32]| {
            run_with("tf_plant_head_rms_norm_short", &|_| eps, rows, o)
        };
        out.controls.push(control(
            "head_rms_norm: sum of squares skips the head's last element",
            &op,
            &short,
            &cfg,
            &errs,
        ));
        let drift = |rows: &[Vec<f32>], o: &mut [f32]| {
            run_with(
                "tf_head_rms_norm",
                &|n| if n > 1 { eps * 100.0 } else { eps },
                rows,
                o,
            )
        };
        out.controls.push(control(
            "head_rms_norm: eps 100x larger when n > 1 (arithmetic depends on the row count)",
            &op,
            &drift,
            &cfg,
            &errs,
        ));
    }
    Ok(())
}
