//! Nemotron-H and Nemotron Puzzle on the GPU (hybrid Mamba2 / attention / relu² MLP / latent
//! MoE), over rounds of rows from any number of stream slots, with the CPU forward's arithmetic
//! (`tf_models::nemotron_h`) kernel for kernel.
//!
//! Per layer: `h = rms_norm(x)`, `o = mixer(h)`, `x = x + o`; then the final norm and the head
//! (each `x = x + o` launched with the norm after it).
//! A round is uploaded once (tokens, slots, positions); the launches then read only device
//! buffers, so the sequence for a row count can be captured as a CUDA graph and replayed. Each
//! slot holds a KV cache per attention layer and a conv + SSM state per Mamba layer; a row at
//! position 0 starts its slot afresh (so [`GpuNemotronH::reset_slot`] needs no device work).

mod layers;
mod mixers;
#[cfg(test)]
mod tests;

pub use crate::llama::GpuRow;

use crate::device::{Gpu, L2_STREAM};
use crate::error::{CudaError, Result};
use crate::graphs::{check_rows, wanted_logits, Graphs};
use crate::kv::GpuKv;
use crate::l2;
use crate::load;
use crate::mamba::{GpuMambaState, MambaShape};
use crate::mma::{self, SplitX};
use crate::moe::{MoeBuffers, MoeLimits};
use crate::ops::{self, GpuRows};
use crate::weights::GpuMatrix;
use cudarc::driver::CudaSlice;
use layers::{build_layer, preflight, Layer, Mixer};
use tf_families::nemotron_h::{NemotronBlock, NemotronHPlan};
use tf_formats::checkpoint::Checkpoint;

/// Device buffers of a round, allocated once for `max_rows`.
struct Workspace {
    tokens: CudaSlice<i32>,
    x: CudaSlice<f32>,
    /// Where a wide norm writes x's sum (then swapped with `x`: [`norm_into_h`]).
    x_next: CudaSlice<f32>,
    h: CudaSlice<f32>,
    /// `h` split for the tensor cores' products by the norm that writes it (`None`:
    /// with `TF_CUDA_MMA_SPLIT=0`, or a hidden size the split does not take).
    hs: Option<SplitX>,
    o: CudaSlice<f32>,
    /// Mamba `in_proj` rows `[z | xBC | dt]`.
    proj: CudaSlice<f32>,
    xbc: CudaSlice<f32>,
    y: CudaSlice<f32>,
    yn: CudaSlice<f32>,
    q: CudaSlice<f32>,
    k: CudaSlice<f32>,
    v: CudaSlice<f32>,
    attn: CudaSlice<f32>,
    /// MLP / shared expert intermediate rows, before and after relu².
    up: CudaSlice<f32>,
    act: CudaSlice<f32>,
    /// Router logits.
    gates: CudaSlice<f32>,
    /// Latent rows (fc1 output) and the combined expert rows.
    latent: CudaSlice<f32>,
    combined: CudaSlice<f32>,
    /// A one-token round's latent row split, beside fc1, for the experts' up product
    /// ([`moe::experts`]); `None` as `hs` is, or without routed experts.
    latent_split: Option<SplitX>,
    /// `yn` split for out_proj by a wide gated norm (rounds of at most
    /// [`ops::WIDE_NORM_ROWS`] rows); `None` as `hs` is, or without Mamba layers.
    yns: Option<SplitX>,
    /// A one-token round's shared expert relu² output split, for its down product on capped
    /// blocks (`mixers::shared_cap`); `None` as `hs` is, or without MLP rows.
    acts: Option<SplitX>,
    /// Shared expert output.
    shared: CudaSlice<f32>,
    logits: CudaSlice<f32>,
}

/// Widest buffers any layer needs (per row).
#[derive(Debug, Default, Clone, Copy)]
struct Widths {
    proj: usize,
    conv: usize,
    inner: usize,
    q: usize,
    kv: usize,
    mlp: usize,
    experts: usize,
    top_k: usize,
    expert_dim: usize,
    expert_inter: usize,
}

