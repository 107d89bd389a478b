//! The CUDA backend behind the engine's [`Model`] trait, so `serve`, `run`, `score` and `bench`
//! drive the GPU forward exactly as they drive the CPU's.
//!
//! Each stream's KV lives in a device slot ([`DeviceSlot`]) taken on the stream's first round
//! and given back when its state is dropped; the host side of a [`StreamState`] stays empty.
//! [`Model::host_copy`] downloads a slot (what the prompt cache retains), and a host state
//! (a resumed prefix) is uploaded into a free slot on its next round. Truncation (a rejected
//! draft) only moves the slot's length: the positions past it are overwritten by later rows.

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::llama::{GpuLlama, GpuRow};
use crate::muse_spark::GpuMuseSpark;
use crate::nemotron_h::GpuNemotronH;
use cudarc::driver::CudaSlice;
use std::sync::{Arc, Mutex};
use tf_families::nemotron_h::NemotronBlock;
use tf_families::ModelPlan;
use tf_formats::checkpoint::Checkpoint;
use tf_formats::WeightFormat;
use tf_kernels::ops::{KvCache, LayerKv, MambaState};
use tf_models::{
    check_rows, DeviceSlot, Model, ModelError, ModelInfo, Row, RowCandidates, RowWant, StreamState,
};

mod candidates;

/// Rounds of at most this many rows replay a captured CUDA graph (decode rounds); larger
/// rounds (prefill chunks) launch eagerly. Graphed == eager bit for bit (docs/receipts/cuda.md).
const GRAPH_ROWS: usize = 64;

/// How to place a model on the GPU.
#[derive(Debug, Clone)]
pub struct CudaOptions {
    /// CUDA device ordinal.
    pub ordinal: usize,
    /// Streams that can run at once (device KV slots).
    pub slots: usize,
    /// Positions per stream (None: the model's own context).
    pub context: Option<usize>,
    /// Most rows one launch sequence takes; larger rounds are split.
    pub max_rows: usize,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            ordinal: 0,
            slots: 8,
            context: None,
            max_rows: 256,
        }
    }
}

/// A GPU forward over stream slots, as the three families' GPU models provide it.
pub trait SlotForward {
    /// The device.
    fn gpu(&self) -> &Gpu;
    /// Stream slots.
    fn slots(&self) -> usize;
    /// Most rows one launch sequence takes.
    fn max_rows(&self) -> usize;
    /// Sets a slot's length (its state at that length is in place).
    fn set_slot_len(&mut self, slot: usize, len: usize) -> Result<()>;
    /// Writes attention layer `layer` of `slot` from position 0.
    fn write_kv(&mut self, slot: usize, layer: usize, k: &[f32], v: &[f32]) -> Result<()>;
    /// Attention layer `layer` of `slot` at positions `0..len`.
    fn read_kv(&self, slot: usize, layer: usize, len: usize) -> Result<(Vec<f32>, Vec<f32>)>;
    /// Writes Mamba layer `layer`'s (conv, SSM) state of `slot`.
    fn write_mamba(
        &mut self,
        _slot: usize,
        _layer: usize,
        _conv: &[f32],
        _ssm: &[f32],
    ) -> Result<()> {
        Err(CudaError::Shape {
            op: "mamba state",
            detail: "this model has no Mamba layers".into(),
        })
    }
    /// Mamba layer `layer`'s (conv, SSM) state of `slot`.
    fn read_mamba(&self, _slot: usize, _layer: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        Err(CudaError::Shape {
            op: "mamba state",
            detail: "this model has no Mamba layers".into(),
        })
    }
    /// One round, eager launches.
    fn forward(&mut self, rows: &[GpuRow], logits: &mut Vec<f32>) -> Result<()>;
    /// One round through a captured CUDA graph.
    fn forward_graphed(&mut self, rows: &[GpuRow], logits: &mut Vec<f32>) -> Result<()>;
    /// The device logits of the latest round (`[rows of the round, vocab]`, every row, whether
    /// it wanted logits or not), when the model exposes them: the candidate selection reads
    /// them in place. None (the default): the backend offers no candidate selection.
    fn logits_device(&self) -> Option<&CudaSlice<f32>> {
        None
    }
}

