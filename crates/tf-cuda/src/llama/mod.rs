//! The llama-style decoder (llama, mistral, qwen2, qwen3) on the GPU, over rounds of rows from any
//! number of stream slots, with the CPU forward's arithmetic kernel for kernel. Projection biases
//! and per-head q/k norms run as extra launches ([`extra`]) only in models that have them.
//!
//! A round is uploaded once (tokens, slots, positions, RoPE angles computed on the host by the
//! same `Rope` the CPU uses), then a fixed sequence of launches reads only device buffers — so
//! the sequence for a given row count can be captured as a CUDA graph and replayed.

pub mod extra;
mod profile;

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::fused::{
    fused_smem_bytes, matmul_fused, matmul_norm_rope_append, rope_append, Epilogue, RopeAppend,
    XForm,
};
use crate::graphs::{check_rows, wanted_logits, Graphs};
use crate::kv::GpuKv;
use crate::load;
use crate::ops::{self, AttnShape, GpuRows, Pairing};
use crate::weights::GpuMatrix;
use cudarc::driver::CudaSlice;
use extra::LayerExtras;
use tf_families::llama::LlamaPlan;
use tf_formats::checkpoint::Checkpoint;
use tf_kernels::ops::{Rope, RopeAngles, RopeConfig, RopePairing};

/// One kind of launch in a decode step (for profiling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Token embedding rows.
    Embed,
    /// `[q|k|v]` projection with the input norm, then its biases and per-head q/k norms when
    /// the model has them (every layer); without those (and with full rotary), RoPE and the KV
    /// append too, as the projection's epilogue.
    Qkv,
    /// RoPE and KV append (every layer whose projection does not do them).
    RopeAppend,
    /// Attention (every layer).
    Attend,
    /// Output projection with the residual add (and its bias before it) (every layer).
    O,
    /// `[gate|up]` projection with the MLP norm and SwiGLU out (with biases: stored and biased,
    /// the SwiGLU left to Down) (every layer).
    GateUp,
    /// Down projection with the residual add (and its bias before it) (every layer).
    Down,
    /// Final norm and the head.
    Head,
}

impl Stage {
    /// Every stage, in step order.
    pub const ALL: &'static [Stage] = &[
        Stage::Embed,
        Stage::Qkv,
        Stage::RopeAppend,
        Stage::Attend,
        Stage::O,
        Stage::GateUp,
        Stage::Down,
        Stage::Head,
    ];
}

/// One token of one stream slot in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuRow {
    /// The stream's KV slot.
    pub slot: usize,
    /// Absolute position (must equal the slot's current length).
    pub pos: usize,
    /// Token id.
    pub token: u32,
    /// Whether the caller wants this row's logits.
    pub logits: bool,
}

impl GpuRow {
    /// Token `token` of slot `slot` at position `pos`, its logits wanted.
    pub fn wanted(slot: usize, pos: usize, token: u32) -> GpuRow {
        GpuRow {
            slot,
            pos,
            token,
            logits: true,
        }
    }
}

struct Layer {
    attn_norm: CudaSlice<f32>,
    /// `[q | k | v]` rows in one matrix.
    qkv: GpuMatrix,
    o: GpuMatrix,
    mlp_norm: CudaSlice<f32>,
    /// `[gate | up]` rows in one matrix.
    gate_up: GpuMatrix,
    down: GpuMatrix,
    /// Sliding-window width when this layer attends through one.
    window: Option<usize>,
    /// Biases and q/k norm gains (all `None` for plain llama).
    extra: LayerExtras,
}

/// Device buffers of a round, allocated once for `max_rows`.
struct Workspace {
    tokens: CudaSlice<i32>,
    cs: CudaSlice<f32>,
    x: CudaSlice<f32>,
    qkv: CudaSlice<f32>,
    attn: CudaSlice<f32>,
    gate_up: CudaSlice<f32>,
    logits: CudaSlice<f32>,
    /// An output or down projection stored apart before its bias and the residual add (only
    /// for models with those biases).
    proj: Option<CudaSlice<f32>>,
}

/// Sizes of the model.
#[derive(Debug, Clone, Copy)]
struct Dims {
    hidden: usize,
    ffn: usize,
    vocab: usize,
    rotary: usize,
}

