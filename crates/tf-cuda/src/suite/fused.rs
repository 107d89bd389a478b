//! Contract cases for the fused decode kernels, each compared bit for bit with the CPU's
//! separate operators (RMSNorm then matmul; SwiGLU then matmul; matmul then residual add; RoPE
//! then KV append; RMSNorm, matmul and RoPE then KV append).

use super::packed::HostWeights;
use super::{
    compare_bits, control, verdict, CaseResult, ControlResult, Depth, ErrSlot, SuiteResult,
};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::fused::{
    matmul_fused, matmul_norm_rope_append, rope_append, Epilogue, RopeAppend, TiledFromRows, XForm,
};
use crate::kv::GpuKv;
use crate::ops::{GpuRows, Pairing};
use crate::weights::{GpuFormat, GpuMatrix};
use std::cell::RefCell;
use tf_kernels::contract::{Report, Rng, RowOp, Tolerance};
use tf_kernels::matmul::matmul as cpu_matmul;
use tf_kernels::ops::{rms_norm, silu_mul, Rope, RopeAngles, RopeConfig, RopePairing, RopeScaling};
use tf_kernels::pool::Pool;

const U: f64 = 1.0 / (1u64 << 24) as f64;
const MAX_ROWS: usize = 100;
const EPS: f32 = 1e-5;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    NormStore,
    NoneAdd,
    SiluAdd,
    /// RMSNorm in, SwiGLU of each gate row and its up row out.
    NormSwiGlu,
}

/// One input row: the matmul input (`cols`, or `2 * cols` for SwiGLU) and the residual row.
type Row = (Vec<f32>, Vec<f32>);

fn shape_err(op: &'static str) -> impl Fn(String) -> CudaError {
    move |detail| CudaError::Shape { op, detail }
}

/// Runs the fused cases and their controls.
pub(crate) fn run(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    let cases = [
        (
            GpuFormat::Q4_1,
            960,
            576,
            Kind::NormStore,
            "[q|k|v] 960x576 with the input norm",
            false,
        ),
        (
            GpuFormat::Q4_1,
            576,
            576,
            Kind::NoneAdd,
            "o 576x576 with the residual add",
            false,
        ),
        (
            GpuFormat::Q4_1,
            3072,
            576,
            Kind::NormStore,
            "[gate|up] 3072x576 with the MLP norm",
            false,
        ),
        (
            GpuFormat::Q4_1,
            3072,
            576,
            Kind::NormSwiGlu,
            "[gate|up] 3072x576 with the MLP norm and SwiGLU out",
            false,
        ),
        (
            GpuFormat::Q4_1,
            576,
            1536,
            Kind::SiluAdd,
            "down 576x1536 with SwiGLU in, residual add",
            false,
        ),
        (
            GpuFormat::Q8_0,
            49152,
            576,
            Kind::NormStore,
            "tied head 49152x576 with the final norm",
            true,
        ),
        (
            GpuFormat::Bf16,
            37,
            577,
            Kind::NormStore,
            "37x577 (odd width) with a norm",
            false,
        ),
    ];
    let pool = Pool::new(std::thread::available_parallelism().map_or(1, |n| n.get()));
    for (i, &(format, rows, cols, kind, label, heavy)) in cases.iter().enumerate() {
        matmul_case(
            gpu,
            &pool,
            if heavy { Depth::Quick } else { depth },
            format,
            rows,
            cols,
            kind,
            label,
            i == 0,
            out,
            0xf0 + i as u64,
        )?;
    }
    // The tiled product (kernels/mmg.cu) at every row count, not only from MMG_MIN_ROWS.
    let every_row_count = TiledFromRows::new(1);
    [0, 3, 4, 6].into_iter().try_for_each(|i| {
        let (format, rows, cols, kind, label, _) = cases[i];
        let label = format!("{label} (tiled at every row count)");
        matmul_case(
            gpu,
            &pool,
            depth,
            format,
            rows,
            cols,
            kind,
            &label,
            false,
            out,
            0x1f0 + i as u64,
        )
    })?;
    drop(every_row_count);
    rope_append_case(gpu, depth, out)?;
    norm_rope_case(gpu, depth, out)
}

