//! The Muse Spark text forward over batched rows (float32 throughout, mlx-lm's semantics with its
//! two forced bf16 roundings left out; see docs/families/muse_spark.md).
//!
//! `h = x * inv_rms(x)` of the token embedding (no gain), then per layer:
//! 1. `a = rms_norm(h, input_gain)`; q, k, v, gate projections (HF q/k outputs permuted into
//!    MLX's interleaved order); per head `q = (q * inv_rms(q)) * qk_scale`, `k = k * inv_rms(k)`
//!    (no weights); RoPE with adjacent pairs at the *global* theta on layers whose
//!    `layer_rope_theta` is non-zero (as mlx-lm and transformers do); append k, v.
//! 2. Attention over the stream's keys in ascending position (`lo..=pos`, `lo = pos + 1 - window`
//!    on sliding layers), scale `1/sqrt(head_dim)`; per head `o = (o * inv_rms(o)) * sigmoid(g)`;
//!    `r = o_proj(o)`.
//! 3. `h = alpha_attn * h + beta_attn * (r * inv_rms(r))` (post-norm eps).
//! 4. `r = moe(rms_norm(h, pre_ffn_gain))`; `v = post_ffn_gain * r`;
//!    `h = alpha_ffn * h + beta_ffn * (v * inv_rms(v))`.
//!
//! Then `logits = softcap(lm_head(rms_norm(h, final_gain)) * output_multiplier)`.
//!
//! The KV cache keeps every position of every layer (sliding layers too), and attention reads a
//! fixed key range per absolute position, so chunked prefill equals token-by-token decode past
//! the window's wrap.

mod moe;
mod weights;

pub use moe::Picks;

use crate::error::ModelError;
use crate::model::{check_rows, Model, ModelInfo, Row, StreamState};
use crate::weights::{matrix, vector};
use moe::{MoeScratch, Routing};
use std::sync::Arc;
use tf_families::muse_spark::{MuseForm, MuseSparkConfig, MuseSparkPlan};
use tf_formats::checkpoint::Checkpoint;
use tf_kernels::matmul::{embedding_row, matmul, PackedMatrix};
use tf_kernels::ops::{
    attend, exp, rms_norm, rms_norm_inplace, softcap_inplace, AttnParams, AttnScratch, KvCache,
    Rope, RopeAngles, RopeConfig, RopePairing, RopeScaling,
};
use tf_kernels::pool::Pool;
use weights::{AttnWeights, LayerWeights};

/// Buffers of one round, grown to the largest round seen.
#[derive(Default)]
struct Workspace {
    x: Vec<f32>,
    a: Vec<f32>,
    qkvg: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    tmp: Vec<f32>,
    attn: Vec<f32>,
    r: Vec<f32>,
    last: Vec<f32>,
    angles: Vec<RopeAngles>,
    scratch: AttnScratch,
    moe: MoeScratch,
}

fn sized(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    buf.resize(len, 0.0);
    &mut buf[..len]
}

/// A loaded Muse Spark text model.
pub struct MuseSpark {
    // Borrowed views first: they drop before `_checkpoint` (declaration order).
    layers: Vec<LayerWeights<'static>>,
    embed: PackedMatrix<'static>,
    head: PackedMatrix<'static>,
    final_gain: Vec<f32>,
    cfg: MuseSparkConfig,
    form: MuseForm,
    rope: Rope,
    attn: AttnParams,
    routing: Routing,
    ones_hidden: Vec<f32>,
    ones_head: Vec<f32>,
    info: ModelInfo,
    pool: Pool,
    ws: Workspace,
    _checkpoint: Arc<Checkpoint>,
}

