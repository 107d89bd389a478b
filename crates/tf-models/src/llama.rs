//! The dense llama-style forward (llama, mistral, qwen2, qwen3) over batched rows.
//!
//! Per layer: RMSNorm → q/k/v projections (+bias) → per-head q/k norm (qwen3) → RoPE at each
//! row's absolute position → append k, v to the row's stream → attention over that stream's keys
//! 0..=pos → output projection → residual; RMSNorm → SwiGLU MLP → residual. Then the final norm
//! and the head for the rows that want logits.

use crate::error::ModelError;
use crate::model::{check_rows, Model, ModelInfo, Row, StreamState};
use crate::weights::{matrix, vector};
use std::sync::Arc;
use tf_families::llama::{LlamaConfig, LlamaPlan, RopeScaling as PlanRopeScaling};
use tf_formats::checkpoint::Checkpoint;
use tf_kernels::matmul::{embedding_row, matmul, PackedMatrix};
use tf_kernels::ops::{
    add_inplace, attend_heads, rms_norm, rms_norm_inplace, silu_mul, AttnParams, AttnScratch,
    KvCache, Rope, RopeAngles, RopeConfig, RopePairing, RopeScaling,
};
use tf_kernels::pool::Pool;

/// One decoder layer's weights, borrowed from the checkpoint's memory map.
struct Layer<'a> {
    attn_norm: Vec<f32>,
    q: PackedMatrix<'a>,
    k: PackedMatrix<'a>,
    v: PackedMatrix<'a>,
    o: PackedMatrix<'a>,
    qkv_bias: Option<[Vec<f32>; 3]>,
    o_bias: Option<Vec<f32>>,
    qk_norm: Option<[Vec<f32>; 2]>,
    mlp_norm: Vec<f32>,
    gate: PackedMatrix<'a>,
    up: PackedMatrix<'a>,
    down: PackedMatrix<'a>,
    mlp_bias: Option<[Vec<f32>; 3]>,
    /// Sliding-window width when this layer attends through one.
    window: Option<usize>,
}

/// Buffers of one round, grown to the largest round seen and reused.
#[derive(Default)]
struct Workspace {
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    o: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    act: Vec<f32>,
    last: Vec<f32>,
    angles: Vec<RopeAngles>,
    scratch: Vec<AttnScratch>,
}

fn sized(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    buf.resize(len, 0.0);
    &mut buf[..len]
}

/// A loaded llama-style model.
pub struct Llama {
    // Field order matters: `layers`, `embed` and `head` borrow from `_checkpoint`, and fields
    // drop in declaration order, so they go first.
    layers: Vec<Layer<'static>>,
    embed: PackedMatrix<'static>,
    head: PackedMatrix<'static>,
    final_norm: Vec<f32>,
    cfg: LlamaConfig,
    rope: Rope,
    attn: AttnParams,
    eps: f32,
    info: ModelInfo,
    pool: Pool,
    ws: Workspace,
    _checkpoint: Arc<Checkpoint>,
}

/// The kernels' RoPE scaling for the config's (shared by every backend).
pub fn rope_scaling(s: &Option<PlanRopeScaling>) -> RopeScaling {
    match *s {
        None => RopeScaling::None,
        Some(PlanRopeScaling::Linear { factor }) => RopeScaling::Linear { factor },
        Some(PlanRopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        }) => RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings: original_max_position_embeddings as usize,
        },
        Some(PlanRopeScaling::Yarn {
            factor,
            original_max_position_embeddings,
            beta_fast,
            beta_slow,
            mscale,
            mscale_all_dim,
            attention_factor,
        }) => RopeScaling::Yarn {
            factor,
            beta_fast,
            beta_slow,
            mscale: Some(mscale),
            mscale_all_dim: Some(mscale_all_dim),
            attention_factor,
            original_max_position_embeddings: original_max_position_embeddings.unwrap_or(4096)
                as usize,
            truncate: true,
        },
    }
}

