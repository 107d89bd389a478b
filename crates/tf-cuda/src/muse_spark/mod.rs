//! Muse Spark on the GPU, over rounds of rows from any number of stream slots, with the CPU
//! forward's arithmetic (tf_models::muse_spark) kernel for kernel; see
//! docs/families/muse_spark.md for the model.
//!
//! A round is uploaded once (tokens, slots, positions, RoPE angles from the host's `Rope`), then a
//! fixed sequence of launches reads only device buffers — routing included (the experts are
//! picked, sorted and dispatched on the device) — so the sequence for a row count can be
//! captured as a CUDA graph and replayed. The KV cache keeps every position of every layer;
//! sliding layers read the window `pos + 1 - window ..= pos`, as on the CPU.

mod launch;
mod weights;

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::graphs::{check_rows, wanted_logits, Graphs};
use crate::kv::GpuKv;
use crate::llama::GpuRow;
use crate::moe::{MoeBuffers, MoeLimits, Routing};
use crate::ops::{self, AttnShape, GpuRows};
use crate::weights::GpuMatrix;
use cudarc::driver::CudaSlice;
use tf_families::muse_spark::MuseSparkPlan;
use tf_formats::checkpoint::Checkpoint;
use tf_kernels::ops::{Rope, RopeAngles, RopeConfig, RopePairing, RopeScaling};
use weights::Layer;

/// Sizes and constants of the model.
#[derive(Debug, Clone, Copy)]
struct Dims {
    hidden: usize,
    vocab: usize,
    /// Compressed expert width (`moe_hidden_size`).
    expert: usize,
    experts: usize,
    eps: f32,
    post_eps: f32,
    qk_scale: f32,
    window: usize,
    multiplier: f32,
    softcap: f32,
}

/// Device buffers of a round, allocated once for `max_rows`.
struct Workspace {
    tokens: CudaSlice<i32>,
    cs: CudaSlice<f32>,
    x: CudaSlice<f32>,
    a: CudaSlice<f32>,
    r: CudaSlice<f32>,
    rn: CudaSlice<f32>,
    qkvg: CudaSlice<f32>,
    q_raw: CudaSlice<f32>,
    q: CudaSlice<f32>,
    k_raw: CudaSlice<f32>,
    k: CudaSlice<f32>,
    v: CudaSlice<f32>,
    g: CudaSlice<f32>,
    attn: CudaSlice<f32>,
    o: CudaSlice<f32>,
    router: CudaSlice<f32>,
    comp: CudaSlice<f32>,
    normed: CudaSlice<f32>,
    comb: CudaSlice<f32>,
    logits: CudaSlice<f32>,
    ones_hidden: CudaSlice<f32>,
    ones_head: CudaSlice<f32>,
    moe: MoeBuffers,
}

/// A Muse Spark text model resident on the GPU with KV slots for `slots` streams.
pub struct GpuMuseSpark {
    gpu: Gpu,
    layers: Vec<Layer>,
    embed: GpuMatrix,
    head: GpuMatrix,
    final_gain: CudaSlice<f32>,
    rope: Rope,
    shape: AttnShape,
    routing: Routing,
    dims: Dims,
    kv: GpuKv,
    rows: GpuRows,
    ws: Workspace,
    lens: Vec<usize>,
    max_rows: usize,
    weight_bytes: usize,
    graphs: Graphs,
}

fn refuse(what: String) -> CudaError {
    CudaError::UnsupportedFormat {
        format: format!("muse_spark with {what} (no CUDA path yet)"),
    }
}

