//! Contract cases for the packed-weight matmul and the embedding rows.

use super::packed::HostWeights;
use super::{
    compare_bits, control, dense_reference, verdict, CaseResult, Depth, ErrSlot, SuiteResult,
};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::ops;
use crate::weights::{GpuFormat, GpuMatrix};
use cudarc::driver::CudaSlice;
use std::cell::RefCell;
use tf_kernels::contract::{Rng, RowOp, Tolerance};
use tf_kernels::matmul::{embedding_row, matmul as cpu_matmul};
use tf_kernels::pool::Pool;

const U: f64 = 1.0 / (1u64 << 24) as f64;

/// Most rows any call of the harness makes.
const MAX_ROWS: usize = 100;

/// Device buffers for one matmul case, reused by every call.
struct MatmulRig<'g> {
    gpu: &'g Gpu,
    w: GpuMatrix,
    x: RefCell<CudaSlice<f32>>,
    y: RefCell<CudaSlice<f32>>,
    /// Threads a weight row (16: tf_mmv; 4: tf_mmq).
    tpr: usize,
}

impl MatmulRig<'_> {
    fn run(&self, kernel: &'static str, rows: &[Vec<f32>], out: &mut [f32], errs: &ErrSlot) {
        let r = (|| -> Result<()> {
            let flat: Vec<f32> = rows.iter().flatten().copied().collect();
            let mut x = self.x.borrow_mut();
            let mut y = self.y.borrow_mut();
            self.gpu.write(&flat, &mut x)?;
            ops::matmul_geometry(self.gpu, kernel, &self.w, &x, rows.len(), &mut y, self.tpr)?;
            out.copy_from_slice(&self.gpu.download(&y, out.len())?);
            Ok(())
        })();
        if let Err(e) = r {
            errs.put(e, out);
        }
    }
}

/// (format, rows, cols, label, quick-only) of the cases.
const CASES: [(GpuFormat, usize, usize, &str, bool); 10] = [
    (
        GpuFormat::Q4_1,
        576,
        576,
        "q/o proj 576x576 (default model)",
        false,
    ),
    (GpuFormat::Q4_1, 192, 576, "k/v proj 192x576", false),
    (GpuFormat::Q4_1, 1536, 576, "gate/up 1536x576", false),
    (GpuFormat::Q4_1, 576, 1536, "down 576x1536", false),
    (GpuFormat::Q8_0, 49152, 576, "tied head 49152x576", true),
    (GpuFormat::Q8_0, 96, 544, "96x544", false),
    (GpuFormat::Q4_0, 64, 576, "64x576", false),
    (GpuFormat::Bf16, 64, 576, "64x576", false),
    (GpuFormat::Bf16, 37, 577, "37x577 (odd width)", false),
    (GpuFormat::F16, 19, 33, "19x33 (odd width)", false),
];

