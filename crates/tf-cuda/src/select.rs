//! The sampler's candidate selection on the GPU (kernels/select.cu): each logits row's
//! [`SELECT_CAP`] largest non-NaN logits, ordered as the host sampler orders them (f32 total
//! order descending, ties by the lower token id), as (id, value) pairs whose values are copied
//! from the row, plus the row's non-NaN count; so the host downloads candidates, not rows.
//! Any subset of a logits buffer's rows can be selected (the wanted rows of a round).
//! [`RowCandidates::of_row`] is the host reference the GPU output equals bit for bit, and
//! `tf_engine::sampler::sample_candidates` turns candidates into the whole-row draw (or says it
//! cannot). One thread block per selected row: a row's candidates never depend on the other
//! rows selected.
//!
//! [`gather`] reads single logits (the raw logits of the tokens the penalties touch).

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::ops::{grid, i32_of, need};
use cudarc::driver::{CudaSlice, LaunchConfig};
use tf_models::RowCandidates;

/// Kernel entry points defined in kernels/select.cu.
pub const KERNEL_NAMES: &[&str] = &["tf_select_topc", "tf_select_gather"];

/// Most candidates per row (`TF_SELECT_CAP` in kernels/select.cu).
pub const SELECT_CAP: usize = 256;

/// Threads per block of the selection (`TF_SELECT_THREADS`).
const THREADS: u32 = 512;

/// Device buffers for the candidates of up to `rows` rows of `cap` entries each.
pub struct GpuCandidates {
    row_ids: CudaSlice<i32>,
    /// What `row_ids` holds (a selection of the same rows as the last uploads nothing).
    row_ids_host: Vec<i32>,
    /// Per row: entries written, non-NaN count, `cap` ids, `cap` value bits.
    out: CudaSlice<i32>,
    rows: usize,
    cap: usize,
}

impl GpuCandidates {
    /// Buffers for `rows` rows of `cap` (1..=[`SELECT_CAP`]) candidates.
    pub fn new(gpu: &Gpu, rows: usize, cap: usize) -> Result<GpuCandidates> {
        if cap == 0 || cap > SELECT_CAP {
            return Err(CudaError::Param {
                op: "candidate selection",
                what: "cap",
                value: cap as f64,
                why: "must be 1..=256 (TF_SELECT_CAP)",
            });
        }
        Ok(GpuCandidates {
            row_ids: gpu.zeros(rows)?,
            row_ids_host: Vec::new(),
            out: gpu.zeros(rows * (2 + 2 * cap))?,
            rows,
            cap,
        })
    }

    /// Candidates per row.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Rows the buffers hold.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Downloads the candidates of the first `n` slots of the latest selection (one copy).
    pub fn download(&self, gpu: &Gpu, n: usize) -> Result<Vec<RowCandidates>> {
        need("candidate download", "the candidate buffers", self.rows, n)?;
        let stride = 2 + 2 * self.cap;
        let all = gpu.download(&self.out, n * stride)?;
        let mut out = Vec::with_capacity(n);
        for slot in all.chunks_exact(stride) {
            let written = slot[0].clamp(0, self.cap as i32) as usize;
            let (ids, vals) = slot[2..].split_at(self.cap);
            let top = ids
                .iter()
                .zip(vals)
                .take(written)
                .map(|(&i, &v)| (i as u32, f32::from_bits(v as u32)))
                .collect();
            out.push(RowCandidates {
                top,
                non_nan: slot[1].max(0) as usize,
                extra: Vec::new(),
                whole: Vec::new(),
            });
        }
        Ok(out)
    }
}

/// Selects the candidates of `rows` (indices of rows of `logits`, [*, vocab]; any subset, in
/// any order) into `out`, row `rows[b]`'s in slot b.
pub fn select(
    gpu: &Gpu,
    logits: &CudaSlice<f32>,
    rows: &[usize],
    vocab: usize,
    out: &mut GpuCandidates,
) -> Result<()> {
    select_with(gpu, logits, rows, vocab, false, false, out)
}

