//! What the families' GPU forwards share around their launch sequences: CUDA graphs captured
//! per row count and replayed, and the logits of the rows that asked for them.

use crate::device::Gpu;
use crate::error::{drv, CudaError, Result};
use crate::llama::GpuRow;
use cudarc::driver::{CudaGraph, CudaSlice, CudaStream};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

/// A round's launch sequence, captured once per row count.
#[derive(Default)]
pub struct Graphs(HashMap<usize, CudaGraph>);

impl Graphs {
    /// Drops every captured graph (the next graphed round captures afresh).
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Runs the launches for `n` rows: captured by `launch` on first use and replayed (graphed),
    /// or `launch` itself (eager).
    pub fn run(
        &mut self,
        stream: Arc<CudaStream>,
        n: usize,
        graphed: bool,
        launch: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        if !graphed {
            return launch();
        }
        if let Entry::Vacant(slot) = self.0.entry(n) {
            stream
                .begin_capture(
                    cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                )
                .map_err(drv("beginning graph capture"))?;
            let launched = launch();
            let graph = stream
                .end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0))
                .map_err(drv("ending graph capture"))?;
            launched?;
            slot.insert(graph.ok_or_else(|| CudaError::Shape {
                op: "graph capture",
                detail: "captured an empty graph".into(),
            })?);
        }
        self.0[&n]
            .launch()
            .map_err(drv("launching the round's graph"))
    }
}

/// Checks a round against the slots' lengths `lens`: 1..=`max_rows` rows, each continuing its
/// slot (a slot's rows in ascending position), tokens below `vocab`; `op` names the model's
/// round in the error.
pub fn check_rows(
    op: &'static str,
    lens: &[usize],
    rows: &[GpuRow],
    max_rows: usize,
    vocab: usize,
) -> Result<()> {
    if rows.is_empty() || rows.len() > max_rows {
        return Err(CudaError::Shape {
            op,
            detail: format!("{} rows (1..={max_rows} allowed)", rows.len()),
        });
    }
    let mut next = lens.to_vec();
    for r in rows {
        let len = next.get_mut(r.slot).ok_or(CudaError::Param {
            op,
            what: "slot",
            value: r.slot as f64,
            why: "no such slot",
        })?;
        if r.pos != *len {
            return Err(CudaError::Param {
                op,
                what: "position",
                value: r.pos as f64,
                why: "must continue its slot",
            });
        }
        if r.token as usize >= vocab {
            return Err(CudaError::Param {
                op,
                what: "token",
                value: r.token as f64,
                why: "beyond the vocabulary",
            });
        }
        *len += 1;
    }
    Ok(())
}

/// Copies back the device logits (`[rows.len(), vocab]`) of the rows that want them, in row
/// order (nothing when none does: a round read on the device, or a prefill chunk).
pub fn wanted_logits(
    gpu: &Gpu,
    dev: &CudaSlice<f32>,
    rows: &[GpuRow],
    vocab: usize,
    logits: &mut Vec<f32>,
) -> Result<()> {
    let wanted: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].logits).collect();
    logits.clear();
    download_rows_into(gpu, dev, &wanted, vocab, logits)
}

/// Rows `rows` (ascending) of the device logits, each its own vector (see
/// [`download_rows_into`]).
pub(crate) fn download_rows(
    gpu: &Gpu,
    dev: &CudaSlice<f32>,
    rows: &[usize],
    vocab: usize,
) -> Result<Vec<Vec<f32>>> {
    let mut all = Vec::new();
    download_rows_into(gpu, dev, rows, vocab, &mut all)?;
    Ok(all.chunks(vocab).map(<[f32]>::to_vec).collect())
}

/// Appends rows `rows` (ascending) of the device logits to `out`, copied down with one copy
/// per run of consecutive rows and one synchronization.
fn download_rows_into(
    gpu: &Gpu,
    dev: &CudaSlice<f32>,
    rows: &[usize],
    vocab: usize,
    out: &mut Vec<f32>,
) -> Result<()> {
    let mut i = 0;
    while i < rows.len() {
        let mut j = i + 1;
        while j < rows.len() && rows[j] == rows[j - 1] + 1 {
            j += 1;
        }
        let (a, b) = (rows[i] * vocab, (rows[j - 1] + 1) * vocab);
        if b > dev.len() {
            return Err(CudaError::Shape {
                op: "logits rows download",
                detail: format!(
                    "rows {}..={} of {vocab} past a buffer of {}",
                    rows[i],
                    rows[j - 1],
                    dev.len()
                ),
            });
        }
        let at = out.len();
        out.resize(at + b - a, 0.0);
        gpu.stream()
            .memcpy_dtoh(&dev.slice(a..b), &mut out[at..])
            .map_err(drv("copying logits rows from the device"))?;
        i = j;
    }
    if !rows.is_empty() {
        gpu.synchronize()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_must_continue_their_slots_in_order() {
        let lens = [0usize, 3, 7];
        // Several rows of one slot, in ascending position, beside other slots: accepted.
        let ok = [
            GpuRow::wanted(1, 3, 5),
            GpuRow::wanted(0, 0, 1),
            GpuRow::wanted(1, 4, 6),
            GpuRow::wanted(1, 5, 0),
            GpuRow::wanted(2, 7, 95),
        ];
        check_rows("test round", &lens, &ok, 8, 96).unwrap();
        // Refused: a gap, a repeat, rows of a slot out of order, an unknown slot, a token beyond
        // the vocabulary, no rows, too many rows.
        let bad: [&[GpuRow]; 6] = [
            &[GpuRow::wanted(1, 4, 0)],
            &[GpuRow::wanted(1, 3, 0), GpuRow::wanted(1, 3, 0)],
            &[GpuRow::wanted(1, 4, 0), GpuRow::wanted(1, 3, 0)],
            &[GpuRow::wanted(3, 0, 0)],
            &[GpuRow::wanted(0, 0, 96)],
            &[],
        ];
        for rows in bad {
            assert!(
                check_rows("test round", &lens, rows, 8, 96).is_err(),
                "{rows:?} accepted"
            );
        }
        let many: Vec<GpuRow> = (0..9).map(|p| GpuRow::wanted(0, p, 0)).collect();
        assert!(check_rows("test round", &lens, &many, 8, 96).is_err());
        check_rows("test round", &lens, &many[..8], 8, 96).unwrap();
    }
}