// `slot_forward!(Type, mamba, logits)`: `mamba` forwards the Mamba state calls, `logits` the
// device logits (`Type::logits_device(&self) -> &CudaSlice<f32>`, which turns the candidate
// selection on).
macro_rules! slot_forward {
    ($t:ty $(, $extra:tt)*) => {
        impl SlotForward for $t {
            fn gpu(&self) -> &Gpu {
                <$t>::gpu(self)
            }
            fn slots(&self) -> usize {
                <$t>::slots(self)
            }
            fn max_rows(&self) -> usize {
                <$t>::max_rows(self)
            }
            fn set_slot_len(&mut self, slot: usize, len: usize) -> Result<()> {
                <$t>::set_slot_len(self, slot, len)
            }
            fn write_kv(&mut self, slot: usize, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
                <$t>::write_kv(self, slot, layer, k, v)
            }
            fn read_kv(&self, slot: usize, layer: usize, len: usize) -> Result<(Vec<f32>, Vec<f32>)> {
                <$t>::read_kv(self, slot, layer, len)
            }
            $(slot_forward!(@$extra $t);)*
            fn forward(&mut self, rows: &[GpuRow], logits: &mut Vec<f32>) -> Result<()> {
                <$t>::forward(self, rows, logits)
            }
            fn forward_graphed(&mut self, rows: &[GpuRow], logits: &mut Vec<f32>) -> Result<()> {
                <$t>::forward_graphed(self, rows, logits)
            }
        }
    };
    (@logits $t:ty) => {
        fn logits_device(&self) -> Option<&CudaSlice<f32>> {
            Some(<$t>::logits_device(self))
        }
    };
    (@mamba $t:ty) => {
        fn write_mamba(&mut self, slot: usize, layer: usize, conv: &[f32], ssm: &[f32]) -> Result<()> {
            <$t>::write_mamba(self, slot, layer, conv, ssm)
        }
        fn read_mamba(&self, slot: usize, layer: usize) -> Result<(Vec<f32>, Vec<f32>)> {
            <$t>::read_mamba(self, slot, layer)
        }
    };
}

slot_forward!(GpuLlama, logits);
slot_forward!(GpuMuseSpark, logits);
slot_forward!(GpuNemotronH, mamba, logits);

/// The host side of a stream's state: attention layers' (kv heads, head dim) and the Mamba
/// layers' count.
#[derive(Debug, Clone)]
struct HostShape {
    kv: Vec<(usize, usize)>,
    mamba_layers: usize,
}

/// Opens the GPU and uploads the planned checkpoint, refusing by name (before any upload) a
/// model that does not fit in free device memory.
pub fn load(
    ck: &Checkpoint,
    plan: &ModelPlan,
    opts: &CudaOptions,
) -> std::result::Result<Box<dyn Model>, CudaError> {
    let (own, shape) = match plan {
        ModelPlan::Llama(p) => {
            let c = &p.config;
            let kv = (c.num_key_value_heads as usize, c.head_dim as usize);
            (
                c.max_position_embeddings,
                HostShape {
                    kv: vec![kv; p.layers.len()],
                    mamba_layers: 0,
                },
            )
        }
        ModelPlan::MuseSpark(p) => {
            let c = &p.config;
            let kv = (c.num_key_value_heads as usize, c.head_dim as usize);
            let layers = c.num_hidden_layers as usize;
            (
                c.max_position_embeddings,
                HostShape {
                    kv: vec![kv; layers],
                    mamba_layers: 0,
                },
            )
        }
        ModelPlan::NemotronH(p) => {
            let c = &p.config;
            let mut shape = HostShape {
                kv: Vec::new(),
                mamba_layers: 0,
            };
            for b in &c.layers {
                match b {
                    NemotronBlock::Attention(a) => shape
                        .kv
                        .push((a.num_kv_heads as usize, a.head_dim as usize)),
                    NemotronBlock::Mamba(_) => shape.mamba_layers += 1,
                    _ => {}
                }
            }
            (c.max_position_embeddings, shape)
        }
    };
    let own = own.unwrap_or(4096) as usize;
    let context = opts.context.map_or(own, |c| c.min(own)).max(1);
    let slots = opts.slots.max(1);
    let gpu = Gpu::open(opts.ordinal)?;
    // Device bytes: MLX weights are re-laid in 32-element units with f32 scales and biases.
    let weights: u64 = ck
        .entries()
        .iter()
        .map(|e| match e.format {
            WeightFormat::MlxAffine { bits, .. } => {
                e.elements() / 32 * crate::quant::mlx_unit_bytes(bits) as u64
            }
            f => f.storage_bytes(e.elements()),
        })
        .sum();
    let per_pos: usize = shape.kv.iter().map(|&(h, d)| h * d * 8).sum();
    let kv = (slots * context * per_pos) as u64;
    let free = gpu.free_memory()? as u64;
    // Workspaces and graphs are small next to these; keep 5% and 512 MiB aside for them.
    if weights + kv + (free / 20).max(512 << 20) > free {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        return Err(CudaError::DoesNotFit {
            weights_gib: gib(weights),
            kv_gib: gib(kv),
            slots,
            context,
            free_gib: gib(free),
        });
    }
    let rows = opts.max_rows;
    let (model, vocab, weight_bytes): (Box<dyn SlotForward>, usize, usize) = match plan {
        ModelPlan::Llama(p) => {
            let m = GpuLlama::new(gpu, ck, p, slots, context, rows)?;
            let (v, w) = (m.vocab_size(), m.weight_bytes());
            (Box::new(m), v, w)
        }
        ModelPlan::MuseSpark(p) => {
            let m = GpuMuseSpark::new(gpu, ck, p, slots, context, rows)?;
            let (v, w) = (m.vocab_size(), m.weight_bytes());
            (Box::new(m), v, w)
        }
        ModelPlan::NemotronH(p) => {
            let m = GpuNemotronH::new(gpu, ck, p, slots, context, rows)?;
            let (v, w) = (m.vocab_size(), m.weight_bytes());
            (Box::new(m), v, w)
        }
    };
    let info = ModelInfo {
        family: plan.family(),
        vocab_size: vocab,
        context,
        state_bytes_per_token: per_pos,
        weight_bytes,
    };
    Ok(Box::new(CudaModel {
        free: Arc::new(Mutex::new((0..slots).rev().collect())),
        model,
        info,
        shape,
        rows: Vec::new(),
        part: Vec::new(),
        kept: candidates::Kept::Nothing,
        cands: None,
    }))
}

