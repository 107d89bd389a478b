//! What the families' GPU forwards share around their launch sequences: CUDA graphs captured
//! per row count and replayed, and the logits of the rows that asked for them.

use crate::device::Gpu;
use crate::error::{drv, CudaError, Result};
use crate::llama::GpuRow;
use cudarc::driver::sys;
use cudarc::driver::{CudaSlice, CudaStream};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::Arc;

/// A round's launch sequence, captured once per row count.
#[derive(Default)]
pub struct Graphs(HashMap<usize, Round>);

impl Graphs {
    /// Drops every captured graph (the next graphed round captures afresh).
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Edges of the captured graphs: (programmatic, all).
    pub fn edges(&self) -> (usize, usize) {
        self.0
            .values()
            .fold((0, 0), |(p, a), r| (p + r.edges.0, a + r.edges.1))
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
            slot.insert(Round::capture(stream, launch)?);
        }
        self.0[&n].launch()
    }
}

/// One captured round: the graph, whose edges between our kernels are programmatic (the next
/// kernel launches while this one finishes; each waits in `tf_follow`, kernels/common.cuh), and
/// its executable. `TF_CUDA_PDL=0` keeps every edge a full one.
struct Round {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    stream: Arc<CudaStream>,
    /// Its edges: (programmatic, all).
    edges: (usize, usize),
}

impl Round {
    /// Captures `launch`'s launches on `stream` and instantiates them.
    fn capture(stream: Arc<CudaStream>, launch: impl FnOnce() -> Result<()>) -> Result<Round> {
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(drv("beginning graph capture"))?;
        let launched = launch();
        let mut graph = std::ptr::null_mut();
        // SAFETY: the stream is capturing (begun above); the graph comes back to us to destroy.
        let ended = unsafe { sys::cuStreamEndCapture(stream.cu_stream(), &mut graph) }.result();
        let mut round = Round {
            graph,
            exec: std::ptr::null_mut(),
            stream,
            edges: (0, 0),
        };
        // A launch that failed inside the capture is the cause; ending it then finds the side
        // streams left unjoined.
        launched?;
        ended.map_err(drv("ending graph capture"))?;
        if round.graph.is_null() {
            return Err(CudaError::Shape {
                op: "graph capture",
                detail: "captured an empty graph".into(),
            });
        }
        let pdl = !std::env::var("TF_CUDA_PDL").is_ok_and(|v| v == "0");
        // SAFETY: a graph we own, not yet instantiated.
        round.edges = unsafe { follow_edges(round.graph, pdl) }?;
        // SAFETY: a complete graph; the executable is destroyed with the round.
        unsafe { sys::cuGraphInstantiateWithFlags(&mut round.exec, round.graph, 0) }
            .result()
            .map_err(drv("instantiating the round's graph"))?;
        Ok(round)
    }

    fn launch(&self) -> Result<()> {
        self.stream
            .context()
            .bind_to_thread()
            .map_err(drv("binding the context"))?;
        // SAFETY: an instantiated graph of this stream's context.
        unsafe { sys::cuGraphLaunch(self.exec, self.stream.cu_stream()) }
            .result()
            .map_err(drv("launching the round's graph"))
    }
}

impl Drop for Round {
    fn drop(&mut self) {
        let _ = self.stream.context().bind_to_thread();
        // SAFETY: handles this round created and nothing else holds; errors can only be dropped.
        unsafe {
            if !self.exec.is_null() {
                let _ = sys::cuGraphExecDestroy(self.exec);
            }
            if !self.graph.is_null() {
                let _ = sys::cuGraphDestroy(self.graph);
            }
        }
    }
}

/// Makes every full edge from one of our kernels (`tf_` names) to another programmatic, when
/// `change`: the later kernel launches as the blocks of the earlier one exit, and waits in its
/// `tf_follow` for the earlier one's completion. Returns (edges made programmatic, all edges).
///
/// # Safety
/// `graph` must be a valid graph not being used elsewhere.
unsafe fn follow_edges(graph: sys::CUgraph, change: bool) -> Result<(usize, usize)> {
    let during = "making the round's kernel edges programmatic";
    let mut n = 0usize;
    let none = std::ptr::null_mut();
    unsafe { sys::cuGraphGetEdges_v2(graph, none, none, std::ptr::null_mut(), &mut n) }
        .result()
        .map_err(drv(during))?;
    let mut from = vec![std::ptr::null_mut(); n];
    let mut to = vec![std::ptr::null_mut(); n];
    // SAFETY: plain data; zero is the default edge.
    let mut data: Vec<sys::CUgraphEdgeData> = vec![unsafe { std::mem::zeroed() }; n];
    unsafe {
        sys::cuGraphGetEdges_v2(
            graph,
            from.as_mut_ptr(),
            to.as_mut_ptr(),
            data.as_mut_ptr(),
            &mut n,
        )
    }
    .result()
    .map_err(drv(during))?;
    let mut ours = HashMap::new();
    let mut is_ours = |node: sys::CUgraphNode| -> bool {
        *ours
            .entry(node)
            .or_insert_with(|| unsafe { our_kernel(node) })
    };
    let keep: Vec<usize> = (0..n)
        .filter(|&i| change && data[i].type_ == 0 && is_ours(from[i]) && is_ours(to[i]))
        .collect();
    let pick = |v: &[sys::CUgraphNode]| keep.iter().map(|&i| v[i]).collect::<Vec<_>>();
    let (f, t) = (pick(&from), pick(&to));
    let old: Vec<_> = keep.iter().map(|&i| data[i]).collect();
    let mut new = old.clone();
    for d in &mut new {
        d.from_port = sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC as u8;
        d.type_ = sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8;
    }
    if !keep.is_empty() {
        unsafe {
            sys::cuGraphRemoveDependencies_v2(graph, f.as_ptr(), t.as_ptr(), old.as_ptr(), f.len())
        }
        .result()
        .map_err(drv(during))?;
        unsafe {
            sys::cuGraphAddDependencies_v2(graph, f.as_ptr(), t.as_ptr(), new.as_ptr(), f.len())
        }
        .result()
        .map_err(drv(during))?;
    }
    Ok((keep.len(), n))
}

/// Whether `node` launches one of our kernels (whose names all start with `tf_`).
///
/// # Safety
/// `node` must be a node of a valid graph.
unsafe fn our_kernel(node: sys::CUgraphNode) -> bool {
    let mut kind = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
    let kernel = unsafe { sys::cuGraphNodeGetType(node, &mut kind) }
        .result()
        .is_ok()
        && kind == sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL;
    if !kernel {
        return false;
    }
    // SAFETY: plain data, filled by the driver.
    let mut params: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    let mut name = std::ptr::null();
    unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut params) }
        .result()
        .is_ok()
        && !params.func.is_null()
        && unsafe { sys::cuFuncGetName(&mut name, params.func) }
            .result()
            .is_ok()
        && !name.is_null()
        && unsafe { CStr::from_ptr(name) }
            .to_bytes()
            .starts_with(b"tf_")
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