impl Widths {
    fn of(blocks: &[NemotronBlock], hidden: usize) -> Widths {
        let mut w = Widths::default();
        for b in blocks {
            match b {
                NemotronBlock::Mamba(s) => {
                    let sh = mamba_shape(s);
                    w.proj = w.proj.max(sh.proj_width());
                    w.conv = w.conv.max(sh.conv_dim());
                    w.inner = w.inner.max(sh.inner());
                }
                NemotronBlock::Attention(a) => {
                    w.q = w.q.max((a.num_heads * a.head_dim) as usize);
                    w.kv = w.kv.max((a.num_kv_heads * a.head_dim) as usize);
                }
                NemotronBlock::Mlp(m) => w.mlp = w.mlp.max(m.intermediate_size as usize),
                NemotronBlock::Moe(m) => {
                    w.experts = w.experts.max(m.n_routed_experts as usize);
                    w.top_k = w.top_k.max(m.num_experts_per_tok as usize);
                    w.expert_dim = w.expert_dim.max(m.expert_dim(hidden as u64) as usize);
                    w.expert_inter = w.expert_inter.max(m.moe_intermediate_size as usize);
                    w.mlp = w.mlp.max(m.shared_intermediate_size.unwrap_or(0) as usize);
                }
            }
        }
        w
    }
}

/// What the last mixer left to add to the residual x.
#[derive(Clone, Copy)]
enum Pending {
    /// Nothing (x is the embedding).
    Nothing,
    /// Its output `o`.
    Output,
    /// Its output and the shared expert's, `o + shared`.
    OutputAndShared,
}

/// `h = rms_norm(x)`, first adding to `x` what the last mixer left (`pending`); a wide norm
/// ([`ops::residual_rms_norm_wide`]) writes that sum to `x_next`, which then becomes `x`.
fn norm_into_h(
    g: &Gpu,
    pending: Pending,
    ws: &mut Workspace,
    gain: &CudaSlice<f32>,
    eps: f32,
    n: usize,
) -> Result<()> {
    let res = match pending {
        Pending::Nothing => ops::Residual::None,
        Pending::Output => ops::Residual::Add(&ws.o),
        Pending::OutputAndShared => ops::Residual::AddSum(&ws.o, &ws.shared),
    };
    let wide = ops::wide_norm_blocks(gain.len(), n);
    let (Some(split), Some(blocks)) = (ws.hs.as_mut(), wide) else {
        return ops::residual_rms_norm(g, &mut ws.x, res, gain, eps, n, &mut ws.h, ws.hs.as_mut());
    };
    let (x, next) = (&ws.x, &mut ws.x_next);
    ops::residual_rms_norm_wide(g, x, next, res, gain, eps, n, &mut ws.h, split, blocks)?;
    if !matches!(res, ops::Residual::None) {
        std::mem::swap(&mut ws.x, &mut ws.x_next);
    }
    Ok(())
}

fn mamba_shape(s: &tf_families::nemotron_h::MambaSpec) -> MambaShape {
    MambaShape {
        heads: s.num_heads as usize,
        head_dim: s.head_dim as usize,
        groups: s.n_groups as usize,
        state: s.ssm_state_size as usize,
        kernel: s.conv_kernel as usize,
    }
}

/// A Nemotron-H / Puzzle model resident on the GPU with state for `slots` streams.
pub struct GpuNemotronH {
    gpu: Gpu,
    layers: Vec<Layer>,
    embed: GpuMatrix,
    head: Option<GpuMatrix>,
    final_norm: CudaSlice<f32>,
    eps: f32,
    vocab: usize,
    /// One KV pool per attention layer (each pool's layer 0).
    kvs: Vec<GpuKv>,
    /// The pool rows are checked against (the first attention layer's, or a stand-in).
    check_kv: Option<GpuKv>,
    mamba: GpuMambaState,
    moe: Option<MoeBuffers>,
    rows: GpuRows,
    ws: Workspace,
    lens: Vec<usize>,
    max_rows: usize,
    capacity: usize,
    weight_bytes: usize,
    graphs: Graphs,
}