fn backend(e: CudaError) -> ModelError {
    ModelError::Backend {
        backend: "cuda",
        message: e.to_string(),
    }
}

/// A GPU model behind the engine's trait.
struct CudaModel {
    model: Box<dyn SlotForward>,
    info: ModelInfo,
    free: Arc<Mutex<Vec<usize>>>,
    shape: HostShape,
    rows: Vec<GpuRow>,
    part: Vec<f32>,
    /// Where the latest candidate round's whole rows are.
    kept: candidates::Kept,
    /// Candidate buffers (allocated on the first candidate round).
    cands: Option<crate::select::GpuCandidates>,
}

// SAFETY: the model is used by one thread at a time (the engine moves it into its scheduler
// thread), and every call first makes the device context current on the calling thread.
unsafe impl Send for CudaModel {}

fn host_err(message: String) -> ModelError {
    ModelError::Backend {
        backend: "cuda",
        message,
    }
}

impl CudaModel {
    fn empty_kv(&self) -> KvCache {
        let layers = self.shape.kv.iter().map(|&(h, d)| LayerKv::new(h, d));
        KvCache::from_layers(
            layers
                .collect::<std::result::Result<_, _>>()
                .expect("validated attention shape"),
        )
    }

    /// Gives `state` a device slot holding its tokens (uploading a host state) and sets the
    /// slot's length to the state's.
    fn make_resident(&mut self, state: &mut StreamState) -> std::result::Result<usize, ModelError> {
        if state.device.is_none() {
            let recurrent = self.shape.mamba_layers > 0;
            let slot = DeviceSlot::take(&self.free, recurrent).ok_or_else(|| {
                host_err(format!(
                    "every one of the {} device stream slots is in use",
                    self.model.slots()
                ))
            })?;
            for l in 0..self.shape.kv.len() {
                let layer = state
                    .kv
                    .layer(l)
                    .ok_or_else(|| host_err(format!("host state has no KV layer {l}")))?;
                if layer.len() != state.len {
                    return Err(host_err(format!(
                        "host state holds {} positions in KV layer {l} but claims {}",
                        layer.len(),
                        state.len
                    )));
                }
                self.model
                    .write_kv(slot.id(), l, layer.keys(), layer.values())
                    .map_err(backend)?;
            }
            if recurrent && state.len > 0 {
                if state.mamba.len() != self.shape.mamba_layers {
                    return Err(host_err(format!(
                        "host state holds {} Mamba layers, the model {}",
                        state.mamba.len(),
                        self.shape.mamba_layers
                    )));
                }
                for (l, m) in state.mamba.iter().enumerate() {
                    self.model
                        .write_mamba(slot.id(), l, &m.conv, &m.ssm)
                        .map_err(backend)?;
                }
            }
            state.kv = self.empty_kv();
            state.mamba = Vec::new();
            state.device = Some(slot);
        }
        let slot = state.device.as_ref().map_or(0, DeviceSlot::id);
        self.model.set_slot_len(slot, state.len).map_err(backend)?;
        Ok(slot)
    }
}