impl MuseSpark {
    /// Builds the model over a validated plan; weights stay in the checkpoint's memory map.
    pub fn new(
        checkpoint: Arc<Checkpoint>,
        plan: &MuseSparkPlan,
        threads: usize,
    ) -> Result<MuseSpark, ModelError> {
        // SAFETY: the checkpoint lives in an Arc owned by the returned model and is never
        // mutated; every borrow made here is stored in fields dropped before `_checkpoint`.
        let ck: &'static Checkpoint = unsafe { &*Arc::as_ptr(&checkpoint) };
        let cfg = plan.config.clone();
        let layers = plan
            .layers
            .iter()
            .map(|l| weights::layer(ck, &cfg, plan.form, l))
            .collect::<Result<Vec<_>, _>>()?;
        let embed = matrix(ck, &plan.embed_tokens)?;
        let head = matrix(ck, &plan.lm_head)?;
        let head_dim = cfg.head_dim as usize;
        let rope = Rope::new(RopeConfig {
            head_dim,
            rotary_dim: head_dim,
            theta: cfg.rope_theta,
            pairing: RopePairing::Interleaved,
            scaling: RopeScaling::None,
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
        let weight_bytes = layers.iter().map(weights::layer_bytes).sum::<usize>()
            + embed.storage_bytes()
            + head.storage_bytes();
        let info = ModelInfo {
            family: "muse_spark",
            vocab_size: head.rows(),
            context: cfg.max_position_embeddings.unwrap_or(4096) as usize,
            state_bytes_per_token: 2 * kv_width * 4 * layers.len(),
            weight_bytes,
        };
        let routing = Routing {
            top_k: cfg.num_experts_per_tok as usize,
            multiplier: cfg.output_multiplier as f32,
            scale: cfg.routed_scaling_factor as f32,
        };
        Ok(MuseSpark {
            final_gain: vector(ck, &plan.norm)?,
            ones_hidden: vec![1.0; cfg.hidden_size as usize],
            ones_head: vec![1.0; head_dim],
            layers,
            embed,
            head,
            form: plan.form,
            cfg,
            rope,
            attn,
            routing,
            info,
            pool: Pool::new(threads.max(1)),
            ws: Workspace::default(),
            _checkpoint: checkpoint,
        })
    }

    /// The on-disk form the weights were read from.
    pub fn form(&self) -> MuseForm {
        self.form
    }

    /// The router's picks for the last round's rows in the last layer (diagnostics).
    pub fn last_picks(&self) -> &[Picks] {
        &self.ws.moe.picks
    }
}

/// `x * inv_rms(x)` per row of width `ones.len()`, no gain.
fn plain_norm(x: &[f32], ones: &[f32], eps: f32, out: &mut [f32]) -> Result<(), ModelError> {
    rms_norm(x, ones, eps, x.len() / ones.len(), out)?;
    Ok(())
}

/// `1 / (1 + exp(-x))` with the contract `exp`.
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// HF q/k head rows pair `(i, i + d/2)`; MLX's pair `(2i, 2i + 1)`. Moves element
/// `t * d/2 + i` of each head to `2i + t`.
fn interleave_heads(x: &mut [f32], head_dim: usize, tmp: &mut Vec<f32>) {
    let half = head_dim / 2;
    tmp.resize(head_dim, 0.0);
    for head in x.chunks_exact_mut(head_dim) {
        for i in 0..half {
            tmp[2 * i] = head[i];
            tmp[2 * i + 1] = head[half + i];
        }
        head.copy_from_slice(&tmp[..head_dim]);
    }
}

/// `h = alpha * h + beta * (v * inv_rms(v))` per row, `v` overwritten by the normed branch.
fn gated_add(
    h: &mut [f32],
    v: &mut [f32],
    (alpha, beta): &(Vec<f32>, Vec<f32>),
    ones: &[f32],
    eps: f32,
) -> Result<(), ModelError> {
    rms_norm_inplace(v, ones, eps, v.len() / ones.len())?;
    for (hr, vr) in h
        .chunks_exact_mut(ones.len())
        .zip(v.chunks_exact(ones.len()))
    {
        for (((s, &n), &a), &b) in hr.iter_mut().zip(vr).zip(alpha).zip(beta) {
            *s = a * *s + b * n;
        }
    }
    Ok(())
}

impl Model for MuseSpark {
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
        let c = &self.cfg;
        let hidden = c.hidden_size as usize;
        let (nh, nkv, hd) = (self.attn.n_heads, self.attn.n_kv_heads, self.attn.head_dim);
        let (qw, kw) = (nh * hd, nkv * hd);
        let eps = c.rms_norm_eps as f32;
        let post_eps = c.post_norm_eps as f32;
        let qk_scale = c.qk_scale_factor as f32;
        let vocab = self.info.vocab_size;
        check_rows(rows, states, vocab, self.info.context)?;
        let ws = &mut self.ws;
        let pool = &self.pool;

        let a = sized(&mut ws.a, n * hidden);
        for (r, ar) in rows.iter().zip(a.chunks_exact_mut(hidden)) {
            embedding_row(&self.embed, r.token as usize, ar)?;
        }
        let x = sized(&mut ws.x, n * hidden);
        plain_norm(a, &self.ones_hidden, eps, x)?;
        ws.angles.resize_with(n, RopeAngles::default);
        for (r, an) in rows.iter().zip(ws.angles.iter_mut()) {
            self.rope.angles_into(r.pos, an);
        }

        for (li, l) in self.layers.iter().enumerate() {
            let a = sized(&mut ws.a, n * hidden);
            rms_norm(&ws.x, &l.input_gain, eps, n, a)?;
            let (q, k, v, g) = (
                sized(&mut ws.q, n * qw),
                sized(&mut ws.k, n * kw),
                sized(&mut ws.v, n * kw),
                sized(&mut ws.g, n * qw),
            );
            match &l.attn {
                AttnWeights::Fused(m) => {
                    let width = 2 * (qw + kw);
                    let all = sized(&mut ws.qkvg, n * width);
                    matmul(m, a, n, all, pool)?;
                    for (i, row) in all.chunks_exact(width).enumerate() {
                        q[i * qw..(i + 1) * qw].copy_from_slice(&row[..qw]);
                        k[i * kw..(i + 1) * kw].copy_from_slice(&row[qw..qw + kw]);
                        v[i * kw..(i + 1) * kw].copy_from_slice(&row[qw + kw..qw + 2 * kw]);
                        g[i * qw..(i + 1) * qw].copy_from_slice(&row[qw + 2 * kw..]);
                    }
                }
                AttnWeights::Separate(ms) => {
                    let [mq, mk, mv, mg] = &**ms;
                    matmul(mq, a, n, q, pool)?;
                    matmul(mk, a, n, k, pool)?;
                    matmul(mv, a, n, v, pool)?;
                    matmul(mg, a, n, g, pool)?;
                    interleave_heads(q, hd, &mut ws.tmp);
                    interleave_heads(k, hd, &mut ws.tmp);
                }
            }
            rms_norm_inplace(q, &self.ones_head, eps, n * nh)?;
            for e in q.iter_mut() {
                *e *= qk_scale;
            }
            rms_norm_inplace(k, &self.ones_head, eps, n * nkv)?;
            if l.rope {
                for (i, an) in ws.angles.iter().enumerate() {
                    self.rope
                        .apply_angles(&mut q[i * qw..(i + 1) * qw], nh, an)?;
                    self.rope
                        .apply_angles(&mut k[i * kw..(i + 1) * kw], nkv, an)?;
                }
            }
            for (i, r) in rows.iter().enumerate() {
                let cache = states[r.stream].kv.layer_mut(li).expect("layer count");
                cache.append(&k[i * kw..(i + 1) * kw], &v[i * kw..(i + 1) * kw])?;
            }
            let params = AttnParams {
                window: l.sliding.then_some(c.sliding_window as usize),
                ..self.attn.clone()
            };
            let out = sized(&mut ws.attn, n * qw);
            for (i, r) in rows.iter().enumerate() {
                let cache = states[r.stream].kv.layer(li).expect("layer count");
                attend(
                    &q[i * qw..(i + 1) * qw],
                    cache,
                    r.pos,
                    &params,
                    &mut out[i * qw..(i + 1) * qw],
                    &mut ws.scratch,
                )?;
            }
            rms_norm_inplace(out, &self.ones_head, eps, n * nh)?;
            for (o, &gv) in out.iter_mut().zip(g.iter()) {
                *o *= sigmoid(gv);
            }
            let r = sized(&mut ws.r, n * hidden);
            matmul(&l.o_proj, out, n, r, pool)?;
            gated_add(&mut ws.x, r, &l.attn_gate, &self.ones_hidden, post_eps)?;

            let a = sized(&mut ws.a, n * hidden);
            rms_norm(&ws.x, &l.pre_ffn_gain, eps, n, a)?;
            let r = sized(&mut ws.r, n * hidden);
            moe::moe(l, a, n, &self.routing, eps, post_eps, r, &mut ws.moe, pool)?;
            for row in r.chunks_exact_mut(hidden) {
                for (e, &w) in row.iter_mut().zip(&l.post_ffn_gain) {
                    *e *= w;
                }
            }
            gated_add(&mut ws.x, r, &l.ffn_gate, &self.ones_hidden, post_eps)?;
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
                &self.final_gain,
                eps,
                1,
                &mut last[j * hidden..(j + 1) * hidden],
            )?;
        }
        logits.resize(m * vocab, 0.0);
        let out = &mut logits[..m * vocab];
        matmul(&self.head, last, m, out, pool)?;
        let mult = c.output_multiplier as f32;
        for e in out.iter_mut() {
            *e *= mult;
        }
        softcap_inplace(out, c.final_logit_softcapping as f32)?;
        Ok(())
    }
}
