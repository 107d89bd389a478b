//! Contract cases for the row operators: RMSNorm (alone and after the residual add), RoPE,
//! SwiGLU, and the exp they share.

use super::{compare_bits, control, verdict, CaseResult, CpuBits, Depth, ErrSlot, SuiteResult};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::ops::{self, Pairing};
use cudarc::driver::CudaSlice;
use std::cell::RefCell;
use tf_kernels::contract::{Rng, RowOp, Tolerance};
use tf_kernels::ops::{
    rms_norm as cpu_rms_norm, silu_mul as cpu_silu_mul, Rope, RopeAngles, RopeConfig, RopePairing,
    RopeScaling,
};

const MAX_ROWS: usize = 100;

fn cpu_err(op: &'static str) -> impl Fn(tf_kernels::ops::OpError) -> CudaError {
    move |e| CudaError::Shape {
        op,
        detail: e.to_string(),
    }
}

/// Runs the row-operator cases and controls.
pub(crate) fn run(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    for (i, width) in [576usize, 1536, 577].into_iter().enumerate() {
        norm(gpu, depth, width, 0, i == 0, out, 0x40 + i as u64)?;
    }
    for (i, width) in [4096usize, 577].into_iter().enumerate() {
        norm(gpu, depth, width, 1, i == 0, out, 0x50 + i as u64)?;
        norm(gpu, depth, width, 2, false, out, 0x58 + i as u64)?;
    }
    for (i, (heads, pairing)) in [
        (9usize, Pairing::Interleaved),
        (3, Pairing::Interleaved),
        (9, Pairing::Half),
    ]
    .into_iter()
    .enumerate()
    {
        rope(gpu, depth, heads, pairing, i == 0, out, 0x70 + i as u64)?;
    }
    swiglu(gpu, depth, 1536, out)?;
    exp_probe(gpu, out)
}