impl CudaModel {
    /// Checks a round's rows, makes their streams resident and fills `self.rows`.
    fn prepare(
        &mut self,
        rows: &[Row],
        states: &mut [&mut StreamState],
    ) -> std::result::Result<(), ModelError> {
        check_rows(rows, states, self.info.vocab_size, self.info.context)?;
        self.model.gpu().bind_to_thread().map_err(backend)?;
        let mut slots = vec![usize::MAX; states.len()];
        for r in rows {
            if slots[r.stream] == usize::MAX {
                slots[r.stream] = self.make_resident(states[r.stream])?;
            }
        }
        self.rows.clear();
        self.rows.extend(rows.iter().map(|r| GpuRow {
            slot: slots[r.stream],
            pos: r.pos,
            token: r.token,
            logits: r.logits,
        }));
        Ok(())
    }
}

impl Model for CudaModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn new_state(&self) -> StreamState {
        StreamState::new(self.empty_kv(), Vec::new())
    }

    fn forward(
        &mut self,
        rows: &[Row],
        states: &mut [&mut StreamState],
        logits: &mut Vec<f32>,
    ) -> std::result::Result<(), ModelError> {
        self.prepare(rows, states)?;
        logits.clear();
        let rows_taken = std::mem::take(&mut self.rows);
        let mut result = Ok(());
        for chunk in rows_taken.chunks(self.model.max_rows()) {
            let r = if chunk.len() <= GRAPH_ROWS {
                self.model.forward_graphed(chunk, &mut self.part)
            } else {
                self.model.forward(chunk, &mut self.part)
            };
            if let Err(e) = r {
                result = Err(backend(e));
                break;
            }
            logits.extend_from_slice(&self.part);
        }
        self.rows = rows_taken;
        result?;
        for r in rows {
            states[r.stream].len = r.pos + 1;
        }
        Ok(())
    }

    fn candidate_capacity(&self) -> usize {
        self.selection_capacity()
    }

    fn forward_candidates(
        &mut self,
        rows: &[Row],
        states: &mut [&mut StreamState],
        wants: &[RowWant],
        candidates: &mut Vec<RowCandidates>,
    ) -> std::result::Result<(), ModelError> {
        self.select_round(rows, states, wants, candidates)
    }

    fn candidate_row(
        &mut self,
        k: usize,
        out: &mut Vec<f32>,
    ) -> std::result::Result<(), ModelError> {
        self.kept_row(k, out)
    }

    fn candidate_logits(
        &mut self,
        k: usize,
        ids: &[u32],
        out: &mut Vec<f32>,
    ) -> std::result::Result<(), ModelError> {
        self.kept_logits(k, ids, out)
    }

    fn host_copy(&mut self, state: &StreamState) -> std::result::Result<StreamState, ModelError> {
        let Some(slot) = &state.device else {
            return Ok(state.clone());
        };
        self.model.gpu().bind_to_thread().map_err(backend)?;
        let mut kv = Vec::with_capacity(self.shape.kv.len());
        for (l, &(h, d)) in self.shape.kv.iter().enumerate() {
            let (k, v) = self
                .model
                .read_kv(slot.id(), l, state.len)
                .map_err(backend)?;
            let mut layer = LayerKv::with_capacity(h, d, state.len)?;
            layer.append(&k, &v)?;
            kv.push(layer);
        }
        let mut mamba = Vec::with_capacity(self.shape.mamba_layers);
        for l in 0..self.shape.mamba_layers {
            let (conv, ssm) = self.model.read_mamba(slot.id(), l).map_err(backend)?;
            mamba.push(MambaState { conv, ssm });
        }
        let mut copy = StreamState::new(KvCache::from_layers(kv), mamba);
        copy.len = state.len;
        Ok(copy)
    }
}
