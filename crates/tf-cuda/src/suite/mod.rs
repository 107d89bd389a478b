//! The kernel contract suite on the GPU: the CPU's harness (`tf_kernels::contract`) run on the
//! GPU kernels — accuracy against an f64 reference on fresh random inputs, bit-for-bit row
//! invariance for 1..=64 rows (plus 67 and 100), repeatability — with planted controls that
//! must be caught, and a comparison of every output with the CPU kernels' bits.

mod attention;
mod fused;
mod llama_extra;
mod mamba;
mod matmul;
mod mma;
mod moe;
pub(crate) mod packed;
mod quant;
mod rows;
pub mod select;
mod slices;

use crate::device::Gpu;
use crate::error::CudaError;
use std::cell::RefCell;
use tf_kernels::contract::{check, CheckConfig, Failure, Report, RowOp};

/// One contract case's outcome.
#[derive(Debug)]
pub struct CaseResult {
    /// Operator.
    pub op: String,
    /// Shape / format.
    pub case: String,
    /// The harness's verdict.
    pub verdict: Result<Report, String>,
    /// Whether every GPU output equals the CPU kernel's bits (`None`: not compared).
    pub cpu_bits: Option<CpuBits>,
}

/// GPU-vs-CPU bit comparison of one case.
#[derive(Debug, Clone, Copy)]
pub struct CpuBits {
    /// Outputs compared.
    pub compared: usize,
    /// Outputs whose bits differ.
    pub differing: usize,
    /// Largest |gpu - cpu|.
    pub max_abs_diff: f64,
}

impl CpuBits {
    /// Adds another comparison's counts to these.
    pub(crate) fn add(&mut self, b: CpuBits) {
        self.compared += b.compared;
        self.differing += b.differing;
        self.max_abs_diff = self.max_abs_diff.max(b.max_abs_diff);
    }

    /// The contract verdict `v`, failed too when any compared value differs from `of` (the
    /// bits these kernels promise, not only the tolerance).
    pub(crate) fn gate(self, v: Result<Report, String>, of: &str) -> Result<Report, String> {
        match v {
            Ok(_) if self.differing > 0 => Err(format!(
                "GPU != {of}: {} of {} differ (max {:.2e})",
                self.differing, self.compared, self.max_abs_diff
            )),
            v => v,
        }
    }
}

/// One planted control's outcome.
#[derive(Debug)]
pub struct ControlResult {
    /// What was planted.
    pub control: String,
    /// The failure the harness reported, or why the control was not caught.
    pub caught: Result<String, String>,
}

/// Everything the suite found.
#[derive(Debug, Default)]
pub struct SuiteResult {
    /// Contract cases.
    pub cases: Vec<CaseResult>,
    /// Planted controls.
    pub controls: Vec<ControlResult>,
}

impl SuiteResult {
    /// True when every case passed and every control was caught.
    pub fn passed(&self) -> bool {
        self.cases.iter().all(|c| c.verdict.is_ok())
            && self.controls.iter().all(|c| c.caught.is_ok())
    }

    /// The result as markdown tables.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "| op | case | contract | max abs err | max err / tol | rows compared bit for bit | GPU == CPU bits |\n| --- | --- | --- | ---: | ---: | ---: | --- |\n",
        );
        for c in &self.cases {
            let (v, e, r, n) = match &c.verdict {
                Ok(rep) => (
                    "pass".to_string(),
                    format!("{:.2e}", rep.max_abs_err),
                    format!("{:.3}", rep.max_tol_ratio),
                    rep.rows_compared.to_string(),
                ),
                Err(f) => (format!("FAIL: {f}"), "-".into(), "-".into(), "-".into()),
            };
            let bits = match c.cpu_bits {
                None => "not compared".to_string(),
                Some(b) if b.differing == 0 => format!("yes ({} values)", b.compared),
                Some(b) => format!(
                    "no: {} of {} differ, max {:.2e}",
                    b.differing, b.compared, b.max_abs_diff
                ),
            };
            s.push_str(&format!(
                "| {} | {} | {v} | {e} | {r} | {n} | {bits} |\n",
                c.op, c.case
            ));
        }
        s.push_str("\n| planted control | caught as |\n| --- | --- |\n");
        for c in &self.controls {
            let caught = match &c.caught {
                Ok(f) => f.clone(),
                Err(why) => format!("NOT CAUGHT ({why})"),
            };
            s.push_str(&format!("| {} | {} |\n", c.control, caught));
        }
        s
    }
}