/// RMSNorm (`adds` 0: a row is x, its output `rms_norm(x)`) or the residual add and the norm in
/// one launch (1: a row is `[x | o]`, its output `[x + o | rms_norm(x + o)]`, the written
/// residual and the norm; 2: a row `[x | o | s]`, the residual `x + (o + s)`), against the
/// reference, row invariance, and the CPU's bits (of the adds then `rms_norm`); the planted
/// controls where asked, with `adds` 0 or 1.
fn norm(
    gpu: &Gpu,
    depth: Depth,
    width: usize,
    adds: usize,
    with_controls: bool,
    out: &mut SuiteResult,
    seed: u64,
) -> Result<()> {
    let eps = 1e-5f32;
    let add = adds > 0;
    // Widths of a row in and out.
    let (parts, outs) = (1 + adds, 1 + add as usize);
    let (name, kernel, short_kernel) = match adds {
        0 => ("rms_norm", "tf_rms_norm", Some("tf_plant_rms_norm_short")),
        1 => (
            "add_rms_norm",
            "tf_add_rms_norm",
            Some("tf_plant_add_rms_norm_short"),
        ),
        _ => ("add2_rms_norm", "tf_add2_rms_norm", None),
    };
    let mut rng = Rng::new(seed);
    let gain_h = rng.vec_uniform(width, 0.5, 1.5);
    let gain = gpu.upload(&gain_h)?;
    let bufs = RefCell::new([
        gpu.zeros::<f32>(MAX_ROWS * width)?,
        gpu.zeros::<f32>(MAX_ROWS * width)?,
        gpu.zeros::<f32>(MAX_ROWS * width)?,
        gpu.zeros::<f32>(MAX_ROWS * width)?,
    ]);
    let errs = ErrSlot::default();
    let run_with =
        |kernel: &'static str, eps_n: &dyn Fn(usize) -> f32, rows: &[Vec<f32>], o: &mut [f32]| {
            let r = (|| -> Result<()> {
                let n = rows.len();
                let part = |h: usize| -> Vec<f32> {
                    rows.iter()
                        .flat_map(|r| &r[h * width..(h + 1) * width])
                        .copied()
                        .collect()
                };
                let [x, o1, o2, y] = &mut *bufs.borrow_mut();
                gpu.write(&part(0), x)?;
                if adds > 0 {
                    gpu.write(&part(1), o1)?;
                }
                if adds > 1 {
                    gpu.write(&part(2), o2)?;
                }
                let res = match adds {
                    0 => ops::Residual::None,
                    1 => ops::Residual::Add(o1),
                    _ => ops::Residual::AddSum(o1, o2),
                };
                ops::residual_rms_norm_with(gpu, kernel, x, res, &gain, eps_n(n), n, y, None)?;
                let (xs, ys) = (gpu.download(x, n * width)?, gpu.download(y, n * width)?);
                for (i, row) in o.chunks_mut(outs * width).enumerate() {
                    if add {
                        row[..width].copy_from_slice(&xs[i * width..(i + 1) * width]);
                    }
                    row[(outs - 1) * width..].copy_from_slice(&ys[i * width..(i + 1) * width]);
                }
                Ok(())
            })();
            if let Err(e) = r {
                errs.put(e, o);
            }
        };
    // The vector the norm is taken of: x, x + o, or x + (o + s).
    let residual = |row: &Vec<f32>| -> Vec<f32> {
        let part = |h: usize| &row[h * width..(h + 1) * width];
        (0..width)
            .map(|k| match adds {
                0 => part(0)[k],
                1 => part(0)[k] + part(1)[k],
                _ => part(0)[k] + (part(1)[k] + part(2)[k]),
            })
            .collect()
    };
    let gen = |r: &mut Rng, _: usize| r.vec_normal(parts * width, 1.5);
    let reference = |row: &Vec<f32>, o: &mut [f64]| {
        let x = residual(row);
        let ss: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
        let r = 1.0 / (ss / width as f64 + eps as f64).sqrt();
        for (k, (&v, &g)) in x.iter().zip(&gain_h).enumerate() {
            if add {
                o[k] = v as f64;
            }
            o[(outs - 1) * width + k] = g as f64 * v as f64 * r;
        }
    };
    let op = RowOp {
        name,
        out_width: outs * width,
        tolerance: Tolerance::new(1e-6, 2e-6),
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = depth.config(seed);
    let run = |rows: &[Vec<f32>], o: &mut [f32]| run_with(kernel, &|_| eps, rows, o);
    let v = verdict(&op, &run, &cfg, &errs);
    let rows: Vec<Vec<f32>> = (0..33)
        .map(|_| rng.vec_normal(parts * width, 1.5))
        .collect();
    let mut g = vec![0f32; 33 * outs * width];
    run(&rows, &mut g);
    let mut c = vec![0f32; 33 * outs * width];
    for (row, o) in rows.iter().zip(c.chunks_mut(outs * width)) {
        let x = residual(row);
        cpu_rms_norm(&x, &gain_h, eps, 1, &mut o[(outs - 1) * width..])
            .map_err(cpu_err("cpu rms_norm"))?;
        if add {
            o[..width].copy_from_slice(&x);
        }
    }
    let bits = compare_bits(&g, &c);
    // Which of the two adds comes first shows only in the bits: those must be the CPU's.
    let verdict = match adds {
        2 => bits.gate(v, "the CPU's bits of x + (o + s)"),
        _ => v,
    };
    out.cases.push(CaseResult {
        op: name.into(),
        case: match adds {
            0 => format!("width {width}, eps 1e-5"),
            1 => format!("width {width}, eps 1e-5, output [x + o | norm]"),
            _ => format!("width {width}, eps 1e-5, output [x + (o + s) | norm], the CPU's bits"),
        },
        verdict,
        cpu_bits: Some(bits),
    });
    if let (true, Some(short_kernel)) = (with_controls, short_kernel) {
        let short = |rows: &[Vec<f32>], o: &mut [f32]| run_with(short_kernel, &|_| eps, rows, o);
        out.controls.push(control(
            &format!("{name}: sum of squares skips the last element"),
            &op,
            &short,
            &cfg,
            &errs,
        ));
        let drift = |rows: &[Vec<f32>], o: &mut [f32]| {
            run_with(kernel, &|n| if n > 1 { eps * 1.1 } else { eps }, rows, o)
        };
        out.controls.push(control(
            &format!("{name}: eps 10% larger when n > 1 (arithmetic depends on the row count)"),
            &op,
            &drift,
            &cfg,
            &errs,
        ));
    }
    Ok(())
}