/// Runs the matmul and embedding cases and their controls.
pub(crate) fn run(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    let pool = Pool::new(std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut cases: Vec<_> = CASES.to_vec();
    cases.push((GpuFormat::F32, 37, 577, "37x577 (odd width)", false));
    // Each case on both geometries its format has (tf_mmv; tf_mmq where the format has it).
    let runs: Vec<_> = cases
        .iter()
        .enumerate()
        .flat_map(|(i, &c)| {
            let mmq = c.0.has_mmq();
            [(i, c, 16usize), (i, c, 4)]
                .into_iter()
                .filter(move |r| r.2 == 16 || mmq)
        })
        .collect();
    for &(i, (format, rows, cols, label, heavy), tpr) in &runs {
        let label = &format!("{label}, {tpr} threads a row");
        let mut rng = Rng::new(0x6a7 + i as u64);
        let hw = HostWeights::random(format, rows, cols, &mut rng);
        let wf: Vec<f64> = (0..rows).flat_map(|j| hw.row_f64(j)).collect();
        let wmax = wf.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let rig = MatmulRig {
            gpu,
            w: GpuMatrix::upload(gpu, &hw.packed())?,
            x: RefCell::new(gpu.zeros(MAX_ROWS * cols)?),
            y: RefCell::new(gpu.zeros(MAX_ROWS * rows)?),
            tpr,
        };
        // |x| <= 1: the fmaf chains of k/16 terms plus the fold (4) and the weight's own rounding.
        let k = cols as f64;
        let abs = ((k / 16.0).ceil() + 6.0) * U * k * wmax;
        let gen = |r: &mut Rng, _: usize| r.vec_uniform(cols, -1.0, 1.0);
        let reference = |x: &Vec<f32>, o: &mut [f64]| dense_reference(&wf, cols, x, o);
        let name = format!("matmul {format:?}");
        let op = RowOp {
            name: &name,
            out_width: rows,
            tolerance: Tolerance::new(abs, 0.0),
            gen_row: &gen,
            reference: &reference,
        };
        let errs = ErrSlot::default();
        let kernel = format.matmul_kernel();
        let run = |r: &[Vec<f32>], o: &mut [f32]| rig.run(kernel, r, o, &errs);
        let cfg = if heavy {
            Depth::Quick.config(0x51 + i as u64)
        } else {
            depth.config(0x51 + i as u64)
        };
        let verdict = verdict(&op, &run, &cfg, &errs);
        // GPU vs CPU bits on 40 fresh rows in one call.
        let mut r2 = Rng::new(0xb175 + i as u64);
        let xs: Vec<Vec<f32>> = (0..40).map(|_| r2.vec_uniform(cols, -1.0, 1.0)).collect();
        let mut g = vec![0f32; 40 * rows];
        rig.run(kernel, &xs, &mut g, &errs);
        let mut c = vec![0f32; 40 * rows];
        let flat: Vec<f32> = xs.iter().flatten().copied().collect();
        cpu_matmul(&hw.packed(), &flat, 40, &mut c, &pool).map_err(|e| CudaError::Shape {
            op: "cpu matmul",
            detail: e.to_string(),
        })?;
        out.cases.push(CaseResult {
            op: name.clone(),
            case: label.to_string(),
            verdict,
            cpu_bits: Some(compare_bits(&g, &c)),
        });
        if i == 0 {
            let broken =
                |r: &[Vec<f32>], o: &mut [f32]| rig.run("tf_plant_matmul_q4_1_rowvar", r, o, &errs);
            out.controls.push(control(
                "matmul Q4_1: blocks summed in descending order when n > 1 (reduction order depends on the row count)",
                &op,
                &broken,
                &cfg,
                &errs,
            ));
        }
    }
    embeddings(gpu, depth, out)
}

/// Embedding rows: the decoded weight row of each token.
fn embeddings(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    for (i, &(format, rows, cols)) in [
        (GpuFormat::Q8_0, 49152usize, 576usize),
        (GpuFormat::Q4_1, 300, 576),
        (GpuFormat::Bf16, 300, 100),
    ]
    .iter()
    .enumerate()
    {
        let mut rng = Rng::new(0xe3b + i as u64);
        let hw = HostWeights::random(format, rows, cols, &mut rng);
        let w = GpuMatrix::upload(gpu, &hw.packed())?;
        let tok = RefCell::new(gpu.zeros::<i32>(MAX_ROWS)?);
        let dst = RefCell::new(gpu.zeros::<f32>(MAX_ROWS * cols)?);
        let errs = ErrSlot::default();
        let run_off = |ids: &[usize], o: &mut [f32], off: usize| {
            let r = (|| -> Result<()> {
                let ids: Vec<i32> = ids.iter().map(|&t| ((t + off) % rows) as i32).collect();
                let (mut t, mut d) = (tok.borrow_mut(), dst.borrow_mut());
                gpu.write(&ids, &mut t)?;
                ops::embed(gpu, &w, &t, ids.len(), &mut d)?;
                o.copy_from_slice(&gpu.download(&d, o.len())?);
                Ok(())
            })();
            if let Err(e) = r {
                errs.put(e, o);
            }
        };
        let gen = |r: &mut Rng, _: usize| r.below(rows);
        let reference = |t: &usize, o: &mut [f64]| o.copy_from_slice(&hw.row_f64(*t));
        let name = format!("embedding {format:?}");
        let op = RowOp {
            name: &name,
            out_width: cols,
            tolerance: Tolerance::new(0.0, 1.2e-7),
            gen_row: &gen,
            reference: &reference,
        };
        let cfg = depth.config(0x3e + i as u64);
        let run = |ids: &[usize], o: &mut [f32]| run_off(ids, o, 0);
        let verdict = verdict(&op, &run, &cfg, &errs);
        let ids: Vec<usize> = (0..64).map(|_| rng.below(rows)).collect();
        let mut g = vec![0f32; 64 * cols];
        run_off(&ids, &mut g, 0);
        let mut c = vec![0f32; 64 * cols];
        for (t, row) in ids.iter().zip(c.chunks_exact_mut(cols)) {
            embedding_row(&hw.packed(), *t, row).map_err(|e| CudaError::Shape {
                op: "cpu embedding",
                detail: e.to_string(),
            })?;
        }
        out.cases.push(CaseResult {
            op: name.clone(),
            case: format!("{rows}x{cols}"),
            verdict,
            cpu_bits: Some(compare_bits(&g, &c)),
        });
        if i == 1 {
            let broken = |ids: &[usize], o: &mut [f32]| run_off(ids, o, 1);
            out.controls.push(control(
                "embedding Q4_1: token id off by one",
                &op,
                &broken,
                &cfg,
                &errs,
            ));
        }
    }
    Ok(())
}
