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

/// Copies the `[rows.len(), vocab]` device logits back and keeps the rows that want them, in
/// row order.
pub fn wanted_logits(
    gpu: &Gpu,
    dev: &CudaSlice<f32>,
    rows: &[GpuRow],
    vocab: usize,
    logits: &mut Vec<f32>,
) -> Result<()> {
    let all = gpu.download(dev, rows.len() * vocab)?;
    logits.clear();
    for (i, r) in rows.iter().enumerate() {
        if r.logits {
            logits.extend_from_slice(&all[i * vocab..(i + 1) * vocab]);
        }
    }
    Ok(())
}