/// [`select`], with `plant` its planted control (ties ranked by the higher id), which the
/// device check must catch; with `radix` every row takes the kernel's fallback path (a radix
/// select, otherwise taken only by rows of heavy ties), so the check covers both paths.
pub fn select_with(
    gpu: &Gpu,
    logits: &CudaSlice<f32>,
    rows: &[usize],
    vocab: usize,
    plant: bool,
    radix: bool,
    out: &mut GpuCandidates,
) -> Result<()> {
    const OP: &str = "candidate selection";
    let m = rows.len();
    need(OP, "the candidate buffers", out.rows, m)?;
    let v = i32_of(OP, "vocab", vocab)?;
    let have = logits.len() / vocab.max(1);
    let mut ids = Vec::with_capacity(m);
    for &r in rows {
        if r >= have {
            return Err(CudaError::Shape {
                op: OP,
                detail: format!("row {r} of logits holding {have} rows of {vocab}"),
            });
        }
        ids.push(i32_of(OP, "row", r)?);
    }
    if m == 0 {
        return Ok(());
    }
    if out.row_ids_host != ids {
        gpu.write(&ids, &mut out.row_ids)?;
        out.row_ids_host = ids;
    }
    let cap = out.cap as i32;
    let plant = i32::from(plant);
    let radix = i32::from(radix);
    let cfg = LaunchConfig {
        grid_dim: (m as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b = gpu.launcher("tf_select_topc")?;
    b.arg(logits)
        .arg(&out.row_ids)
        .arg(&v)
        .arg(&cap)
        .arg(&plant)
        .arg(&radix)
        .arg(&mut out.out);
    // SAFETY: (f32*, i32*, i32, i32, i32, i32, i32*); every row index is below the rows logits
    // hold (checked above), the output holds out.rows >= m rows of 2 + 2 * cap, and cap is
    // 1..=TF_SELECT_CAP (GpuCandidates::new).
    unsafe { b.go(cfg, "launching the candidate selection") }
}

/// The logits at `(row, id)` of `logits` ([rows, vocab]), in the order given.
pub fn gather(
    gpu: &Gpu,
    logits: &CudaSlice<f32>,
    vocab: usize,
    at: &[(usize, u32)],
) -> Result<Vec<f32>> {
    const OP: &str = "logit gather";
    if at.is_empty() {
        return Ok(Vec::new());
    }
    let rows = logits.len() / vocab.max(1);
    let mut r = Vec::with_capacity(at.len());
    let mut ids = Vec::with_capacity(at.len());
    for &(row, id) in at {
        if row >= rows || id as usize >= vocab {
            return Err(CudaError::Shape {
                op: OP,
                detail: format!("({row}, {id}) is outside the [{rows}, {vocab}] logits"),
            });
        }
        r.push(i32_of(OP, "row", row)?);
        ids.push(id as i32);
    }
    let v = i32_of(OP, "vocab", vocab)?;
    let m = i32_of(OP, "count", at.len())?;
    let (r, ids) = (gpu.upload(&r)?, gpu.upload(&ids)?);
    let mut out = gpu.zeros::<f32>(at.len())?;
    let mut b = gpu.launcher("tf_select_gather")?;
    b.arg(logits)
        .arg(&v)
        .arg(&r)
        .arg(&ids)
        .arg(&m)
        .arg(&mut out);
    // SAFETY: (f32*, i32, i32*, i32*, i32, f32*); every (row, id) was checked to lie inside
    // logits, and rows, ids and out hold m elements.
    unsafe { b.go(grid(at.len(), 256), "launching the logit gather") }?;
    gpu.download(&out, at.len())
}

#[cfg(test)]
mod host_cpp;

#[cfg(test)]
mod tests {
    use crate::compile::{compile_to_ptx, nvrtc_present, COMMON};
    use crate::launch::ptx_param_counts;

    /// select.cu compiles with NVRTC (when libnvrtc loads) and its entries take the arguments
    /// the launchers push.
    #[test]
    fn the_kernels_compile_with_the_launchers_argument_counts() {
        if !nvrtc_present() {
            eprintln!("skipped: libnvrtc not found (set LD_LIBRARY_PATH to nvidia/cu13/lib)");
            return;
        }
        let src = format!("{COMMON}\n{}", include_str!("../kernels/select.cu"));
        let ptx = compile_to_ptx("select.cu", &src, "compute_90").unwrap_or_else(|e| panic!("{e}"));
        let counts: std::collections::HashMap<String, usize> =
            ptx_param_counts(&ptx).into_iter().collect();
        assert_eq!(counts.get("tf_select_topc"), Some(&7));
        assert_eq!(counts.get("tf_select_gather"), Some(&6));
        assert_eq!(counts.len(), super::KERNEL_NAMES.len());
    }
}
