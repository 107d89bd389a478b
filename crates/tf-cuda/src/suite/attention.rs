//! Contract cases for attention over the device KV cache (filled by the append kernel), rows
//! drawn from streams with different cache lengths: short caches (every row in one scores
//! tile), the same caches with forced small tiles (rows over several tiles), and long contexts
//! (70,000 keys at head_dim 64, 45,000 at head_dim 128, a 60,000-key window) where the
//! capacity does not fit shared memory and the launch tiles by itself (on the H200: tiles of
//! 49,600 and 41,344 keys), plus the same caches in forced tiles of 8192 / 4096 keys. Every
//! case must give the CPU kernel's bits; planted controls (a key skipped; tile sums added in
//! another order) must be caught.

use super::{compare_bits, control, verdict, CaseResult, ControlResult, Depth, ErrSlot};
use super::{CpuBits, SuiteResult};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::kv::GpuKv;
use crate::ops::{self, AttnShape, GpuRows};
use cudarc::driver::CudaSlice;
use std::cell::RefCell;
use tf_kernels::contract::{CheckConfig, Rng, RowOp, Tolerance};
use tf_kernels::ops::{attend as cpu_attend, AttnParams, AttnScratch, LayerKv};

#[cfg(test)]
mod host_cpp;

const MAX_ROWS: usize = 100;
/// Rows per append call while filling the caches.
const FILL_ROWS: usize = 4096;
const LENGTHS: [usize; 6] = [1, 17, 64, 129, 200, 301];
const LAYERS: usize = 2;
const LAYER: usize = 1;
/// Forced tiles of the short caches: a multiple of 16, and one that is not (each lane's first
/// key in a tile then moves).
const SMALL_TILES: [usize; 2] = [48, 20];

/// One query row: stream, absolute position, query.
type Row = (usize, usize, Vec<f32>);

fn cpu_err(e: tf_kernels::ops::OpError) -> CudaError {
    CudaError::Shape {
        op: "cpu attention",
        detail: e.to_string(),
    }
}

