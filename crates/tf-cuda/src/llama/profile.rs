//! Device time of each stage of a decode step, measured on graph replays with CUDA events.

use super::{GpuLlama, GpuRow, Stage};
use crate::error::{drv, CudaError, Result};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};

impl GpuLlama {
    /// Device microseconds per replay of a graph holding `stage`'s launches (all layers) for the
    /// round `rows`, and of the whole step (`None`); `reps` timed replays after one warm-up.
    /// The round is uploaded first; slots advance as in a normal round.
    pub fn profile(&mut self, rows: &[GpuRow], reps: usize) -> Result<Vec<(Option<Stage>, f64)>> {
        self.upload_round(rows)?;
        let n = rows.len();
        let mut out = Vec::new();
        let mut sets: Vec<(Option<Stage>, Vec<Stage>)> =
            Stage::ALL.iter().map(|&s| (Some(s), vec![s])).collect();
        sets.push((None, Stage::ALL.to_vec()));
        for (label, stages) in sets {
            let stream = self.gpu.stream().clone();
            stream
                .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .map_err(drv("beginning graph capture"))?;
            let launched = self.launch_stages(n, &stages);
            let graph = stream
                .end_capture(CUgraphInstantiate_flags(0))
                .map_err(drv("ending graph capture"))?;
            launched?;
            let graph = graph.ok_or_else(|| CudaError::Shape {
                op: "profile",
                detail: "empty graph".into(),
            })?;
            graph.launch().map_err(drv("warm-up replay"))?;
            let ctx = stream.context();
            let (a, b) = (
                ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(drv("event"))?,
                ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(drv("event"))?,
            );
            a.record(&stream).map_err(drv("event record"))?;
            for _ in 0..reps.max(1) {
                graph.launch().map_err(drv("timed replay"))?;
            }
            b.record(&stream).map_err(drv("event record"))?;
            b.synchronize().map_err(drv("event sync"))?;
            let ms = a.elapsed_ms(&b).map_err(drv("event time"))? as f64;
            out.push((label, ms * 1e3 / reps.max(1) as f64));
        }
        for r in rows {
            self.lens[r.slot] = r.pos + 1;
        }
        Ok(out)
    }
}
