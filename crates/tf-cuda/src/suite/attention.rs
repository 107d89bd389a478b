//! Contract cases for attention over the device KV cache (filled by the append kernel), rows
//! drawn from streams with different cache lengths.

use super::{compare_bits, control, verdict, CaseResult, Depth, ErrSlot, SuiteResult};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::kv::GpuKv;
use crate::ops::{self, AttnShape, GpuRows};
use cudarc::driver::CudaSlice;
use std::cell::RefCell;
use tf_kernels::contract::{Rng, RowOp, Tolerance};
use tf_kernels::ops::{attend as cpu_attend, AttnParams, AttnScratch, LayerKv};

const MAX_ROWS: usize = 100;
const LENGTHS: [usize; 6] = [1, 17, 64, 129, 200, 301];
const LAYERS: usize = 2;
const LAYER: usize = 1;

/// One query row: stream, absolute position, query.
type Row = (usize, usize, Vec<f32>);

fn cpu_err(e: tf_kernels::ops::OpError) -> CudaError {
    CudaError::Shape {
        op: "cpu attention",
        detail: e.to_string(),
    }
}

/// Runs the attention cases and the planted control.
pub(crate) fn run(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    let cases = [
        (9usize, 3usize, 64usize, None, "9q/3kv x 64 (default model)"),
        (9, 3, 64, Some(50usize), "9q/3kv x 64, window 50"),
        (4, 4, 37, None, "MHA 4 x 37"),
        (8, 1, 128, None, "MQA 8q/1kv x 128"),
    ];
    for (i, &(heads, kv_heads, head_dim, window, label)) in cases.iter().enumerate() {
        case(
            gpu,
            depth,
            AttnShape {
                heads,
                kv_heads,
                head_dim,
                scale: 1.0 / (head_dim as f32).sqrt(),
                window,
            },
            label,
            i == 0,
            out,
            0xa0 + i as u64,
        )?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn case(
    gpu: &Gpu,
    depth: Depth,
    shape: AttnShape,
    label: &str,
    with_control: bool,
    out: &mut SuiteResult,
    seed: u64,
) -> Result<()> {
    let (nh, hd) = (shape.heads, shape.head_dim);
    let rw = shape.kv_heads * hd;
    let capacity = 320;
    // Host caches (the CPU's view) and the same keys appended on the device in mixed batches.
    let mut rng = Rng::new(seed);
    let mut cpu: Vec<LayerKv> = Vec::new();
    let mut all: Vec<(usize, usize, Vec<f32>, Vec<f32>)> = Vec::new();
    for (s, &len) in LENGTHS.iter().enumerate() {
        let mut lk = LayerKv::new(shape.kv_heads, hd).map_err(cpu_err)?;
        for p in 0..len {
            let (k, v) = (rng.vec_normal(rw, 1.0), rng.vec_normal(rw, 1.0));
            lk.append(&k, &v).map_err(cpu_err)?;
            all.push((s, p, k, v));
        }
        cpu.push(lk);
    }
    let mut kv = GpuKv::new(gpu, LENGTHS.len(), LAYERS, capacity, shape.kv_heads, hd)?;
    let mut rows = GpuRows::new(gpu, MAX_ROWS)?;
    let mut kb: CudaSlice<f32> = gpu.zeros(MAX_ROWS * rw)?;
    let mut vb: CudaSlice<f32> = gpu.zeros(MAX_ROWS * rw)?;
    // Interleave streams so each append call mixes slots and positions.
    all.sort_by_key(|(s, p, _, _)| (*p, *s));
    for chunk in all.chunks(MAX_ROWS) {
        let slots: Vec<usize> = chunk.iter().map(|c| c.0).collect();
        let pos: Vec<usize> = chunk.iter().map(|c| c.1).collect();
        rows.set(gpu, &kv, &slots, &pos)?;
        gpu.write(
            &chunk
                .iter()
                .flat_map(|c| c.2.iter().copied())
                .collect::<Vec<_>>(),
            &mut kb,
        )?;
        gpu.write(
            &chunk
                .iter()
                .flat_map(|c| c.3.iter().copied())
                .collect::<Vec<_>>(),
            &mut vb,
        )?;
        ops::kv_append(gpu, &kb, &vb, &mut kv, &rows, LAYER)?;
    }
    let rig = RefCell::new((
        rows,
        gpu.zeros::<f32>(MAX_ROWS * nh * hd)?,
        gpu.zeros::<f32>(MAX_ROWS * nh * hd)?,
    ));
    let errs = ErrSlot::default();
    let run_with = |kernel: &'static str, rs: &[Row], o: &mut [f32]| {
        let r = (|| -> Result<()> {
            let mut g = rig.borrow_mut();
            let (rows, q, ob) = &mut *g;
            let slots: Vec<usize> = rs.iter().map(|r| r.0).collect();
            let pos: Vec<usize> = rs.iter().map(|r| r.1).collect();
            rows.set(gpu, &kv, &slots, &pos)?;
            gpu.write(
                &rs.iter()
                    .flat_map(|r| r.2.iter().copied())
                    .collect::<Vec<_>>(),
                q,
            )?;
            ops::attend_with(gpu, kernel, q, nh * hd, &kv, rows, LAYER, &shape, ob)?;
            o.copy_from_slice(&gpu.download(ob, o.len())?);
            Ok(())
        })();
        if let Err(e) = r {
            errs.put(e, o);
        }
    };
    let gen = |r: &mut Rng, _: usize| {
        let s = r.below(LENGTHS.len());
        (s, r.below(LENGTHS[s]), r.vec_normal(nh * hd, 1.0))
    };
    let params = AttnParams {
        n_heads: nh,
        n_kv_heads: shape.kv_heads,
        head_dim: hd,
        scale: shape.scale,
        window: shape.window,
        softcap: None,
    };
    let reference = |row: &Row, o: &mut [f64]| reference(&params, &cpu[row.0], row, o);
    let op = RowOp {
        name: "attention",
        out_width: nh * hd,
        tolerance: Tolerance::new(2e-6, 1e-5),
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = depth.config(seed);
    let run = |rs: &[Row], o: &mut [f32]| run_with("tf_attend", rs, o);
    let v = verdict(&op, &run, &cfg, &errs);
    let mut r2 = Rng::new(seed ^ 0x77);
    let sample: Vec<Row> = (0..48).map(|i| gen(&mut r2, i)).collect();
    let mut g = vec![0f32; 48 * nh * hd];
    run(&sample, &mut g);
    let mut c = vec![0f32; 48 * nh * hd];
    let mut scratch = AttnScratch::new();
    for (row, o) in sample.iter().zip(c.chunks_exact_mut(nh * hd)) {
        cpu_attend(&row.2, &cpu[row.0], row.1, &params, o, &mut scratch).map_err(cpu_err)?;
    }
    out.cases.push(CaseResult {
        op: "attention".into(),
        case: format!("{label}; caches of 1..301 keys"),
        verdict: v,
        cpu_bits: Some(compare_bits(&g, &c)),
    });
    if with_control {
        let short = |rs: &[Row], o: &mut [f32]| run_with("tf_plant_attend_short", rs, o);
        out.controls.push(control(
            "attention: the query's own key is skipped",
            &op,
            &short,
            &cfg,
            &errs,
        ));
    }
    Ok(())
}

/// f64 reference: causal (windowed) softmax attention.
fn reference(p: &AttnParams, cache: &LayerKv, row: &Row, out: &mut [f64]) {
    let hd = p.head_dim;
    let group = p.n_heads / p.n_kv_heads;
    let lo = p.first_key(row.1);
    for h in 0..p.n_heads {
        let q = &row.2[h * hd..(h + 1) * hd];
        let kvh = h / group;
        let key = |j: usize| cache.key(j, kvh).unwrap_or(&[]);
        let scores: Vec<f64> = (lo..=row.1)
            .map(|j| {
                q.iter()
                    .zip(key(j))
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>()
                    * p.scale as f64
            })
            .collect();
        let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let l: f64 = e.iter().sum();
        for d in 0..hd {
            let acc: f64 = (lo..=row.1)
                .zip(&e)
                .map(|(j, &pj)| pj * cache.value(j, kvh).map_or(f64::NAN, |v| v[d] as f64))
                .sum();
            out[h * hd + d] = acc / l;
        }
    }
}