impl GpuMuseSpark {
    /// Uploads the plan's weights and allocates KV for `slots` streams of `capacity` positions
    /// and workspaces for rounds of up to `max_rows` rows. Refuses by name what the GPU path
    /// cannot run (weight formats without kernels, attention beyond shared memory).
    pub fn new(
        gpu: Gpu,
        ck: &Checkpoint,
        plan: &MuseSparkPlan,
        slots: usize,
        capacity: usize,
        max_rows: usize,
    ) -> Result<GpuMuseSpark> {
        let cfg = &plan.config;
        let hd = cfg.head_dim as usize;
        let limit = gpu.info().smem_per_block;
        let att = ops::attend_launch_smem(capacity, hd, limit);
        if att > limit || hd > 128 {
            return Err(refuse(format!(
                "attention over {capacity} positions of head_dim {hd} ({att} bytes of shared memory per block, limit {limit}, head_dim <= 128)"
            )));
        }
        let rope = Rope::new(RopeConfig {
            head_dim: hd,
            rotary_dim: hd,
            theta: cfg.rope_theta,
            pairing: RopePairing::Interleaved,
            scaling: RopeScaling::None,
        })
        .map_err(|e| CudaError::Shape {
            op: "rope",
            detail: e.to_string(),
        })?;
        let mut layers = Vec::with_capacity(plan.layers.len());
        for l in &plan.layers {
            layers.push(weights::upload(
                &gpu,
                &weights::host_layer(ck, cfg, plan.form, l)?,
            )?);
        }
        let embed = GpuMatrix::upload(&gpu, &weights::plain_matrix(ck, &plan.embed_tokens)?)?;
        let head = GpuMatrix::upload(&gpu, &weights::plain_matrix(ck, &plan.lm_head)?)?;
        let shape = AttnShape {
            heads: cfg.num_attention_heads as usize,
            kv_heads: cfg.num_key_value_heads as usize,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            window: None,
        };
        let dims = Dims {
            hidden: cfg.hidden_size as usize,
            vocab: head.rows(),
            expert: cfg.moe_hidden_size as usize,
            experts: cfg.num_local_experts as usize,
            eps: cfg.rms_norm_eps as f32,
            post_eps: cfg.post_norm_eps as f32,
            qk_scale: cfg.qk_scale_factor as f32,
            window: cfg.sliding_window as usize,
            multiplier: cfg.output_multiplier as f32,
            softcap: cfg.final_logit_softcapping as f32,
        };
        if !(dims.softcap.is_finite() && dims.softcap > 0.0) {
            return Err(refuse(format!("final_logit_softcapping {}", dims.softcap)));
        }
        let routing = Routing::Muse {
            n_experts: dims.experts,
            top_k: cfg.num_experts_per_tok as usize,
            multiplier: dims.multiplier,
            scale: cfg.routed_scaling_factor as f32,
        };
        routing.validate()?;
        let inter = layers.iter().map(|l| l.experts.inter()).max().unwrap_or(0);
        if let Some(l) = layers.iter().find(|l| {
            l.experts.n_experts() != dims.experts
                || l.experts.dim() != dims.expert
                || l.experts.out_dim() != dims.expert
        }) {
            return Err(CudaError::Shape {
                op: "muse_spark",
                detail: format!(
                    "{} experts of [{} -> {} -> {}] against the config's {} of width {}",
                    l.experts.n_experts(),
                    l.experts.dim(),
                    l.experts.inter(),
                    l.experts.out_dim(),
                    dims.experts,
                    dims.expert
                ),
            });
        }
        let weight_bytes = layers.iter().map(Layer::weight_bytes).sum::<usize>()
            + embed.storage_bytes()
            + head.storage_bytes();
        let kv = GpuKv::new(&gpu, slots, layers.len(), capacity, shape.kv_heads, hd)?;
        let n = max_rows.max(1);
        let (qw, kw, h) = (shape.heads * hd, shape.kv_heads * hd, dims.hidden);
        let z = |len: usize| gpu.zeros::<f32>(n * len);
        let ws = Workspace {
            tokens: gpu.zeros(n)?,
            cs: z(hd)?,
            x: z(h)?,
            a: z(h)?,
            r: z(h)?,
            rn: z(h)?,
            qkvg: z(2 * (qw + kw))?,
            q_raw: z(qw)?,
            q: z(qw)?,
            k_raw: z(kw)?,
            k: z(kw)?,
            v: z(kw)?,
            g: z(qw)?,
            attn: z(qw)?,
            o: z(qw)?,
            router: z(dims.experts)?,
            comp: z(dims.expert)?,
            normed: z(dims.expert)?,
            comb: z(dims.expert)?,
            logits: z(dims.vocab)?,
            ones_hidden: gpu.upload(&vec![1f32; h])?,
            ones_head: gpu.upload(&vec![1f32; hd])?,
            moe: MoeBuffers::new(
                &gpu,
                MoeLimits {
                    max_rows: n,
                    max_top_k: routing.top_k(),
                    max_experts: dims.experts,
                    max_dim: dims.expert,
                    max_inter: inter,
                },
            )?,
        };
        Ok(GpuMuseSpark {
            rows: GpuRows::new(&gpu, n)?,
            final_gain: gpu.upload(&weights::final_norm(ck, &plan.norm)?)?,
            lens: vec![0; slots],
            gpu,
            layers,
            embed,
            head,
            rope,
            shape,
            routing,
            dims,
            kv,
            ws,
            max_rows: n,
            weight_bytes,
            graphs: Graphs::default(),
        })
    }

    /// The device logits of the latest round (`[rows of the round, vocab]`, every row): the
    /// backend's candidate selection reads them in place.
    pub fn logits_device(&self) -> &CudaSlice<f32> {
        &self.ws.logits
    }

