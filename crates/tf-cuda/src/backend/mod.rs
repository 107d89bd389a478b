//! The CUDA backend behind the engine's [`Model`] trait, so `serve`, `run`, `score` and `bench`
//! drive the GPU forward exactly as they drive the CPU's.
//!
//! Each stream's KV lives in a device slot ([`DeviceSlot`]) taken on the stream's first round
//! and given back when its state is dropped; the host side of a [`StreamState`] stays empty.
//! [`Model::host_copy`] downloads a slot (what the prompt cache retains), and a host state
//! (a resumed prefix) is uploaded into a free slot on its next round. Truncation (a rejected
//! draft) only moves the slot's length: the positions past it are overwritten by later rows.

use crate::device::Gpu;
use crate::error::CudaError;
use crate::llama::{GpuLlama, GpuRow};
use std::sync::{Arc, Mutex};
use tf_families::ModelPlan;
use tf_formats::checkpoint::Checkpoint;
use tf_kernels::ops::{KvCache, LayerKv};
use tf_models::{check_rows, DeviceSlot, Model, ModelError, ModelInfo, Row, StreamState};

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

/// Opens the GPU and uploads the planned checkpoint, refusing by name (before any upload) a
/// family without a CUDA path and a model that does not fit in free device memory.
pub fn load(
    ck: &Checkpoint,
    plan: &ModelPlan,
    opts: &CudaOptions,
) -> Result<Box<dyn Model>, CudaError> {
    let ModelPlan::Llama(p) = plan else {
        return Err(CudaError::UnsupportedFamily {
            family: plan.family().to_string(),
        });
    };
    let gpu = Gpu::open(opts.ordinal)?;
    let cfg = &p.config;
    let own = cfg.max_position_embeddings.unwrap_or(4096) as usize;
    let context = opts.context.map_or(own, |c| c.min(own)).max(1);
    let layers = p.layers.len();
    let (kv_heads, hd) = (cfg.num_key_value_heads as usize, cfg.head_dim as usize);
    let slots = opts.slots.max(1);
    let weights: u64 = ck
        .entries()
        .iter()
        .map(|e| e.format.storage_bytes(e.elements()))
        .sum();
    let kv = (slots * layers * context * kv_heads * hd * 8) as u64;
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
    let model = GpuLlama::new(gpu, ck, p, slots, context, opts.max_rows)?;
    let info = ModelInfo {
        family: "llama",
        vocab_size: model.vocab_size(),
        context,
        state_bytes_per_token: 2 * kv_heads * hd * 4 * layers,
        weight_bytes: model.weight_bytes(),
    };
    Ok(Box::new(CudaLlama {
        free: Arc::new(Mutex::new((0..slots).rev().collect())),
        model,
        info,
        shape: (layers, kv_heads, hd),
        rows: Vec::new(),
        part: Vec::new(),
    }))
}

fn backend(e: CudaError) -> ModelError {
    ModelError::Backend {
        backend: "cuda",
        message: e.to_string(),
    }
}

/// A llama-style model on the GPU behind the engine's trait.
struct CudaLlama {
    model: GpuLlama,
    info: ModelInfo,
    free: Arc<Mutex<Vec<usize>>>,
    /// (layers, kv heads, head dim) of the host-side KV copies.
    shape: (usize, usize, usize),
    rows: Vec<GpuRow>,
    part: Vec<f32>,
}

// SAFETY: the model is used by one thread at a time (the engine moves it into its scheduler
// thread), and every call first makes the device context current on the calling thread.
unsafe impl Send for CudaLlama {}

impl CudaLlama {
    fn empty_kv(&self) -> KvCache {
        let (layers, kv_heads, hd) = self.shape;
        KvCache::new(layers, kv_heads, hd).expect("validated attention shape")
    }

    /// Gives `state` a device slot holding its tokens (uploading a host state) and sets the
    /// slot's length to the state's.
    fn make_resident(&mut self, state: &mut StreamState) -> Result<usize, ModelError> {
        if state.device.is_none() {
            let slot = DeviceSlot::take(&self.free).ok_or_else(|| ModelError::Backend {
                backend: "cuda",
                message: format!(
                    "every one of the {} device stream slots is in use",
                    self.model.slots()
                ),
            })?;
            for l in 0..self.shape.0 {
                let layer = state.kv.layer(l).ok_or_else(|| ModelError::Backend {
                    backend: "cuda",
                    message: format!("host state has no KV layer {l}"),
                })?;
                if layer.len() != state.len {
                    return Err(ModelError::Backend {
                        backend: "cuda",
                        message: format!(
                            "host state holds {} positions in layer {l} but claims {}",
                            layer.len(),
                            state.len
                        ),
                    });
                }
                self.model
                    .write_kv(slot.id(), l, layer.keys(), layer.values())
                    .map_err(backend)?;
            }
            state.kv = self.empty_kv();
            state.device = Some(slot);
        }
        let slot = state.device.as_ref().map_or(0, DeviceSlot::id);
        self.model.set_slot_len(slot, state.len).map_err(backend)?;
        Ok(slot)
    }
}

impl Model for CudaLlama {
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
    ) -> Result<(), ModelError> {
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

    fn host_copy(&mut self, state: &StreamState) -> Result<StreamState, ModelError> {
        let Some(slot) = &state.device else {
            return Ok(state.clone());
        };
        self.model.gpu().bind_to_thread().map_err(backend)?;
        let (layers, kv_heads, hd) = self.shape;
        let mut kv = Vec::with_capacity(layers);
        for l in 0..layers {
            let (k, v) = self
                .model
                .read_kv(slot.id(), l, state.len)
                .map_err(backend)?;
            let mut layer = LayerKv::with_capacity(kv_heads, hd, state.len)?;
            layer.append(&k, &v)?;
            kv.push(layer);
        }
        let mut copy = StreamState::new(KvCache::from_layers(kv), Vec::new());
        copy.len = state.len;
        Ok(copy)
    }
}