/// A llama-style model resident on the GPU with KV slots for `slots` streams.
pub struct GpuLlama {
    gpu: Gpu,
    layers: Vec<Layer>,
    embed: GpuMatrix,
    head: Option<GpuMatrix>,
    final_norm: CudaSlice<f32>,
    rope: Rope,
    pairing: Pairing,
    shape: AttnShape,
    eps: f32,
    dims: Dims,
    kv: GpuKv,
    rows: GpuRows,
    ws: Workspace,
    lens: Vec<usize>,
    max_rows: usize,
    weight_bytes: usize,
    graphs: Graphs,
}

impl GpuLlama {
    /// Uploads the plan's weights in their stored layouts and allocates KV for `slots` streams of
    /// `capacity` positions and workspaces for rounds of up to `max_rows` rows.
    pub fn new(
        gpu: Gpu,
        ck: &Checkpoint,
        plan: &LlamaPlan,
        slots: usize,
        capacity: usize,
        max_rows: usize,
    ) -> Result<GpuLlama> {
        let cfg = &plan.config;
        let extras = extra::host_extras(ck, plan)?;
        let needs_proj = extras.iter().any(|e| e.needs_scratch());
        let hd = cfg.head_dim as usize;
        let pairing = if ck.gguf_rope_permuted() || cfg.rope_traditional {
            RopePairing::Interleaved
        } else {
            RopePairing::Half
        };
        let rope = Rope::new(RopeConfig {
            head_dim: hd,
            rotary_dim: hd,
            theta: cfg.rope_theta,
            pairing,
            scaling: tf_models::rope_scaling(&cfg.rope_scaling),
        })
        .map_err(|e| CudaError::Shape {
            op: "rope",
            detail: e.to_string(),
        })?;
        let mut layers = Vec::with_capacity(plan.layers.len());
        for ((li, l), host) in plan.layers.iter().enumerate().zip(&extras) {
            let sliding = cfg.layer_sliding.get(li).copied().unwrap_or(false);
            layers.push(Layer {
                extra: LayerExtras::upload(&gpu, host)?,
                window: cfg.sliding_window.filter(|_| sliding).map(|w| w as usize),
                attn_norm: load::vector(&gpu, ck, &l.input_layernorm)?,
                qkv: load::matrices(&gpu, ck, &[&l.q_proj, &l.k_proj, &l.v_proj])?,
                o: load::matrix(&gpu, ck, &l.o_proj)?,
                mlp_norm: load::vector(&gpu, ck, &l.post_attention_layernorm)?,
                gate_up: load::matrices(&gpu, ck, &[&l.gate_proj, &l.up_proj])?,
                down: load::matrix(&gpu, ck, &l.down_proj)?,
            });
        }
        let embed = load::matrix(&gpu, ck, &plan.embed_tokens)?;
        let head = plan
            .lm_head
            .as_ref()
            .map(|e| load::matrix(&gpu, ck, e))
            .transpose()?;
        let shape = AttnShape {
            heads: cfg.num_attention_heads as usize,
            kv_heads: cfg.num_key_value_heads as usize,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            window: None,
        };
        let dims = Dims {
            hidden: cfg.hidden_size as usize,
            ffn: cfg.intermediate_size as usize,
            vocab: head.as_ref().unwrap_or(&embed).rows(),
            rotary: hd,
        };
        let weight_bytes = layers
            .iter()
            .map(|l| {
                [&l.qkv, &l.o, &l.gate_up, &l.down]
                    .iter()
                    .map(|m| m.storage_bytes())
                    .sum::<usize>()
            })
            .sum::<usize>()
            + head.as_ref().unwrap_or(&embed).storage_bytes();
        let kv = GpuKv::new(&gpu, slots, layers.len(), capacity, shape.kv_heads, hd)?;
        let (n, qw, kw) = (max_rows.max(1), shape.heads * hd, shape.kv_heads * hd);
        let ws = Workspace {
            tokens: gpu.zeros(n)?,
            cs: gpu.zeros(n * dims.rotary)?,
            x: gpu.zeros(n * dims.hidden)?,
            qkv: gpu.zeros(n * (qw + 2 * kw))?,
            attn: gpu.zeros(n * qw)?,
            gate_up: gpu.zeros(n * 2 * dims.ffn)?,
            logits: gpu.zeros(n * dims.vocab)?,
            proj: needs_proj.then(|| gpu.zeros(n * dims.hidden)).transpose()?,
        };
        // Refuse now (not at the first round) a shape the fused kernels cannot take.
        let limit = gpu.info().smem_per_block;
        let att = ops::attend_launch_smem(capacity, hd, limit);
        if att > limit || hd > 128 {
            return Err(CudaError::Shape { op: "llama", detail: format!("attention over {capacity} positions of head_dim {hd} needs {att} bytes of shared memory per block (limit {limit}, head_dim <= 128)") });
        }
        for l in &layers {
            for m in [&l.qkv, &l.o, &l.gate_up, &l.down] {
                if fused_smem_bytes(m) > limit {
                    return Err(CudaError::Shape {
                        op: "llama",
                        detail: format!(
                            "a [{}, {}] {:?} projection needs {} bytes of shared memory per block",
                            m.rows(),
                            m.cols(),
                            m.format(),
                            fused_smem_bytes(m)
                        ),
                    });
                }
            }
        }
        Ok(GpuLlama {
            rows: GpuRows::new(&gpu, n)?,
            final_norm: load::vector(&gpu, ck, &plan.norm)?,
            eps: cfg.rms_norm_eps as f32,
            pairing: if pairing == RopePairing::Interleaved {
                Pairing::Interleaved
            } else {
                Pairing::Half
            },
            lens: vec![0; slots],
            gpu,
            layers,
            embed,
            head,
            rope,
            shape,
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

    /// Bytes of weights one decode step reads (every matrix once; the tied head once).
    pub fn weight_bytes(&self) -> usize {
        self.weight_bytes
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
    /// rolled-back draft, a reused slot, KV written with [`GpuKv::write_layer`]).
    pub fn set_slot_len(&mut self, slot: usize, len: usize) -> Result<()> {
        let cap = self.kv.capacity();
        match self.lens.get_mut(slot) {
            Some(l) if len <= cap => {
                *l = len;
                Ok(())
            }
            _ => Err(CudaError::Param {
                op: "llama slot",
                what: "slot length",
                value: len as f64,
                why: "no such slot, or longer than the slot's capacity",
            }),
        }
    }

    /// Writes `layer` of `slot` from position 0 (whole positions, position-major), restoring
    /// a stream from the host; set the slot's length with [`set_slot_len`](Self::set_slot_len).
    pub fn write_kv(&mut self, slot: usize, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        self.kv.write_layer(&self.gpu, slot, layer, k, v)
    }

    /// The keys and values of `layer` of `slot` at positions `0..len`.
    pub fn read_kv(&self, slot: usize, layer: usize, len: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        self.kv.read_layer(&self.gpu, slot, layer, len)
    }

    /// The captured round graphs' edges: (programmatic, all).
    pub fn graph_edges(&self) -> (usize, usize) {
        self.graphs.edges()
    }

    /// Drops the captured round graphs (see [`crate::leave_out`]).
    pub fn clear_graphs(&mut self) {
        self.graphs.clear();
    }

    /// Forgets slot `slot`'s tokens (its KV is overwritten by the next rows).
    pub fn reset_slot(&mut self, slot: usize) {
        if let Some(l) = self.lens.get_mut(slot) {
            *l = 0;
        }
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
        // Logits of the rows that want them.
        wanted_logits(&self.gpu, &self.ws.logits, rows, self.dims.vocab, logits)
    }

    /// Checks the rows and uploads tokens, slots, positions and RoPE angles.
    fn upload_round(&mut self, rows: &[GpuRow]) -> Result<()> {
        check_rows(
            "llama round",
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
        let mut cs = Vec::with_capacity(rows.len() * self.dims.rotary);
        for r in rows {
            self.rope.angles_into(r.pos, &mut angles);
            cs.extend_from_slice(&angles.cos);
            cs.extend_from_slice(&angles.sin);
        }
        self.gpu.write(&cs, &mut self.ws.cs)
    }

    /// The round's launches for `n` rows; reads only device buffers (capturable). Five launches a
    /// layer: [q|k|v] with the input norm, RoPE and the KV append; attention; o with the residual
    /// add; [gate|up] with the MLP norm and SwiGLU; down with the residual add. A model with
    /// biases or q/k norms adds their launches ([`extra`]) after the projections they follow,
    /// and RoPE + KV append as a launch of its own after them.
    fn launch_all(&mut self, n: usize) -> Result<()> {
        self.launch_stages(n, Stage::ALL)
    }

    /// The launches of the stages in `stages` for `n` rows (every layer for layer stages).
    fn launch_stages(&mut self, n: usize, stages: &[Stage]) -> Result<()> {
        let has = |s: Stage| stages.contains(&s);
        let g = &self.gpu;
        let ws = &mut self.ws;
        let Dims {
            hidden,
            ffn,
            rotary,
            ..
        } = self.dims;
        let (nh, hd) = (self.shape.heads, self.shape.head_dim);
        if has(Stage::Embed) {
            ops::embed(g, &self.embed, &ws.tokens, n, &mut ws.x)?;
        }
        for (li, l) in self.layers.iter().enumerate() {
            // Without biases or q/k norms on [q|k|v] (and with full rotary), RoPE and the KV
            // append are the projection's epilogue: one launch, the same bits.
            let rope_fused =
                l.extra.qkv_bias.is_none() && l.extra.qk_norm.is_none() && rotary == hd;
            if has(Stage::Qkv) && rope_fused {
                let norm = XForm::Norm {
                    gain: &l.attn_norm,
                    eps: self.eps,
                };
                let at = RopeAppend {
                    cs: &ws.cs,
                    kv: &mut self.kv,
                    rows: &self.rows,
                    layer: li,
                    heads: nh,
                    pairing: self.pairing,
                };
                matmul_norm_rope_append(g, &l.qkv, &ws.x, norm, &mut ws.qkv, at)?;
            } else if has(Stage::Qkv) {
                let norm = XForm::Norm {
                    gain: &l.attn_norm,
                    eps: self.eps,
                };
                matmul_fused(
                    g,
                    &l.qkv,
                    &ws.x,
                    hidden,
                    norm,
                    Epilogue::Store,
                    n,
                    &mut ws.qkv,
                )?;
                // The CPU's order: biases on q, k, v, then the per-head norms, then RoPE.
                let heads = (nh, self.shape.kv_heads, hd);
                l.extra.after_qkv(g, &mut ws.qkv, self.eps, n, heads)?;
            }
            if has(Stage::RopeAppend) && !rope_fused {
                rope_append(
                    g,
                    &mut ws.qkv,
                    &ws.cs,
                    &mut self.kv,
                    &self.rows,
                    li,
                    nh,
                    rotary,
                    self.pairing,
                )?;
            }
            if has(Stage::Attend) {
                ops::attend_with(
                    g,
                    "tf_attend",
                    &ws.qkv,
                    l.qkv.rows(),
                    &self.kv,
                    &self.rows,
                    li,
                    &AttnShape {
                        window: l.window,
                        ..self.shape
                    },
                    &mut ws.attn,
                )?;
            }
            if has(Stage::O) {
                // Without a bias: x += o fused. With one: o stored, then x = x + (o + b).
                let bias = l.extra.o_bias.as_ref();
                let (epi, y) = extra::residual_out(bias, &mut ws.x, &mut ws.proj)?;
                matmul_fused(g, &l.o, &ws.attn, nh * hd, XForm::None, epi, n, y)?;
                extra::residual_bias(g, bias, &mut ws.x, &ws.proj, n)?;
            }
            if has(Stage::GateUp) {
                let norm = XForm::Norm {
                    gain: &l.mlp_norm,
                    eps: self.eps,
                };
                // Without a bias the SwiGLU is the matmul's epilogue (gate_up holds [n, ffn]);
                // with one, [gate | up] is stored, biased, and the down matmul takes SwiGLU in.
                let bias = l.extra.gate_up_bias.as_ref();
                let epi = if bias.is_some() {
                    Epilogue::Store
                } else {
                    Epilogue::SwiGlu
                };
                matmul_fused(g, &l.gate_up, &ws.x, hidden, norm, epi, n, &mut ws.gate_up)?;
                if let Some(b) = bias {
                    extra::bias_rows(g, &mut ws.gate_up, b, n)?;
                }
            }
            if has(Stage::Down) {
                let (xf, x_stride) = match l.extra.gate_up_bias {
                    Some(_) => (XForm::SiluMul, 2 * ffn),
                    None => (XForm::None, ffn),
                };
                let bias = l.extra.down_bias.as_ref();
                let (epi, y) = extra::residual_out(bias, &mut ws.x, &mut ws.proj)?;
                matmul_fused(g, &l.down, &ws.gate_up, x_stride, xf, epi, n, y)?;
                extra::residual_bias(g, bias, &mut ws.x, &ws.proj, n)?;
            }
        }
        if has(Stage::Head) {
            let head = self.head.as_ref().unwrap_or(&self.embed);
            let norm = XForm::Norm {
                gain: &self.final_norm,
                eps: self.eps,
            };
            matmul_fused(
                g,
                head,
                &ws.x,
                hidden,
                norm,
                Epilogue::Store,
                n,
                &mut ws.logits,
            )?;
        }
        Ok(())
    }
}