fn rope(
    gpu: &Gpu,
    depth: Depth,
    heads: usize,
    pairing: Pairing,
    with_controls: bool,
    out: &mut SuiteResult,
    seed: u64,
) -> Result<()> {
    let hd = 64;
    let w = heads * hd;
    let cpu_pairing = |p: Pairing| {
        if p == Pairing::Interleaved {
            RopePairing::Interleaved
        } else {
            RopePairing::Half
        }
    };
    let rope = Rope::new(RopeConfig {
        head_dim: hd,
        rotary_dim: hd,
        theta: 100000.0,
        pairing: cpu_pairing(pairing),
        scaling: RopeScaling::None,
    })
    .map_err(cpu_err("rope"))?;
    let x = RefCell::new(gpu.zeros::<f32>(MAX_ROWS * w)?);
    let cs = RefCell::new(gpu.zeros::<f32>(MAX_ROWS * hd)?);
    let errs = ErrSlot::default();
    let run_with = |pos_off: usize, pair: Pairing, rows: &[(usize, Vec<f32>)], o: &mut [f32]| {
        let r = (|| -> Result<()> {
            let flat: Vec<f32> = rows.iter().flat_map(|r| r.1.iter().copied()).collect();
            let mut angles = RopeAngles::default();
            let mut table = Vec::with_capacity(rows.len() * hd);
            for (p, _) in rows {
                rope.angles_into(p + pos_off, &mut angles);
                table.extend_from_slice(&angles.cos);
                table.extend_from_slice(&angles.sin);
            }
            let (mut xb, mut cb) = (x.borrow_mut(), cs.borrow_mut());
            gpu.write(&flat, &mut xb)?;
            gpu.write(&table, &mut cb)?;
            ops::rope(gpu, &mut xb, &cb, rows.len(), heads, hd, hd, pair)?;
            o.copy_from_slice(&gpu.download(&xb, o.len())?);
            Ok(())
        })();
        if let Err(e) = r {
            errs.put(e, o);
        }
    };
    let gen = |r: &mut Rng, _: usize| (r.below(8192), r.vec_normal(w, 1.0));
    let inv = rope.inv_freq().to_vec();
    let reference = |row: &(usize, Vec<f32>), o: &mut [f64]| {
        let half = hd / 2;
        for h in 0..heads {
            for (i, &f) in inv.iter().enumerate() {
                let a = (row.0 as f32 * f) as f64; // the f32 angle, as the contract computes it
                let (ia, ib) = if pairing == Pairing::Interleaved {
                    (2 * i, 2 * i + 1)
                } else {
                    (i, i + half)
                };
                let (x0, x1) = (row.1[h * hd + ia] as f64, row.1[h * hd + ib] as f64);
                o[h * hd + ia] = x0 * a.cos() - x1 * a.sin();
                o[h * hd + ib] = x1 * a.cos() + x0 * a.sin();
            }
        }
    };
    let name = format!("rope {pairing:?}");
    let op = RowOp {
        name: &name,
        out_width: w,
        tolerance: Tolerance::new(1e-6, 1e-6),
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = depth.config(seed);
    let run = |rows: &[(usize, Vec<f32>)], o: &mut [f32]| run_with(0, pairing, rows, o);
    let v = verdict(&op, &run, &cfg, &errs);
    let mut rng = Rng::new(seed ^ 0xff);
    let rows: Vec<(usize, Vec<f32>)> = (0..33).map(|i| gen(&mut rng, i)).collect();
    let mut g = vec![0f32; 33 * w];
    run(&rows, &mut g);
    let mut c: Vec<f32> = rows.iter().flat_map(|r| r.1.iter().copied()).collect();
    let positions: Vec<usize> = rows.iter().map(|r| r.0).collect();
    rope.apply_rows(&mut c, heads, &positions)
        .map_err(cpu_err("cpu rope"))?;
    out.cases.push(CaseResult {
        op: name.clone(),
        case: format!("{heads} heads x 64, theta 1e5, pos < 8192"),
        verdict: v,
        cpu_bits: Some(compare_bits(&g, &c)),
    });
    if with_controls {
        let off = |rows: &[(usize, Vec<f32>)], o: &mut [f32]| run_with(1, pairing, rows, o);
        out.controls
            .push(control("rope: position off by one", &op, &off, &cfg, &errs));
        let wrong = |rows: &[(usize, Vec<f32>)], o: &mut [f32]| run_with(0, Pairing::Half, rows, o);
        out.controls.push(control(
            "rope: half pairing where interleaved is asked",
            &op,
            &wrong,
            &cfg,
            &errs,
        ));
    }
    Ok(())
}

fn swiglu(gpu: &Gpu, depth: Depth, width: usize, out: &mut SuiteResult) -> Result<()> {
    let g_b = RefCell::new(gpu.zeros::<f32>(MAX_ROWS * width)?);
    let u_b = RefCell::new(gpu.zeros::<f32>(MAX_ROWS * width)?);
    let o_b = RefCell::new(gpu.zeros::<f32>(MAX_ROWS * width)?);
    let errs = ErrSlot::default();
    let run = |rows: &[(Vec<f32>, Vec<f32>)], o: &mut [f32]| {
        let r = (|| -> Result<()> {
            let g: Vec<f32> = rows.iter().flat_map(|r| r.0.iter().copied()).collect();
            let u: Vec<f32> = rows.iter().flat_map(|r| r.1.iter().copied()).collect();
            let (mut gb, mut ub, mut ob) = (g_b.borrow_mut(), u_b.borrow_mut(), o_b.borrow_mut());
            gpu.write(&g, &mut gb)?;
            gpu.write(&u, &mut ub)?;
            ops::silu_mul(gpu, &gb, &ub, &mut ob, g.len())?;
            o.copy_from_slice(&gpu.download(&ob, o.len())?);
            Ok(())
        })();
        if let Err(e) = r {
            errs.put(e, o);
        }
    };
    let gen = |r: &mut Rng, _: usize| (r.vec_normal(width, 4.0), r.vec_normal(width, 1.0));
    let reference = |row: &(Vec<f32>, Vec<f32>), o: &mut [f64]| {
        for ((o, &g), &u) in o.iter_mut().zip(&row.0).zip(&row.1) {
            let g = g as f64;
            *o = g / (1.0 + (-g).exp()) * u as f64;
        }
    };
    let op = RowOp {
        name: "silu_mul",
        out_width: width,
        tolerance: Tolerance::new(1e-30, 1.2e-6),
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = depth.config(0x5a);
    let v = verdict(&op, &run, &cfg, &errs);
    let mut rng = Rng::new(0x5b);
    let rows: Vec<_> = (0..20).map(|i| gen(&mut rng, i)).collect();
    let mut g = vec![0f32; 20 * width];
    run(&rows, &mut g);
    let gs: Vec<f32> = rows.iter().flat_map(|r| r.0.iter().copied()).collect();
    let us: Vec<f32> = rows.iter().flat_map(|r| r.1.iter().copied()).collect();
    let mut c = vec![0f32; 20 * width];
    cpu_silu_mul(&gs, &us, &mut c).map_err(cpu_err("cpu silu_mul"))?;
    out.cases.push(CaseResult {
        op: "silu_mul".into(),
        case: format!("width {width}"),
        verdict: v,
        cpu_bits: Some(compare_bits(&g, &c)),
    });
    Ok(())
}

/// The device exp against the CPU's, bit for bit, over a sweep of [-100, 100] and the specials.
fn exp_probe(gpu: &Gpu, out: &mut SuiteResult) -> Result<()> {
    let mut xs: Vec<f32> = (0..2_000_001).map(|i| -100.0 + i as f32 * 1e-4).collect();
    let (hi, lo) = (
        tf_kernels::ops::simd::portable::EXP_HI,
        tf_kernels::ops::simd::portable::EXP_LO,
    );
    xs.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        hi,
        lo,
        f32::from_bits(hi.to_bits() + 1),
        f32::from_bits(lo.to_bits() + 1),
        f32::MIN_POSITIVE,
        1e-30,
    ]);
    let xb = gpu.upload(&xs)?;
    let mut ob: CudaSlice<f32> = gpu.zeros(xs.len())?;
    ops::exp_map(gpu, &xb, &mut ob, xs.len())?;
    let g = gpu.download(&ob, xs.len())?;
    let c: Vec<f32> = xs.iter().map(|&x| tf_kernels::ops::exp(x)).collect();
    let mut bits: CpuBits = compare_bits(&g, &c);
    // NaN payloads may differ; a NaN on both sides agrees.
    bits.differing -= g
        .iter()
        .zip(&c)
        .filter(|(a, b)| a.is_nan() && b.is_nan() && a.to_bits() != b.to_bits())
        .count();
    let verdict = if bits.differing == 0 {
        Ok(tf_kernels::contract::Report {
            max_abs_err: 0.0,
            max_tol_ratio: 0.0,
            rows_compared: 0,
            calls: 1,
        })
    } else {
        Err(format!(
            "{} of {} exp values differ from the CPU's",
            bits.differing, bits.compared
        ))
    };
    out.cases.push(CaseResult {
        op: "exp (shared by silu, attention)".into(),
        case: "2e6 points in [-100, 100] + specials".into(),
        verdict,
        cpu_bits: Some(bits),
    });
    Ok(())
}