impl Llama {
    /// Builds the model over a validated plan; weights stay in the checkpoint's memory map.
    pub fn new(
        checkpoint: Arc<Checkpoint>,
        plan: &LlamaPlan,
        threads: usize,
    ) -> Result<Llama, ModelError> {
        // SAFETY: the checkpoint lives in an Arc owned by the returned model and is never
        // mutated; its memory map does not move. Every borrow made here is stored in fields
        // that are dropped before `_checkpoint` (declaration order).
        let ck: &'static Checkpoint = unsafe { &*Arc::as_ptr(&checkpoint) };
        let cfg = plan.config.clone();
        let three = |e: &Option<[tf_formats::TensorEntry; 3]>| -> Result<Option<[Vec<f32>; 3]>, ModelError> {
            e.as_ref()
                .map(|[a, b, c]| Ok([vector(ck, a)?, vector(ck, b)?, vector(ck, c)?]))
                .transpose()
        };
        let mut layers = Vec::with_capacity(plan.layers.len());
        for (li, l) in plan.layers.iter().enumerate() {
            let sliding = cfg.layer_sliding.get(li).copied().unwrap_or(false);
            layers.push(Layer {
                attn_norm: vector(ck, &l.input_layernorm)?,
                q: matrix(ck, &l.q_proj)?,
                k: matrix(ck, &l.k_proj)?,
                v: matrix(ck, &l.v_proj)?,
                o: matrix(ck, &l.o_proj)?,
                qkv_bias: three(&l.qkv_bias)?,
                o_bias: l.o_bias.as_ref().map(|e| vector(ck, e)).transpose()?,
                qk_norm: l
                    .qk_norm
                    .as_ref()
                    .map(|[a, b]| Ok::<_, ModelError>([vector(ck, a)?, vector(ck, b)?]))
                    .transpose()?,
                mlp_norm: vector(ck, &l.post_attention_layernorm)?,
                gate: matrix(ck, &l.gate_proj)?,
                up: matrix(ck, &l.up_proj)?,
                down: matrix(ck, &l.down_proj)?,
                mlp_bias: three(&l.mlp_bias)?,
                window: cfg.sliding_window.filter(|_| sliding).map(|w| w as usize),
            });
        }
        let embed = matrix(ck, &plan.embed_tokens)?;
        let head = match &plan.lm_head {
            Some(e) => matrix(ck, e)?,
            None => embed,
        };
        let head_dim = cfg.head_dim as usize;
        // GGUF stores q/k rows permuted for adjacent-pair rotation; MLX configs may ask for it.
        let pairing = if ck.gguf_rope_permuted() || cfg.rope_traditional {
            RopePairing::Interleaved
        } else {
            RopePairing::Half
        };
        let rope = Rope::new(RopeConfig {
            head_dim,
            rotary_dim: head_dim,
            theta: cfg.rope_theta,
            pairing,
            scaling: rope_scaling(&cfg.rope_scaling),
        })?;
        let attn = AttnParams {
            n_heads: cfg.num_attention_heads as usize,
            n_kv_heads: cfg.num_key_value_heads as usize,
            head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
            window: None,
            softcap: None,
        };
        let kv_width = attn.n_kv_heads * head_dim;
        let weight_bytes = layers
            .iter()
            .map(|l| {
                [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]
                    .iter()
                    .map(|m| m.storage_bytes())
                    .sum::<usize>()
            })
            .sum::<usize>()
            + embed.storage_bytes()
            + if plan.lm_head.is_some() {
                head.storage_bytes()
            } else {
                0
            };
        let info = ModelInfo {
            family: "llama",
            vocab_size: head.rows(),
            context: cfg.max_position_embeddings.unwrap_or(4096) as usize,
            state_bytes_per_token: 2 * kv_width * 4 * layers.len(),
            weight_bytes,
        };
        Ok(Llama {
            final_norm: vector(ck, &plan.norm)?,
            eps: cfg.rms_norm_eps as f32,
            layers,
            embed,
            head,
            cfg,
            rope,
            attn,
            info,
            pool: Pool::new(threads.max(1)),
            ws: Workspace::default(),
            _checkpoint: checkpoint,
        })
    }
}