    /// The device.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// Rows of the logits.
    pub fn vocab_size(&self) -> usize {
        self.dims.vocab
    }

    /// Bytes of weight matrices held on the device.
    pub fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    /// Decoder layers (each with its own KV).
    pub fn layers(&self) -> usize {
        self.layers.len()
    }

    /// Stream slots.
    pub fn slots(&self) -> usize {
        self.lens.len()
    }

    /// Most rows one round takes.
    pub fn max_rows(&self) -> usize {
        self.max_rows
    }

    /// Sets slot `slot`'s length: positions from `len` on are overwritten by the next rows (a
    /// rolled-back draft, a reused slot, KV written with [`write_kv`](Self::write_kv)).
    pub fn set_slot_len(&mut self, slot: usize, len: usize) -> Result<()> {
        let cap = self.kv.capacity();
        match self.lens.get_mut(slot) {
            Some(l) if len <= cap => {
                *l = len;
                Ok(())
            }
            _ => Err(CudaError::Param {
                op: "muse_spark slot",
                what: "slot length",
                value: len as f64,
                why: "no such slot, or longer than the slot's capacity",
            }),
        }
    }

    /// Writes `layer` of `slot` from position 0 (whole positions, position-major; every
    /// position, sliding layers too, as the CPU's state holds them), restoring a stream from the
    /// host; set the slot's length with [`set_slot_len`](Self::set_slot_len).
    pub fn write_kv(&mut self, slot: usize, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        self.kv.write_layer(&self.gpu, slot, layer, k, v)
    }

    /// The keys and values of `layer` of `slot` at positions `0..len`.
    pub fn read_kv(&self, slot: usize, layer: usize, len: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        self.kv.read_layer(&self.gpu, slot, layer, len)
    }

    /// Forgets slot `slot`'s tokens (its KV is overwritten by the next rows).
    pub fn reset_slot(&mut self, slot: usize) {
        if let Some(l) = self.lens.get_mut(slot) {
            *l = 0;
        }
    }

    /// Picked experts `[rows, top_k]` and their weights in the last layer of the last round.
    pub fn last_picks(&self) -> Result<(Vec<i32>, Vec<f32>)> {
        self.ws.moe.picks_host(&self.gpu)
    }

    /// Runs one round with eager launches; `logits` gets `vocab` floats for every row with
    /// `logits == true`, in row order.
    pub fn forward(&mut self, rows: &[GpuRow], logits: &mut Vec<f32>) -> Result<()> {
        self.round(rows, logits, false)
    }

    /// [`forward`](Self::forward) through a CUDA graph captured (on first use) for this row
    /// count and replayed.
    pub fn forward_graphed(&mut self, rows: &[GpuRow], logits: &mut Vec<f32>) -> Result<()> {
        self.round(rows, logits, true)
    }

    fn round(&mut self, rows: &[GpuRow], logits: &mut Vec<f32>, graphed: bool) -> Result<()> {
        let n = rows.len();
        self.upload_round(rows)?;
        let mut graphs = std::mem::take(&mut self.graphs);
        let stream = self.gpu.stream().clone();
        let ran = graphs.run(stream, n, graphed, || self.launch_all(n));
        self.graphs = graphs;
        ran?;
        for r in rows {
            self.lens[r.slot] = r.pos + 1;
        }
        wanted_logits(&self.gpu, &self.ws.logits, rows, self.dims.vocab, logits)
    }

    /// Checks the rows and uploads tokens, slots, positions and RoPE angles.
    fn upload_round(&mut self, rows: &[GpuRow]) -> Result<()> {
        check_rows(
            "muse_spark round",
            &self.lens,
            rows,
            self.max_rows,
            self.embed.rows(),
        )?;
        let slots: Vec<usize> = rows.iter().map(|r| r.slot).collect();
        let pos: Vec<usize> = rows.iter().map(|r| r.pos).collect();
        self.rows.set(&self.gpu, &self.kv, &slots, &pos)?;
        let tokens: Vec<i32> = rows.iter().map(|r| r.token as i32).collect();
        self.gpu.write(&tokens, &mut self.ws.tokens)?;
        let mut angles = RopeAngles::default();
        let mut cs = Vec::with_capacity(rows.len() * self.shape.head_dim);
        for r in rows {
            self.rope.angles_into(r.pos, &mut angles);
            cs.extend_from_slice(&angles.cos);
            cs.extend_from_slice(&angles.sin);
        }
        self.gpu.write(&cs, &mut self.ws.cs)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod host_forward;