/// Runs the attention cases and the planted controls.
pub(crate) fn run(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    let cases = [
        (9usize, 3usize, 64usize, None, "9q/3kv x 64 (default model)"),
        (9, 3, 64, Some(50usize), "9q/3kv x 64, window 50"),
        (4, 4, 37, None, "MHA 4 x 37"),
        (8, 1, 128, None, "MQA 8q/1kv x 128"),
    ];
    for (i, &(heads, kv_heads, head_dim, window, label)) in cases.iter().enumerate() {
        let seed = 0xa0 + i as u64;
        let caches = Caches::fill(gpu, kv_heads, head_dim, &LENGTHS, 320, seed)?;
        let shape = shape(heads, kv_heads, head_dim, window);
        let cfg = depth.config(seed);
        let plants: &[(&'static str, &str)] = if i == 0 {
            &[("tf_plant_attend_short", "the query's own key is skipped")]
        } else {
            &[]
        };
        let label = format!("{label}; caches of 1..301 keys");
        caches.case(gpu, &shape, None, &label, &cfg, 48, plants, out)?;
        for tile in SMALL_TILES {
            let plants: &[(&'static str, &str)] = if i == 0 && tile == 48 {
                &[(
                    "tf_plant_attend_tile_sum",
                    "tile sums added in another order",
                )]
            } else {
                &[]
            };
            let label = format!("{label}; scores in forced tiles of {tile} keys");
            caches.case(gpu, &shape, Some(tile), &label, &cfg, 48, plants, out)?;
        }
    }
    long_cases(gpu, out)
}

/// Contexts beyond shared memory: the launch picks its own tile from the capacity.
fn long_cases(gpu: &Gpu, out: &mut SuiteResult) -> Result<()> {
    let cfg = |seed| CheckConfig {
        batch_sizes: vec![1, 2, 3, 5, 8],
        seed,
    };
    let plant = [(
        "tf_plant_attend_tile_sum",
        "long context: tile sums added in another order",
    )];
    let caches = Caches::fill(gpu, 3, 64, &[70_000, 52_000, 333], 70_000, 0xb0)?;
    for (window, plants) in [(None, &plant[..]), (Some(60_000), &[][..])] {
        let sh = shape(9, 3, 64, window);
        let label = match window {
            None => "9q/3kv x 64, caches of 333..70000 keys".to_string(),
            Some(w) => format!("9q/3kv x 64, window {w}, caches of 333..70000 keys"),
        };
        caches.case(gpu, &sh, None, &label, &cfg(0xb1), 12, plants, out)?;
    }
    // The same rows over many tile boundaries.
    let sh = shape(9, 3, 64, None);
    let label = "9q/3kv x 64, caches of 333..70000 keys; scores in forced tiles of 8192 keys";
    caches.case(gpu, &sh, Some(8192), label, &cfg(0xb1), 12, &[], out)?;
    drop(caches);
    let caches = Caches::fill(gpu, 2, 128, &[45_000, 30_000], 45_000, 0xc0)?;
    let sh = shape(8, 2, 128, None);
    let label = "8q/2kv x 128, caches of 30000..45000 keys";
    caches.case(gpu, &sh, None, label, &cfg(0xc1), 12, &[], out)?;
    let label = format!("{label}; scores in forced tiles of 4096 keys");
    caches.case(gpu, &sh, Some(4096), &label, &cfg(0xc1), 12, &[], out)
}

fn shape(heads: usize, kv_heads: usize, head_dim: usize, window: Option<usize>) -> AttnShape {
    AttnShape {
        heads,
        kv_heads,
        head_dim,
        scale: 1.0 / (head_dim as f32).sqrt(),
        window,
    }
}

/// Streams' caches for one KV shape: the CPU's view and the device pools (layer `LAYER`).
struct Caches {
    cpu: Vec<LayerKv>,
    kv: GpuKv,
    lengths: Vec<usize>,
}

impl Caches {
    /// Random keys and values for streams of `lengths` positions, appended on the device in
    /// calls that mix slots and positions.
    fn fill(
        gpu: &Gpu,
        kv_heads: usize,
        hd: usize,
        lengths: &[usize],
        capacity: usize,
        seed: u64,
    ) -> Result<Caches> {
        let rw = kv_heads * hd;
        let mut rng = Rng::new(seed);
        let mut cpu: Vec<LayerKv> = Vec::new();
        for &len in lengths {
            let mut lk = LayerKv::with_capacity(kv_heads, hd, len).map_err(cpu_err)?;
            for _ in 0..len {
                let (k, v) = (rng.vec_normal(rw, 1.0), rng.vec_normal(rw, 1.0));
                lk.append(&k, &v).map_err(cpu_err)?;
            }
            cpu.push(lk);
        }
        let mut kv = GpuKv::new(gpu, lengths.len(), LAYERS, capacity, kv_heads, hd)?;
        let fill = FILL_ROWS.min(lengths.iter().sum::<usize>()).max(1);
        let mut rows = GpuRows::new(gpu, fill)?;
        let mut kb: CudaSlice<f32> = gpu.zeros(fill * rw)?;
        let mut vb: CudaSlice<f32> = gpu.zeros(fill * rw)?;
        // Interleave streams so each append call mixes slots and positions.
        let mut order: Vec<(usize, usize)> = lengths
            .iter()
            .enumerate()
            .flat_map(|(s, &len)| (0..len).map(move |p| (p, s)))
            .collect();
        order.sort_unstable();
        for chunk in order.chunks(fill) {
            let slots: Vec<usize> = chunk.iter().map(|c| c.1).collect();
            let pos: Vec<usize> = chunk.iter().map(|c| c.0).collect();
            rows.set(gpu, &kv, &slots, &pos)?;
            let gather = |f: fn(&LayerKv) -> &[f32]| -> Vec<f32> {
                chunk
                    .iter()
                    .flat_map(|&(p, s)| f(&cpu[s])[p * rw..(p + 1) * rw].iter().copied())
                    .collect()
            };
            gpu.write(&gather(LayerKv::keys), &mut kb)?;
            gpu.write(&gather(LayerKv::values), &mut vb)?;
            ops::kv_append(gpu, &kb, &vb, &mut kv, &rows, LAYER)?;
        }
        Ok(Caches {
            cpu,
            kv,
            lengths: lengths.to_vec(),
        })
    }

    /// Runs the contract on `tf_attend` (with a forced `tile`, or the launch's own), compares
    /// `sample` rows with the CPU kernel bit for bit (a difference fails the case), and checks
    /// that each planted kernel is caught: `tf_plant_attend_short` by the contract,
    /// `tf_plant_attend_tile_sum` by the bit comparison.
    #[allow(clippy::too_many_arguments)]
    fn case(
        &self,
        gpu: &Gpu,
        shape: &AttnShape,
        tile: Option<usize>,
        label: &str,
        cfg: &CheckConfig,
        sample: usize,
        plants: &[(&'static str, &str)],
        out: &mut SuiteResult,
    ) -> Result<()> {
        let (nh, hd) = (shape.heads, shape.head_dim);
        let w = nh * hd;
        let max_n = cfg
            .batch_sizes
            .iter()
            .copied()
            .max()
            .unwrap_or(1)
            .max(sample);
        let rig = RefCell::new((
            GpuRows::new(gpu, max_n.max(MAX_ROWS))?,
            gpu.zeros::<f32>(max_n.max(MAX_ROWS) * w)?,
            gpu.zeros::<f32>(max_n.max(MAX_ROWS) * w)?,
        ));
        let errs = ErrSlot::default();
        let run_with = |kernel: &'static str, rs: &[Row], o: &mut [f32]| {
            let r = (|| -> Result<()> {
                let mut g = rig.borrow_mut();
                let (rows, q, ob) = &mut *g;
                let slots: Vec<usize> = rs.iter().map(|r| r.0).collect();
                let pos: Vec<usize> = rs.iter().map(|r| r.1).collect();
                rows.set(gpu, &self.kv, &slots, &pos)?;
                let qs: Vec<f32> = rs.iter().flat_map(|r| r.2.iter().copied()).collect();
                gpu.write(&qs, q)?;
                let kv = &self.kv;
                match tile {
                    Some(t) => ops::attend_tiled(gpu, kernel, q, w, kv, rows, LAYER, shape, ob, t),
                    None => ops::attend_with(gpu, kernel, q, w, kv, rows, LAYER, shape, ob),
                }?;
                o.copy_from_slice(&gpu.download(ob, o.len())?);
                Ok(())
            })();
            if let Err(e) = r {
                errs.put(e, o);
            }
        };
        // Rows at random positions; every fourth at the end of the longest stream (it spans the
        // most tiles), every fourth somewhere in it.
        let lengths = &self.lengths;
        let longest = (0..lengths.len()).max_by_key(|&s| lengths[s]).unwrap_or(0);
        let gen = |r: &mut Rng, i: usize| {
            let s = if i % 4 < 2 {
                longest
            } else {
                r.below(lengths.len())
            };
            let p = if i.is_multiple_of(4) {
                lengths[s] - 1
            } else {
                r.below(lengths[s])
            };
            (s, p, r.vec_normal(w, 1.0))
        };
        let params = AttnParams {
            n_heads: nh,
            n_kv_heads: shape.kv_heads,
            head_dim: hd,
            scale: shape.scale,
            window: shape.window,
            softcap: None,
        };
        let reference = |row: &Row, o: &mut [f64]| reference(&params, &self.cpu[row.0], row, o);
        let op = RowOp {
            name: "attention",
            out_width: w,
            tolerance: Tolerance::new(2e-6, 1e-5),
            gen_row: &gen,
            reference: &reference,
        };
        let run = |rs: &[Row], o: &mut [f32]| run_with("tf_attend", rs, o);
        let mut v = verdict(&op, &run, cfg, &errs);
        // The GPU's bits against the CPU kernel's on a sample of rows.
        let mut r2 = Rng::new(cfg.seed ^ 0x77);
        let rows: Vec<Row> = (0..sample).map(|i| gen(&mut r2, i)).collect();
        let mut c = vec![0f32; sample * w];
        let mut scratch = AttnScratch::new();
        for (row, o) in rows.iter().zip(c.chunks_exact_mut(w)) {
            cpu_attend(&row.2, &self.cpu[row.0], row.1, &params, o, &mut scratch)
                .map_err(cpu_err)?;
        }
        let mut g = vec![0f32; sample * w];
        run(&rows, &mut g);
        let bits = compare_bits(&g, &c);
        if let Some(e) = errs.take() {
            v = Err(format!("GPU error: {e}"));
        } else if v.is_ok() && bits.differing > 0 {
            v = Err(format!(
                "GPU != CPU bits: {} of {} differ",
                bits.differing, bits.compared
            ));
        }
        let tile_note = match tile {
            Some(_) => String::new(),
            None => match ops::attend_tile(self.kv.capacity(), hd, gpu.info().smem_per_block) {
                Some(t) if t < self.kv.capacity() => format!("; tiles of {t} keys"),
                _ => String::new(),
            },
        };
        out.cases.push(CaseResult {
            op: "attention".into(),
            case: format!("{label}{tile_note}"),
            verdict: v,
            cpu_bits: Some(bits),
        });
        for &(kernel, what) in plants {
            let broken = |rs: &[Row], o: &mut [f32]| run_with(kernel, rs, o);
            if kernel == "tf_plant_attend_tile_sum" {
                let mut p = vec![0f32; sample * w];
                broken(&rows, &mut p);
                out.controls
                    .push(bits_control(what, errs.take(), compare_bits(&p, &c)));
            } else {
                out.controls.push(control(
                    &format!("attention: {what}"),
                    &op,
                    &broken,
                    cfg,
                    &errs,
                ));
            }
        }
        Ok(())
    }
}

/// A planted kernel the bit comparison with the CPU must catch (the contract's tolerance and
/// row invariance cannot see a changed summation order).
fn bits_control(what: &str, gpu_error: Option<String>, bits: CpuBits) -> ControlResult {
    let caught = match gpu_error {
        Some(e) => Err(format!("a GPU error is not a catch: {e}")),
        None if bits.differing > 0 => Ok(format!(
            "CpuBits: {} of {} outputs differ from the CPU's (max {:.2e})",
            bits.differing, bits.compared, bits.max_abs_diff
        )),
        None => Err("the planted kernel gave the CPU's bits".into()),
    };
    ControlResult {
        control: format!("attention: {what}"),
        caught,
    }
}

/// f64 reference: causal (windowed) softmax attention.
fn reference(p: &AttnParams, cache: &LayerKv, row: &Row, out: &mut [f64]) {
    let hd = p.head_dim;
    let group = p.n_heads / p.n_kv_heads;
    let lo = p.first_key(row.1);
    let mut acc = vec![0f64; hd];
    for h in 0..p.n_heads {
        let q = &row.2[h * hd..(h + 1) * hd];
        let kvh = h / group;
        let scores: Vec<f64> = (lo..=row.1)
            .map(|j| {
                let k = cache.key(j, kvh).unwrap_or(&[]);
                q.iter()
                    .zip(k)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>()
                    * p.scale as f64
            })
            .collect();
        let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        acc.fill(0.0);
        let mut l = 0.0;
        for (j, s) in (lo..=row.1).zip(&scores) {
            let e = (s - m).exp();
            l += e;
            match cache.value(j, kvh) {
                Some(v) => acc.iter_mut().zip(v).for_each(|(a, &x)| *a += e * x as f64),
                None => acc.fill(f64::NAN),
            }
        }
        for (o, a) in out[h * hd..(h + 1) * hd].iter_mut().zip(&acc) {
            *o = a / l;
        }
    }
}