/// Raw pointer to disjoint output ranges written by pool tasks.
struct RowsOut(*mut f32);
// SAFETY: tasks write disjoint row ranges of a buffer that outlives the pool call.
unsafe impl Sync for RowsOut {}

impl RowsOut {
    /// The `len` elements from `start`.
    ///
    /// # Safety
    /// The range must be inside the buffer, and no two live slices may overlap: each task takes
    /// its own ranges.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, start: usize, len: usize) -> &mut [f32] {
        std::slice::from_raw_parts_mut(self.0.add(start), len)
    }
}

impl Model for Llama {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn new_state(&self) -> StreamState {
        let kv = KvCache::new(self.layers.len(), self.attn.n_kv_heads, self.attn.head_dim)
            .expect("validated attention shape");
        StreamState {
            kv,
            len: 0,
            mamba: Vec::new(),
            device: None,
        }
    }

    fn forward(
        &mut self,
        rows: &[Row],
        states: &mut [&mut StreamState],
        logits: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        let n = rows.len();
        let hidden = self.cfg.hidden_size as usize;
        let (nh, nkv, hd) = (self.attn.n_heads, self.attn.n_kv_heads, self.attn.head_dim);
        let ffn = self.cfg.intermediate_size as usize;
        let vocab = self.info.vocab_size;
        check_rows(rows, states, vocab, self.info.context)?;
        let ws = &mut self.ws;
        let pool = &self.pool;

        let x = sized(&mut ws.x, n * hidden);
        for (r, xr) in rows.iter().zip(x.chunks_exact_mut(hidden)) {
            embedding_row(&self.embed, r.token as usize, xr)?;
        }
        ws.angles.resize_with(n, RopeAngles::default);
        for (r, a) in rows.iter().zip(ws.angles.iter_mut()) {
            self.rope.angles_into(r.pos, a);
        }
        if ws.scratch.len() < pool.threads() {
            ws.scratch.resize_with(pool.threads(), AttnScratch::new);
        }

        for (li, l) in self.layers.iter().enumerate() {
            let h = sized(&mut ws.h, n * hidden);
            rms_norm(&ws.x, &l.attn_norm, self.eps, n, h)?;
            let q = sized(&mut ws.q, n * nh * hd);
            matmul(&l.q, h, n, q, pool)?;
            let k = sized(&mut ws.k, n * nkv * hd);
            matmul(&l.k, h, n, k, pool)?;
            let v = sized(&mut ws.v, n * nkv * hd);
            matmul(&l.v, h, n, v, pool)?;
            if let Some([bq, bk, bv]) = &l.qkv_bias {
                add_rows(q, bq);
                add_rows(k, bk);
                add_rows(v, bv);
            }
            if let Some([gq, gk]) = &l.qk_norm {
                rms_norm_inplace(q, gq, self.eps, n * nh)?;
                rms_norm_inplace(k, gk, self.eps, n * nkv)?;
            }
            for (i, a) in ws.angles.iter().enumerate() {
                self.rope
                    .apply_angles(&mut q[i * nh * hd..(i + 1) * nh * hd], nh, a)?;
                self.rope
                    .apply_angles(&mut k[i * nkv * hd..(i + 1) * nkv * hd], nkv, a)?;
            }
            for (i, r) in rows.iter().enumerate() {
                let kv = states[r.stream].kv.layer_mut(li).expect("layer count");
                let w = nkv * hd;
                kv.append(&k[i * w..(i + 1) * w], &v[i * w..(i + 1) * w])?;
            }
            let attn_out = sized(&mut ws.attn, n * nh * hd);
            let params = AttnParams {
                window: l.window,
                ..self.attn.clone()
            };
            attend_rows(
                rows,
                states,
                li,
                q,
                attn_out,
                &params,
                &mut ws.scratch,
                pool,
            )?;
            let o = sized(&mut ws.o, n * hidden);
            matmul(&l.o, attn_out, n, o, pool)?;
            if let Some(b) = &l.o_bias {
                add_rows(o, b);
            }
            add_inplace(&mut ws.x, o)?;

            let h = sized(&mut ws.h, n * hidden);
            rms_norm(&ws.x, &l.mlp_norm, self.eps, n, h)?;
            let g = sized(&mut ws.gate, n * ffn);
            matmul(&l.gate, h, n, g, pool)?;
            let u = sized(&mut ws.up, n * ffn);
            matmul(&l.up, h, n, u, pool)?;
            if let Some([bg, bu, _]) = &l.mlp_bias {
                add_rows(g, bg);
                add_rows(u, bu);
            }
            let act = sized(&mut ws.act, n * ffn);
            silu_mul(g, u, act)?;
            let o = sized(&mut ws.o, n * hidden);
            matmul(&l.down, act, n, o, pool)?;
            if let Some([_, _, bd]) = &l.mlp_bias {
                add_rows(o, bd);
            }
            add_inplace(&mut ws.x, o)?;
        }
        for r in rows {
            states[r.stream].len = r.pos + 1;
        }

        let picked: Vec<usize> = (0..n).filter(|&i| rows[i].logits).collect();
        let m = picked.len();
        let last = sized(&mut ws.last, m * hidden);
        for (j, &i) in picked.iter().enumerate() {
            rms_norm(
                &ws.x[i * hidden..(i + 1) * hidden],
                &self.final_norm,
                self.eps,
                1,
                &mut last[j * hidden..(j + 1) * hidden],
            )?;
        }
        logits.resize(m * vocab, 0.0);
        matmul(&self.head, last, m, &mut logits[..m * vocab], pool)?;
        Ok(())
    }
}