impl GpuNemotronH {
    /// Uploads the plan's weights in their stored layouts, allocates KV and Mamba state for
    /// `slots` streams of `capacity` positions, and workspaces for rounds of up to `max_rows`.
    /// Refuses by name, before any upload, what has no CUDA path (a weight format, routed
    /// experts without a grouped matmul, an attention shape beyond the kernel).
    pub fn new(
        gpu: Gpu,
        ck: &Checkpoint,
        plan: &NemotronHPlan,
        slots: usize,
        capacity: usize,
        max_rows: usize,
    ) -> Result<GpuNemotronH> {
        preflight(ck, plan)?;
        let cfg = &plan.config;
        let hidden = cfg.hidden_size as usize;
        let eps = cfg.layer_norm_epsilon as f32;
        let limit = gpu.info().smem_per_block;
        for block in &cfg.layers {
            let NemotronBlock::Attention(a) = block else {
                continue;
            };
            let hd = a.head_dim as usize;
            let att = ops::attend_launch_smem(capacity, hd, limit);
            if att > limit || hd > 128 {
                return Err(CudaError::Shape {
                    op: "nemotron_h",
                    detail: format!("attention over {capacity} positions of head_dim {hd} needs {att} bytes of shared memory per block (limit {limit}, head_dim <= 128)"),
                });
            }
        }
        let (mut n_mamba, mut kv_shapes, mut mamba_shapes) = (0, Vec::new(), Vec::new());
        let mut layers = Vec::with_capacity(plan.layers.len());
        for (lp, block) in plan.layers.iter().zip(&cfg.layers) {
            layers.push(build_layer(
                &gpu,
                ck,
                lp,
                block,
                hidden,
                n_mamba,
                kv_shapes.len(),
            )?);
            match block {
                NemotronBlock::Mamba(s) => {
                    n_mamba += 1;
                    mamba_shapes.push(mamba_shape(s));
                }
                NemotronBlock::Attention(a) => {
                    kv_shapes.push((a.num_kv_heads as usize, a.head_dim as usize))
                }
                _ => {}
            }
        }
        let embed = load::matrix(&gpu, ck, &plan.embeddings)?;
        let head = plan
            .lm_head
            .as_ref()
            .map(|e| load::matrix(&gpu, ck, e))
            .transpose()?;
        let vocab = head.as_ref().unwrap_or(&embed).rows();
        let mut kvs = Vec::with_capacity(kv_shapes.len());
        for &(h, d) in &kv_shapes {
            kvs.push(GpuKv::new(&gpu, slots, 1, capacity, h, d)?);
        }
        let check_kv = if kvs.is_empty() {
            Some(GpuKv::new(&gpu, slots, 1, capacity, 1, 1)?)
        } else {
            None
        };
        let n = max_rows.max(1);
        let w = Widths::of(&cfg.layers, hidden);
        let moe = if w.experts > 0 {
            Some(MoeBuffers::new(
                &gpu,
                MoeLimits {
                    max_rows: n,
                    max_top_k: w.top_k,
                    max_experts: w.experts,
                    max_dim: w.expert_dim,
                    max_inter: w.expert_inter,
                },
            )?)
        } else {
            None
        };
        let ws = Workspace {
            tokens: gpu.zeros(n)?,
            x: gpu.zeros(n * hidden)?,
            x_next: gpu.zeros(n * hidden)?,
            h: gpu.zeros(n * hidden)?,
            hs: match mma::split_enabled() && hidden.is_multiple_of(mma::GROUP) {
                true => Some(SplitX::new(&gpu, n, hidden)?),
                false => None,
            },
            o: gpu.zeros(n * hidden)?,
            proj: gpu.zeros(n * w.proj)?,
            xbc: gpu.zeros(n * w.conv)?,
            y: gpu.zeros(n * w.inner)?,
            yn: gpu.zeros(n * w.inner)?,
            q: gpu.zeros(n * w.q)?,
            k: gpu.zeros(n * w.kv)?,
            v: gpu.zeros(n * w.kv)?,
            attn: gpu.zeros(n * w.q)?,
            up: gpu.zeros(n * w.mlp)?,
            act: gpu.zeros(n * w.mlp)?,
            gates: gpu.zeros(n * w.experts)?,
            latent: gpu.zeros(n * w.expert_dim)?,
            combined: gpu.zeros(n * w.expert_dim)?,
            latent_split: match mma::split_enabled()
                && w.experts > 0
                && w.expert_dim.is_multiple_of(mma::GROUP)
            {
                true => Some(SplitX::new(&gpu, 1, w.expert_dim)?),
                false => None,
            },
            yns: match mma::split_enabled() && w.inner > 0 && w.inner.is_multiple_of(mma::GROUP) {
                true => Some(SplitX::new(&gpu, n.min(ops::WIDE_NORM_ROWS), w.inner)?),
                false => None,
            },
            acts: match mma::split_enabled() && w.mlp > 0 && w.mlp.is_multiple_of(mma::GROUP) {
                true => Some(SplitX::new(&gpu, 1, w.mlp)?),
                false => None,
            },
            shared: gpu.zeros(n * hidden)?,
            logits: gpu.zeros(n * vocab)?,
        };
        let weight_bytes = layers.iter().map(Layer::weight_bytes).sum::<usize>()
            + embed.storage_bytes()
            + head.as_ref().map_or(0, GpuMatrix::storage_bytes);
        Ok(GpuNemotronH {
            mamba: GpuMambaState::new(&gpu, slots, &mamba_shapes)?,
            rows: GpuRows::new(&gpu, n)?,
            final_norm: load::vector(&gpu, ck, &plan.norm_f)?,
            lens: vec![0; slots],
            gpu,
            layers,
            embed,
            head,
            eps,
            vocab,
            kvs,
            check_kv,
            moe,
            ws,
            max_rows: n,
            capacity,
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
        self.vocab
    }

    /// Positions per slot.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes of weights on the device (every matrix once; the tied head once).
    pub fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    /// Device bytes of one slot's recurrent (Mamba) state, a fixed cost per stream.
    pub fn mamba_state_bytes_per_slot(&self) -> usize {
        self.mamba.bytes_per_slot()
    }

    /// Slot `slot`'s current length (its next row's position).
    pub fn slot_len(&self, slot: usize) -> Option<usize> {
        self.lens.get(slot).copied()
    }

    /// The captured round graphs' edges: (programmatic, all).
    pub fn graph_edges(&self) -> (usize, usize) {
        self.graphs.edges()
    }

    /// Drops the captured round graphs (see [`crate::leave_out`]).
    pub fn clear_graphs(&mut self) {
        self.graphs.clear();
    }

    /// Forgets slot `slot`'s tokens: its next row is at position 0, which starts the Mamba
    /// state from zero; the KV is overwritten.
    pub fn reset_slot(&mut self, slot: usize) {
        if let Some(l) = self.lens.get_mut(slot) {
            *l = 0;
        }
    }

    /// Stream slots.
    pub fn slots(&self) -> usize {
        self.lens.len()
    }

    /// Most rows one round takes.
    pub fn max_rows(&self) -> usize {
        self.max_rows
    }

    /// Attention layers (KV caches per slot), in layer order.
    pub fn attention_layers(&self) -> usize {
        self.kvs.len()
    }

    /// Mamba layers (recurrent states per slot), in layer order.
    pub fn mamba_layers(&self) -> usize {
        self.mamba.layers()
    }

    /// Sets slot `slot`'s length, restoring a stream whose KV ([`write_kv`](Self::write_kv))
    /// and Mamba state ([`write_mamba`](Self::write_mamba)) at that length were written. The
    /// Mamba state is not rewound: to drop tokens use [`truncate_slot`](Self::truncate_slot).
    pub fn set_slot_len(&mut self, slot: usize, len: usize) -> Result<()> {
        match self.lens.get_mut(slot) {
            Some(l) if len <= self.capacity => {
                *l = len;
                Ok(())
            }
            _ => Err(CudaError::Param {
                op: "nemotron_h slot",
                what: "slot length",
                value: len as f64,
                why: "no such slot, or longer than the slot's capacity",
            }),
        }
    }

    fn kv(&self, layer: usize) -> Result<&GpuKv> {
        self.kvs.get(layer).ok_or(CudaError::Param {
            op: "nemotron_h kv",
            what: "attention layer",
            value: layer as f64,
            why: "beyond the model's attention layers",
        })
    }

    /// Writes attention layer `layer` (counted among attention layers) of `slot` from position
    /// 0 (whole positions, position-major, as the CPU's `LayerKv` holds them).
    pub fn write_kv(&mut self, slot: usize, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        self.kv(layer)?;
        self.kvs[layer].write_layer(&self.gpu, slot, 0, k, v)
    }

    /// The keys and values of attention layer `layer` of `slot` at positions `0..len`.
    pub fn read_kv(&self, slot: usize, layer: usize, len: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        self.kv(layer)?.read_layer(&self.gpu, slot, 0, len)
    }

    /// Writes Mamba layer `layer`'s state of `slot` (conv `(kernel-1) × conv_dim` oldest
    /// first, SSM `[heads][head_dim][state]`: the CPU's `MambaState`).
    pub fn write_mamba(
        &mut self,
        slot: usize,
        layer: usize,
        conv: &[f32],
        ssm: &[f32],
    ) -> Result<()> {
        self.mamba.write(&self.gpu, slot, layer, conv, ssm)
    }

    /// Mamba layer `layer`'s state of `slot`: (conv, SSM), as [`write_mamba`](Self::write_mamba)
    /// takes them. A slot whose last row was at position 0 holds the state after that row.
    pub fn read_mamba(&self, slot: usize, layer: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        self.mamba.read(&self.gpu, slot, layer)
    }

    /// Keeps the first `len` tokens of slot `slot`, as the CPU's `StreamState::truncate` does
    /// for this family: the recurrent state has no history, so fewer tokens than held restart
    /// the slot (length 0) — unless the model has no Mamba layer, when the KV prefix is kept;
    /// `len` at or beyond the held length changes nothing. Returns the slot's length after the
    /// call (`None`: no such slot).
    pub fn truncate_slot(&mut self, slot: usize, len: usize) -> Option<usize> {
        let recurrent = self.mamba.layers() > 0;
        let held = self.lens.get_mut(slot)?;
        if len < *held {
            *held = if recurrent { 0 } else { len };
        }
        Some(*held)
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
        if ran.is_err() {
            // The failed round's joins did not all run: none is owed to the next round.
            self.gpu.forget_forks();
        }
        ran?;
        for r in rows {
            self.lens[r.slot] = r.pos + 1;
        }
        wanted_logits(&self.gpu, &self.ws.logits, rows, self.vocab, logits)
    }

    /// Checks the rows (each continues its slot, in order; tokens in the vocabulary) and
    /// uploads tokens, slots and positions.
    fn upload_round(&mut self, rows: &[GpuRow]) -> Result<()> {
        const OP: &str = "nemotron_h round";
        check_rows(
            "nemotron_h round",
            &self.lens,
            rows,
            self.max_rows,
            self.embed.rows(),
        )?;
        let slots: Vec<usize> = rows.iter().map(|r| r.slot).collect();
        let pos: Vec<usize> = rows.iter().map(|r| r.pos).collect();
        let kv = self
            .kvs
            .first()
            .or(self.check_kv.as_ref())
            .ok_or_else(|| CudaError::Shape {
                op: OP,
                detail: "no pool to check rows against".into(),
            })?;
        self.rows.set(&self.gpu, kv, &slots, &pos)?;
        let tokens: Vec<i32> = rows.iter().map(|r| r.token as i32).collect();
        self.gpu.write(&tokens, &mut self.ws.tokens)
    }

    /// The round's launches for `n` rows; reads only device buffers (capturable).
    fn launch_all(&mut self, n: usize) -> Result<()> {
        let g = &self.gpu;
        let ws = &mut self.ws;
        ops::embed(g, &self.embed, &ws.tokens, n, &mut ws.x)?;
        // A layer's residual add is launched with the next norm (the final one after the last).
        let mut pending = Pending::Nothing;
        let sites = l2::Sites::for_rows(n);
        for l in &self.layers {
            // This layer's first products, during its norm.
            if sites.next {
                l2::prefetch(g, &l.first_products(l2::IN_PROJ_HEAD))?;
            }
            norm_into_h(g, pending, ws, &l.norm, self.eps, n)?;
            pending = Pending::Output;
            match &l.mixer {
                Mixer::Mamba(m) => {
                    mixers::mamba(g, m, &mut self.mamba, &self.rows, self.eps, n, ws)?
                }
                Mixer::Attention(a) => {
                    let kv = self
                        .kvs
                        .get_mut(a.kv_index)
                        .ok_or_else(|| CudaError::Shape {
                            op: "nemotron_h",
                            detail: format!("no KV pool {}", a.kv_index),
                        })?;
                    mixers::attention(g, a, kv, &self.rows, n, ws)?
                }
                Mixer::Mlp(m) => mixers::mlp(g, m, n, ws)?,
                Mixer::Moe(m) => {
                    let buf = self.moe.as_mut().ok_or_else(|| CudaError::Shape {
                        op: "nemotron_h",
                        detail: "no MoE buffers".into(),
                    })?;
                    mixers::moe(g, m, buf, n, ws)?;
                    if m.shared.is_some() {
                        pending = Pending::OutputAndShared;
                    }
                }
            }
        }
        norm_into_h(g, pending, ws, &self.final_norm, self.eps, n)?;
        let head = self.head.as_ref().unwrap_or(&self.embed);
        ops::matmul_of(g, head, &ws.h, ws.hs.as_ref(), n, &mut ws.logits)?;
        g.join_side(L2_STREAM)
    }
}