#[allow(clippy::too_many_arguments)]
fn matmul_case(
    gpu: &Gpu,
    pool: &Pool,
    depth: Depth,
    format: GpuFormat,
    rows: usize,
    cols: usize,
    kind: Kind,
    label: &str,
    with_controls: bool,
    out: &mut SuiteResult,
    seed: u64,
) -> Result<()> {
    let mut rng = Rng::new(seed);
    let hw = HostWeights::random(format, rows, cols, &mut rng);
    let wf: Vec<f64> = (0..rows).flat_map(|j| hw.row_f64(j)).collect();
    let wmax = wf.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let w = GpuMatrix::upload(gpu, &hw.packed())?;
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
    let run_with = |eps_n: &dyn Fn(usize) -> f32, rs: &[Row], o: &mut [f32]| {
        let r = (|| -> Result<()> {
            let mut b = bufs.borrow_mut();
            let (x, y) = &mut *b;
            gpu.write(
                &rs.iter()
                    .flat_map(|r| r.0.iter().copied())
                    .collect::<Vec<_>>(),
                x,
            )?;
            gpu.write(
                &rs.iter()
                    .flat_map(|r| r.1.iter().copied())
                    .collect::<Vec<_>>(),
                y,
            )?;
            let norm = XForm::Norm {
                gain: &gain,
                eps: eps_n(rs.len()),
            };
            let (xf, ep) = match kind {
                Kind::NormStore => (norm, Epilogue::Store),
                Kind::NormSwiGlu => (norm, Epilogue::SwiGlu),
                Kind::NoneAdd => (XForm::None, Epilogue::Add),
                Kind::SiluAdd => (XForm::SiluMul, Epilogue::Add),
            };
            matmul_fused(gpu, &w, x, in_w, xf, ep, rs.len(), y)?;
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
            Kind::NormStore | Kind::NormSwiGlu => r.vec_normal(cols, 1.5),
            Kind::NoneAdd => r.vec_uniform(cols, -1.0, 1.0),
            Kind::SiluAdd => {
                let mut v = r.vec_normal(cols, 2.0);
                v.extend(r.vec_uniform(cols, -1.0, 1.0));
                v
            }
        };
        let res = if matches!(kind, Kind::NormStore | Kind::NormSwiGlu) {
            Vec::new()
        } else {
            r.vec_uniform(rows, -1.0, 1.0)
        };
        (x, res)
    };
    let input_f64 = |x: &[f32]| -> Vec<f64> {
        match kind {
            Kind::NormStore | Kind::NormSwiGlu => {
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
    let dot = |j: usize, h: &[f64]| -> f64 {
        wf[j * cols..(j + 1) * cols]
            .iter()
            .zip(h)
            .map(|(a, b)| a * b)
            .sum()
    };
    let half = rows / 2;
    let reference = |row: &Row, o: &mut [f64]| {
        let h = input_f64(&row.0);
        for (j, oj) in o.iter_mut().enumerate() {
            *oj = if kind == Kind::NormSwiGlu {
                let (gate, up) = (dot(j, &h), dot(half + j, &h));
                gate / (1.0 + (-gate).exp()) * up
            } else {
                dot(j, &h) + row.1.get(j).map_or(0.0, |&v| v as f64)
            };
        }
    };
    // |input| <= ~4.5 after a norm (gain 1.5 x 3 sigma), <= ~2 after SwiGLU, <= 1 plain; the
    // fmaf chains of k/16 terms, the fold, the input's own roundings, and the residual add.
    let xmax = match kind {
        Kind::NormStore | Kind::NormSwiGlu => 8.0,
        Kind::SiluAdd => 10.0,
        Kind::NoneAdd => 1.0,
    };
    let k = cols as f64;
    let abs = ((k / 16.0).ceil() + 8.0) * U * k * wmax * xmax + 4.0 * U;
    // SwiGLU out: silu(g) * u moves by about (|g| + |u|) times the sums' error (each sum at
    // most k * wmax * xmax), plus the product's rounding.
    let (abs, out_w) = if kind == Kind::NormSwiGlu {
        (2.2 * abs * k * wmax * xmax + 8.0 * U, half)
    } else {
        (abs, rows)
    };
    let name = format!("fused matmul {format:?} {kind:?}");
    let op = RowOp {
        name: &name,
        out_width: out_w,
        tolerance: Tolerance::new(abs, 2.0 * U),
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = depth.config(seed);
    let run = |rs: &[Row], o: &mut [f32]| run_with(&|_| EPS, rs, o);
    let v = verdict(&op, &run, &cfg, &errs);
    // GPU vs the CPU's separate operators on 24 fresh rows.
    let mut r2 = Rng::new(seed ^ 0x5eed);
    let sample: Vec<Row> = (0..24).map(|i| gen(&mut r2, i)).collect();
    let mut g = vec![0f32; 24 * out_w];
    run(&sample, &mut g);
    let mut c = vec![0f32; 24 * rows];
    let flat: Vec<f32> = sample.iter().flat_map(|r| r.0.iter().copied()).collect();
    let h = match kind {
        Kind::NormStore | Kind::NormSwiGlu => {
            let mut h = vec![0f32; 24 * cols];
            rms_norm(&flat, &gain_h, EPS, 24, &mut h)
                .map_err(|e| shape_err("cpu rms_norm")(e.to_string()))?;
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
            silu_mul(&gs, &us, &mut h).map_err(|e| shape_err("cpu silu_mul")(e.to_string()))?;
            h
        }
    };
    cpu_matmul(&hw.packed(), &h, 24, &mut c, pool)
        .map_err(|e| shape_err("cpu matmul")(e.to_string()))?;
    if kind == Kind::NormSwiGlu {
        let (mut gs, mut us) = (Vec::new(), Vec::new());
        for cr in c.chunks_exact(rows) {
            gs.extend_from_slice(&cr[..half]);
            us.extend_from_slice(&cr[half..]);
        }
        c = vec![0f32; 24 * half];
        silu_mul(&gs, &us, &mut c).map_err(|e| shape_err("cpu silu_mul")(e.to_string()))?;
    } else if kind != Kind::NormStore {
        for (cr, r) in c.chunks_exact_mut(rows).zip(&sample) {
            for (a, &b) in cr.iter_mut().zip(&r.1) {
                *a += b;
            }
        }
    }
    out.cases.push(CaseResult {
        op: name.clone(),
        case: label.to_string(),
        verdict: v,
        cpu_bits: Some(compare_bits(&g, &c)),
    });
    if with_controls {
        let drift =
            |rs: &[Row], o: &mut [f32]| run_with(&|n| if n > 1 { EPS * 1.1 } else { EPS }, rs, o);
        out.controls.push(control(
            "fused matmul: norm eps 10% larger when n > 1",
            &op,
            &drift,
            &cfg,
            &errs,
        ));
    }
    Ok(())
}

/// RoPE + KV append on a fused [q | k | v] row: the output row is the rotated q, then the key
/// and value read back from the pools at the row's (slot, position).
fn rope_append_case(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    let (nh, nkv, hd, slots, cap) = (9usize, 3usize, 64usize, 7usize, 64usize);
    let qkv_w = (nh + 2 * nkv) * hd;
    let rw = nkv * hd;
    let rope = Rope::new(RopeConfig {
        head_dim: hd,
        rotary_dim: hd,
        theta: 100000.0,
        pairing: RopePairing::Interleaved,
        scaling: RopeScaling::None,
    })
    .map_err(|e| shape_err("rope")(e.to_string()))?;
    let kv = RefCell::new(GpuKv::new(gpu, slots, 2, cap, nkv, hd)?);
    let bufs = RefCell::new((
        GpuRows::new(gpu, MAX_ROWS)?,
        gpu.zeros::<f32>(MAX_ROWS * qkv_w)?,
        gpu.zeros::<f32>(MAX_ROWS * hd)?,
    ));
    let errs = ErrSlot::default();
    // Row `index` of the pool owns (slot, position) = (index % slots, index / slots): no two rows
    // of a call write the same cache entry.
    type R = (usize, usize, Vec<f32>);
    let run_with = |off: usize, rs: &[R], o: &mut [f32]| {
        let r = (|| -> Result<()> {
            let mut b = bufs.borrow_mut();
            let (rows, qkv, cs) = &mut *b;
            let mut kv = kv.borrow_mut();
            let slots_v: Vec<usize> = rs.iter().map(|r| r.0).collect();
            let pos_v: Vec<usize> = rs.iter().map(|r| r.1).collect();
            rows.set(gpu, &kv, &slots_v, &pos_v)?;
            gpu.write(
                &rs.iter()
                    .flat_map(|r| r.2.iter().copied())
                    .collect::<Vec<_>>(),
                qkv,
            )?;
            let mut a = RopeAngles::default();
            let mut table = Vec::new();
            for r in rs {
                rope.angles_into(r.1 * 97 + off, &mut a);
                table.extend_from_slice(&a.cos);
                table.extend_from_slice(&a.sin);
            }
            gpu.write(&table, cs)?;
            rope_append(gpu, qkv, cs, &mut kv, rows, 1, nh, hd, Pairing::Interleaved)?;
            let q = gpu.download(qkv, rs.len() * qkv_w)?;
            let kp = gpu.download(&kv.k, kv.k.len())?;
            let vp = gpu.download(&kv.v, kv.v.len())?;
            for (i, (r, orow)) in rs.iter().zip(o.chunks_exact_mut(qkv_w)).enumerate() {
                let at = ((r.0 * 2 + 1) * cap + r.1) * rw;
                orow[..nh * hd].copy_from_slice(&q[i * qkv_w..i * qkv_w + nh * hd]);
                orow[nh * hd..nh * hd + rw].copy_from_slice(&kp[at..at + rw]);
                orow[nh * hd + rw..].copy_from_slice(&vp[at..at + rw]);
            }
            Ok(())
        })();
        if let Err(e) = r {
            errs.put(e, o);
        }
    };
    let gen = |r: &mut Rng, index: usize| {
        (
            index % slots,
            (index / slots) % cap,
            r.vec_normal(qkv_w, 1.0),
        )
    };
    let inv = rope.inv_freq().to_vec();
    // Positions are scaled by 97 into the angle table (up to ~6000) to exercise large angles.
    let rotate = |x: &[f32], pos: usize, o: &mut [f64]| {
        for h in 0..x.len() / hd {
            for (i, &f) in inv.iter().enumerate() {
                let a = ((pos * 97) as f32 * f) as f64;
                let (x0, x1) = (x[h * hd + 2 * i] as f64, x[h * hd + 2 * i + 1] as f64);
                o[h * hd + 2 * i] = x0 * a.cos() - x1 * a.sin();
                o[h * hd + 2 * i + 1] = x1 * a.cos() + x0 * a.sin();
            }
        }
    };
    let reference = |row: &R, o: &mut [f64]| {
        rotate(&row.2[..(nh + nkv) * hd], row.1, &mut o[..(nh + nkv) * hd]);
        for (a, &b) in o[(nh + nkv) * hd..]
            .iter_mut()
            .zip(&row.2[(nh + nkv) * hd..])
        {
            *a = b as f64;
        }
    };
    let op = RowOp {
        name: "rope_append",
        out_width: qkv_w,
        tolerance: Tolerance::new(1e-6, 1e-6),
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = depth.config(0xabc);
    let run = |rs: &[R], o: &mut [f32]| run_with(0, rs, o);
    let v = verdict(&op, &run, &cfg, &errs);
    // GPU vs CPU Rope on q and k.
    let mut r2 = Rng::new(0xabd);
    let sample: Vec<R> = (0..21).map(|i| gen(&mut r2, i)).collect();
    let mut g = vec![0f32; 21 * qkv_w];
    run(&sample, &mut g);
    let mut c = Vec::new();
    for r in &sample {
        let mut qk = r.2[..(nh + nkv) * hd].to_vec();
        rope.apply(&mut qk, nh + nkv, r.1 * 97)
            .map_err(|e| shape_err("cpu rope")(e.to_string()))?;
        c.extend_from_slice(&qk);
        c.extend_from_slice(&r.2[(nh + nkv) * hd..]);
    }
    out.cases.push(CaseResult {
        op: "rope_append".into(),
        case: "9q/3kv x 64 fused row -> q in place, k and v into slot/position".into(),
        verdict: v,
        cpu_bits: Some(compare_bits(&g, &c)),
    });
    let off = |rs: &[R], o: &mut [f32]| run_with(1, rs, o);
    out.controls.push(control(
        "rope_append: angle position off by one",
        &op,
        &off,
        &cfg,
        &errs,
    ));
    Ok(())
}

/// The `[q|k|v]` projection with its norm, RoPE and the KV append in one launch
/// ([`matmul_norm_rope_append`]) against the CPU's RMSNorm, matmul and RoPE (q, and k and v read
/// back from the pools) at every row count of the depth, bit for bit; the planted control
/// gives the epilogue the other pairing.
fn norm_rope_case(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    let (nh, nkv, hd, slots, cap) = (9usize, 3usize, 64usize, 8usize, 16usize);
    let (rows, cols) = ((nh + 2 * nkv) * hd, 576usize);
    let mut rng = Rng::new(0x40fe);
    let hw = HostWeights::random(GpuFormat::Q4_1, rows, cols, &mut rng);
    let w = GpuMatrix::upload(gpu, &hw.packed())?;
    let gain_h = rng.vec_uniform(cols, 0.5, 1.5);
    let gain = gpu.upload(&gain_h)?;
    let rope = Rope::new(RopeConfig {
        head_dim: hd,
        rotary_dim: hd,
        theta: 10000.0,
        pairing: RopePairing::Half,
        scaling: RopeScaling::None,
    })
    .map_err(|e| shape_err("rope")(e.to_string()))?;
    let n_max = 64;
    let x_h = rng.vec_normal(n_max * cols, 1.5);
    let x = gpu.upload(&x_h)?;
    // Row i: slot i % slots, position i / slots + 3 (no two rows share a cache entry).
    let at = |i: usize| (i % slots, i / slots + 3);
    let mut cs_h = Vec::new();
    let mut a = RopeAngles::default();
    for i in 0..n_max {
        rope.angles_into(at(i).1, &mut a);
        cs_h.extend_from_slice(&a.cos);
        cs_h.extend_from_slice(&a.sin);
    }
    let cs = gpu.upload(&cs_h)?;
    // The CPU: norm, matmul, RoPE on q and k; rows laid out as q | k | v.
    let pool = Pool::new(std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut t = vec![0f32; n_max * cols];
    rms_norm(&x_h, &gain_h, EPS, n_max, &mut t)
        .map_err(|e| shape_err("cpu norm")(e.to_string()))?;
    let mut want = vec![0f32; n_max * rows];
    cpu_matmul(&hw.packed(), &t, n_max, &mut want, &pool)
        .map_err(|e| shape_err("cpu matmul")(e.to_string()))?;
    for (i, r) in want.chunks_exact_mut(rows).enumerate() {
        rope.apply(&mut r[..(nh + nkv) * hd], nh + nkv, at(i).1)
            .map_err(|e| shape_err("cpu rope")(e.to_string()))?;
    }
    let mut kv = GpuKv::new(gpu, slots, 2, cap, nkv, hd)?;
    let mut grows = GpuRows::new(gpu, n_max)?;
    let mut q = gpu.zeros::<f32>(n_max * rows)?;
    let rw = nkv * hd;
    let mut launch = |n: usize, pairing: Pairing| -> Result<Vec<f32>> {
        let (s, p): (Vec<usize>, Vec<usize>) = (0..n).map(at).unzip();
        grows.set(gpu, &kv, &s, &p)?;
        let norm = XForm::Norm {
            gain: &gain,
            eps: EPS,
        };
        let ra = RopeAppend {
            cs: &cs,
            kv: &mut kv,
            rows: &grows,
            layer: 1,
            heads: nh,
            pairing,
        };
        matmul_norm_rope_append(gpu, &w, &x, norm, &mut q, ra)?;
        let (qh, kp, vp) = (
            gpu.download(&q, n * rows)?,
            gpu.download(&kv.k, kv.k.len())?,
            gpu.download(&kv.v, kv.v.len())?,
        );
        let mut o = Vec::with_capacity(n * rows);
        for i in 0..n {
            let (slot, pos) = at(i);
            let e = ((slot * 2 + 1) * cap + pos) * rw;
            o.extend_from_slice(&qh[i * rows..i * rows + nh * hd]);
            o.extend_from_slice(&kp[e..e + rw]);
            o.extend_from_slice(&vp[e..e + rw]);
        }
        Ok(o)
    };
    let (mut bits, mut first_bad, mut calls) = (compare_bits(&[], &[]), None, 0);
    for n in super::select::row_counts(depth) {
        let got = launch(n, Pairing::Half)?;
        let b = compare_bits(&got, &want[..n * rows]);
        if b.differing > 0 && first_bad.is_none() {
            first_bad = Some(n);
        }
        bits.add(b);
        calls += 1;
    }
    let planted = launch(n_max, Pairing::Interleaved)?;
    let caught = compare_bits(&planted, &want).differing;
    out.cases.push(CaseResult {
        op: "fused matmul".into(),
        case: format!("[q|k|v] {rows}x{cols} Q4_1 with the input norm, RoPE and KV append, {calls} calls (1..=64 rows)"),
        verdict: match first_bad {
            None => Ok(Report {
                max_abs_err: 0.0,
                max_tol_ratio: 0.0,
                rows_compared: bits.compared / rows,
                calls,
            }),
            Some(n) => Err(format!(
                "{} of {} outputs differ from the CPU's norm, matmul and RoPE (first at {n} rows)",
                bits.differing, bits.compared
            )),
        },
        cpu_bits: Some(bits),
    });
    out.controls.push(ControlResult {
        control: "fused [q|k|v] with RoPE told the other pairing".into(),
        caught: if caught > 0 {
            Ok(format!("{caught} outputs differ from the CPU"))
        } else {
            Err("every output matched".into())
        },
    });
    Ok(())
}