/// Adds `bias` to every row of `x`.
fn add_rows(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (a, b) in row.iter_mut().zip(bias) {
            *a += b;
        }
    }
}

/// Attention for every row, its (row, head) units spread over the pool in contiguous ranges, so a
/// lone decode row still uses every thread; each row reads only its own stream, and each head is
/// computed the same way whatever range it falls in.
#[allow(clippy::too_many_arguments)]
fn attend_rows(
    rows: &[Row],
    states: &[&mut StreamState],
    layer: usize,
    q: &[f32],
    out: &mut [f32],
    params: &AttnParams,
    scratch: &mut [AttnScratch],
    pool: &Pool,
) -> Result<(), ModelError> {
    let (nh, hd) = (params.n_heads, params.head_dim);
    let w = nh * hd;
    let units = rows.len() * nh;
    let tasks = pool.threads().min(units);
    let out_ptr = RowsOut(out.as_mut_ptr());
    let scratch_ptr = scratch.as_mut_ptr() as usize;
    let errors = std::sync::Mutex::new(None);
    pool.run(tasks, |t| {
        // SAFETY: task t owns scratch[t] and the output heads of units
        // t*units/tasks..(t+1)*units/tasks, disjoint from every other task's.
        let s = unsafe { &mut *(scratch_ptr as *mut AttnScratch).add(t) };
        let (mut u, end) = (t * units / tasks, (t + 1) * units / tasks);
        while u < end {
            let (i, h0) = (u / nh, u % nh);
            let h1 = nh.min(h0 + end - u);
            let r = &rows[i];
            let cache = states[r.stream].kv.layer(layer).expect("layer count");
            let o = unsafe { out_ptr.slice((i * nh + h0) * hd, (h1 - h0) * hd) };
            let q_row = &q[i * w..(i + 1) * w];
            if let Err(e) = attend_heads(q_row, cache, r.pos, params, h0..h1, o, s) {
                *errors.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            }
            u += h1 - h0;
        }
    });
    match errors.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