/// Which batch sizes the suite uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// 1..=64, 67, 100 rows for every case.
    Full,
    /// 1..=8, 16, 33, 67 rows.
    Quick,
}

impl Depth {
    fn config(self, seed: u64) -> CheckConfig {
        match self {
            Depth::Full => CheckConfig::default().with_seed(seed),
            Depth::Quick => CheckConfig::quick().with_seed(seed),
        }
    }
}

/// Runs every case and control.
pub fn run_all(gpu: &Gpu, depth: Depth) -> Result<SuiteResult, CudaError> {
    let mut out = SuiteResult::default();
    matmul::run(gpu, depth, &mut out)?;
    rows::run(gpu, depth, &mut out)?;
    attention::run(gpu, depth, &mut out)?;
    fused::run(gpu, depth, &mut out)?;
    quant::run(gpu, depth, &mut out)?;
    mamba::run(gpu, depth, &mut out)?;
    moe::run(gpu, depth, &mut out)?;
    llama_extra::run(gpu, depth, &mut out)?;
    select::run(gpu, depth, &mut out)?;
    slices::run(gpu, depth, &mut out)?;
    mma::run(gpu, depth, &mut out)?;
    mma::grouped(gpu, depth, &mut out)?;
    mma::relu2_fold(gpu, &mut out)?;
    Ok(out)
}

/// A GPU closure's first error, kept so a failing launch is reported, not hidden as NaN.
#[derive(Default)]
pub(crate) struct ErrSlot(RefCell<Option<String>>);

impl ErrSlot {
    /// Records `e` (the first one wins) and poisons `out`.
    pub(crate) fn put(&self, e: CudaError, out: &mut [f32]) {
        out.fill(f32::NAN);
        self.0.borrow_mut().get_or_insert_with(|| e.to_string());
    }

    fn take(&self) -> Option<String> {
        self.0.borrow_mut().take()
    }
}

/// Runs the harness on `run`, folding a recorded GPU error into the verdict.
pub(crate) fn verdict<R>(
    op: &RowOp<'_, R>,
    run: &dyn Fn(&[R], &mut [f32]),
    cfg: &CheckConfig,
    errs: &ErrSlot,
) -> Result<Report, String> {
    let r = check(op, run, cfg);
    if let Some(e) = errs.take() {
        return Err(format!("GPU error: {e}"));
    }
    r.map_err(|f| f.to_string())
}

/// Runs the harness on a planted control; it must fail (and not by a GPU error).
pub(crate) fn control<R>(
    name: &str,
    op: &RowOp<'_, R>,
    broken: &dyn Fn(&[R], &mut [f32]),
    cfg: &CheckConfig,
    errs: &ErrSlot,
) -> ControlResult {
    let r = check(op, broken, cfg);
    let caught = match (errs.take(), r) {
        (Some(e), _) => Err(format!("a GPU error is not a contract catch: {e}")),
        (None, Ok(_)) => Err("the harness passed it".into()),
        (None, Err(f)) => Ok(failure_kind(&f)),
    };
    ControlResult {
        control: name.to_string(),
        caught,
    }
}

fn failure_kind(f: &Failure) -> String {
    let kind = match f {
        Failure::Accuracy { .. } => "Accuracy",
        Failure::RowVariance { .. } => "RowVariance",
        Failure::NotRepeatable { .. } => "NotRepeatable",
        Failure::OutputLength { .. } => "OutputLength",
    };
    format!("{kind}: {f}")
}

/// `o[j] = Σ_k w[j, k] · x[k]` in f64 (`wf`: the decoded weights, rows of `cols`): the
/// matmul cases' reference.
pub(crate) fn dense_reference(wf: &[f64], cols: usize, x: &[f32], o: &mut [f64]) {
    for (j, oj) in o.iter_mut().enumerate() {
        *oj = wf[j * cols..(j + 1) * cols]
            .iter()
            .zip(x)
            .map(|(w, &x)| w * x as f64)
            .sum();
    }
}

/// Compares GPU and CPU outputs bit for bit.
pub(crate) fn compare_bits(gpu: &[f32], cpu: &[f32]) -> CpuBits {
    let mut b = CpuBits {
        compared: gpu.len().min(cpu.len()),
        differing: 0,
        max_abs_diff: 0.0,
    };
    for (&g, &c) in gpu.iter().zip(cpu) {
        if g.to_bits() != c.to_bits() {
            b.differing += 1;
            b.max_abs_diff = b.max_abs_diff.max((g as f64 - c as f64).abs());
        }
    }
    if gpu.len() != cpu.len() {
        b.differing += gpu.len().abs_diff(cpu.len());
    }
    b
}
