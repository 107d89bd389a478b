//! What the families' GPU forwards share around their launch sequences: CUDA graphs captured
//! per row count and replayed, and the logits of the rows that asked for them.
//!
//! On devices with programmatic dependent launch (compute capability 9.0 and up) every
//! kernel-to-kernel edge of a captured round is made programmatic: the next kernel's blocks may
//! be placed while the previous kernel's last blocks run, and each kernel waits at its start
//! (`griddepcontrol.wait`, compile.rs) until the previous one has finished and its writes are
//! visible. The arithmetic and the order of the kernels are unchanged, so graphed == eager
//! still holds bit for bit; `TF_CUDA_PDL=0` turns it off (for measuring).

use crate::device::Gpu;
use crate::error::{drv, CudaError, Result};
use crate::llama::GpuRow;
use cudarc::driver::sys;
use cudarc::driver::{CudaSlice, CudaStream};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

/// A round's launch sequence, captured once per row count.
#[derive(Default)]
pub struct Graphs(HashMap<usize, RoundGraph>);

/// A captured round and its executable.
struct RoundGraph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

// SAFETY: the driver's graph objects are not tied to a thread; they are launched and destroyed
// only through the owning model, with its context bound.
unsafe impl Send for RoundGraph {}

impl Drop for RoundGraph {
    fn drop(&mut self) {
        // SAFETY: both handles were created by the driver for this graph and are dropped once.
        unsafe {
            if !self.exec.is_null() {
                let _ = sys::cuGraphExecDestroy(self.exec);
            }
            let _ = sys::cuGraphDestroy(self.graph);
        }
    }
}

impl Graphs {
    /// Drops every captured graph (the next graphed round captures afresh).
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Runs the launches for `n` rows: captured by `launch` on first use and replayed (graphed),
    /// or `launch` itself (eager). `programmatic`: make the kernel-to-kernel edges programmatic
    /// ([`Gpu::programmatic_launch`]).
    pub fn run(
        &mut self,
        stream: Arc<CudaStream>,
        n: usize,
        graphed: bool,
        programmatic: bool,
        launch: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        if !graphed {
            return launch();
        }
        if let Entry::Vacant(slot) = self.0.entry(n) {
            slot.insert(capture(&stream, programmatic, launch)?);
        }
        // SAFETY: the executable is live (owned by the map) and the stream is the one it was
        // captured on.
        unsafe { sys::cuGraphLaunch(self.0[&n].exec, stream.cu_stream()) }
            .result()
            .map_err(drv("launching the round's graph"))
    }
}

/// Captures `launch` on `stream` into a graph (its kernel edges made programmatic when asked)
/// and instantiates it.
fn capture(
    stream: &Arc<CudaStream>,
    programmatic: bool,
    launch: impl FnOnce() -> Result<()>,
) -> Result<RoundGraph> {
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(drv("beginning graph capture"))?;
    let launched = launch();
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: the stream is capturing (begun above); `graph` receives the captured graph.
    let ended = unsafe { sys::cuStreamEndCapture(stream.cu_stream(), &mut graph) }.result();
    // Owned from here, so an error below destroys it.
    let round = (!graph.is_null()).then_some(RoundGraph {
        graph,
        exec: std::ptr::null_mut(),
    });
    launched?;
    ended.map_err(drv("ending graph capture"))?;
    let mut round = round.ok_or_else(|| CudaError::Shape {
        op: "graph capture",
        detail: "captured an empty graph".into(),
    })?;
    if programmatic {
        // SAFETY: `graph` is a valid graph not yet instantiated.
        unsafe { programmatic_edges(round.graph) }?;
    }
    // SAFETY: `graph` is valid; `exec` receives the executable graph.
    unsafe { sys::cuGraphInstantiateWithFlags(&mut round.exec, round.graph, 0) }
        .result()
        .map_err(drv("instantiating the round's graph"))?;
    Ok(round)
}

/// Makes every default edge between two kernel nodes of `graph` a programmatic one: the
/// second kernel may start once every block of the first has started or ended, and waits for
/// the first's completion at its own start (every kernel does, see compile.rs).
///
/// # Safety
/// `graph` must be a valid graph that is not being launched or modified elsewhere.
unsafe fn programmatic_edges(graph: sys::CUgraph) -> Result<()> {
    let during = "making the round's kernel edges programmatic";
    let mut n = 0usize;
    let no_nodes = std::ptr::null_mut();
    // SAFETY (this block): the arrays hold `n` entries as the driver reported them.
    unsafe {
        sys::cuGraphGetEdges_v2(graph, no_nodes, no_nodes, std::ptr::null_mut(), &mut n)
            .result()
            .map_err(drv(during))?;
        let mut from = vec![std::ptr::null_mut(); n];
        let mut to = vec![std::ptr::null_mut(); n];
        let mut data: Vec<sys::CUgraphEdgeData> = vec![std::mem::zeroed(); n];
        sys::cuGraphGetEdges_v2(
            graph,
            from.as_mut_ptr(),
            to.as_mut_ptr(),
            data.as_mut_ptr(),
            &mut n,
        )
        .result()
        .map_err(drv(during))?;
        let kernel = |node: sys::CUgraphNode| {
            let mut t = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
            sys::cuGraphNodeGetType(node, &mut t).result().is_ok()
                && t == sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL
        };
        let default = sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_DEFAULT as u8;
        for i in 0..n {
            if data[i].type_ != default || !kernel(from[i]) || !kernel(to[i]) {
                continue;
            }
            sys::cuGraphRemoveDependencies_v2(graph, &from[i], &to[i], &data[i], 1)
                .result()
                .map_err(drv(during))?;
            let mut e = data[i];
            e.from_port = sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC as u8;
            e.type_ = sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8;
            sys::cuGraphAddDependencies_v2(graph, &from[i], &to[i], &e, 1)
                .result()
                .map_err(drv(during))?;
        }
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
