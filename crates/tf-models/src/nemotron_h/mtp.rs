//! The Nemotron-H MTP (multi-token prediction) head: a draft source over the main model's
//! hidden states. See docs/families/nemotron_h.md (MTP).
//!
//! For a row at draft position `p` conditioned on hidden `h` (the main model's final-normed
//! residual at position `t`, or the head's own output when chaining) and the token `t+1`:
//!
//! ```text
//! x = eh_proj(cat(enorm(embed(token)), hnorm(h)))     // embedding columns first
//! x += mixer_i(norm_i(x))                              // each block of the step, in order
//! out = final_layernorm(x)                             // hidden_out (input of a chained step)
//! logits = lm_head(out)                                // the token at t+2
//! ```
//!
//! The head keeps its own per-stream state (KV of its attention blocks, conv/SSM state of its
//! Mamba blocks) in a [`StreamState`] of its own, indexed by draft position.

use super::layers::{build_layer, Layer, Mixer};
use super::mixers::{self, sized, Scratch};
use crate::error::ModelError;
use crate::model::{check_rows, Row, StreamState};
use crate::weights::{matrix, vector};
use tf_families::nemotron_h::{NemotronBlock, NemotronMtp};
use tf_formats::checkpoint::Checkpoint;
use tf_kernels::matmul::{embedding_row, matmul, PackedMatrix};
use tf_kernels::ops::{add_inplace, rms_norm, KvCache, LayerKv, MambaState};
use tf_kernels::pool::Pool;

/// The weights and buffers of the first MTP step (later stored steps are not used).
pub struct MtpHead<'a> {
    enorm: Vec<f32>,
    hnorm: Vec<f32>,
    /// `[hidden, 2·hidden]`.
    eh_proj: PackedMatrix<'a>,
    layers: Vec<Layer<'a>>,
    final_norm: Vec<f32>,
    /// (kv heads, head_dim) of each attention block, in order.
    kv_shapes: Vec<(usize, usize)>,
    hidden: usize,
    eps: f32,
    /// The step's pattern, e.g. "*E".
    pattern: String,
    /// Steps stored in the checkpoint.
    steps: usize,
    cat: Vec<f32>,
    emb: Vec<f32>,
    x: Vec<f32>,
    h: Vec<f32>,
    o: Vec<f32>,
    picked: Vec<f32>,
    scratch: Scratch,
}

impl<'a> MtpHead<'a> {
    /// Builds the head's first step from the plan.
    pub fn new(
        ck: &'a Checkpoint,
        plan: &NemotronMtp,
        hidden: usize,
        eps: f32,
    ) -> Result<MtpHead<'a>, ModelError> {
        let per = plan.blocks.len();
        let step = plan
            .sublayers
            .get(..per)
            .ok_or_else(|| ModelError::BadTensor {
                name: "mtp.layers.0".into(),
                why: format!("the plan holds fewer than {per} MTP blocks"),
            })?;
        let (mut n_mamba, mut kv_shapes, mut layers) = (0, Vec::new(), Vec::new());
        for (sub, block) in step.iter().zip(&plan.blocks) {
            layers.push(build_layer(
                ck,
                &sub.layer,
                block,
                hidden,
                n_mamba,
                kv_shapes.len(),
            )?);
            match block {
                NemotronBlock::Mamba(_) => n_mamba += 1,
                NemotronBlock::Attention(a) => {
                    kv_shapes.push((a.num_kv_heads as usize, a.head_dim as usize))
                }
                _ => {}
            }
        }
        let missing = |what: &str| ModelError::BadTensor {
            name: format!("mtp.layers.{what}"),
            why: "the MTP plan lacks it".into(),
        };
        let start = step[0].start.as_ref().ok_or_else(|| missing("0.eh_proj"))?;
        let end = step[per - 1]
            .final_norm
            .as_ref()
            .ok_or_else(|| missing(&format!("{}.final_layernorm", per - 1)))?;
        Ok(MtpHead {
            enorm: vector(ck, &start.enorm)?,
            hnorm: vector(ck, &start.hnorm)?,
            eh_proj: matrix(ck, &start.eh_proj)?,
            layers,
            final_norm: vector(ck, end)?,
            kv_shapes,
            hidden,
            eps,
            pattern: plan.blocks.iter().map(|b| b.symbol()).collect(),
            steps: plan.steps,
            cat: Vec::new(),
            emb: Vec::new(),
            x: Vec::new(),
            h: Vec::new(),
            o: Vec::new(),
            picked: Vec::new(),
            scratch: Scratch::default(),
        })
    }

    /// The step's block pattern ("*E").
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Steps stored in the checkpoint (only the first one is run).
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// Bytes of matrices read from the checkpoint.
    pub fn weight_bytes(&self) -> usize {
        self.eh_proj.storage_bytes() + self.layers.iter().map(Layer::weight_bytes).sum::<usize>()
    }

    /// A fresh per-stream state of the head's own blocks.
    pub fn new_state(&self) -> Result<StreamState, ModelError> {
        let kv = self
            .kv_shapes
            .iter()
            .map(|&(h, d)| LayerKv::new(h, d).map_err(ModelError::from))
            .collect::<Result<Vec<_>, _>>()?;
        let mamba = self
            .layers
            .iter()
            .filter_map(|l| match &l.mixer {
                Mixer::Mamba(m) => Some(MambaState::new(&m.params())),
                _ => None,
            })
            .collect();
        Ok(StreamState::new(KvCache::from_layers(kv), mamba))
    }

    /// Runs the head over `rows` (see the module docs): `hidden` holds one conditioning row per
    /// row; `hidden_out` gets every row's output, `logits` the head's logits of the rows that
    /// want them, in row order.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &mut self,
        embed: &PackedMatrix,
        head: &PackedMatrix,
        pool: &Pool,
        rows: &[Row],
        hidden: &[f32],
        states: &mut [&mut StreamState],
        hidden_out: &mut Vec<f32>,
        logits: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        let (n, d, eps) = (rows.len(), self.hidden, self.eps);
        let vocab = head.rows();
        if hidden.len() != n * d {
            return Err(ModelError::Kernel(format!(
                "MTP head: {} hidden values for {n} rows of width {d}",
                hidden.len()
            )));
        }
        check_rows(rows, states, vocab, usize::MAX)?;
        let n_mamba = self
            .layers
            .iter()
            .filter(|l| matches!(l.mixer, Mixer::Mamba(_)))
            .count();
        for r in rows {
            let st = &states[r.stream];
            if st.mamba.len() != n_mamba || st.kv.n_layers() != self.kv_shapes.len() {
                return Err(ModelError::Kernel(format!(
                    "stream {} holds no MTP head state (Mamba {} / attention {}; need {} / {})",
                    r.stream,
                    st.mamba.len(),
                    st.kv.n_layers(),
                    n_mamba,
                    self.kv_shapes.len()
                )));
            }
        }
        // cat(enorm(embed(token)), hnorm(hidden)), row by row, embedding columns first.
        let cat = sized(&mut self.cat, n * 2 * d);
        let emb = sized(&mut self.emb, d);
        for (i, r) in rows.iter().enumerate() {
            embedding_row(embed, r.token as usize, emb)?;
            let row = &mut cat[i * 2 * d..(i + 1) * 2 * d];
            rms_norm(emb, &self.enorm, eps, 1, &mut row[..d])?;
            rms_norm(
                &hidden[i * d..(i + 1) * d],
                &self.hnorm,
                eps,
                1,
                &mut row[d..],
            )?;
        }
        let x = sized(&mut self.x, n * d);
        matmul(&self.eh_proj, cat, n, x, pool)?;
        for l in &self.layers {
            let h = sized(&mut self.h, n * d);
            rms_norm(x, &l.norm, eps, n, h)?;
            let o = sized(&mut self.o, n * d);
            let s = &mut self.scratch;
            match &l.mixer {
                Mixer::Mamba(m) => mixers::mamba(m, rows, states, h, o, eps, s, pool)?,
                Mixer::Attention(a) => mixers::attention(a, rows, states, h, o, s, pool)?,
                Mixer::Mlp(m) => mixers::mlp(m, h, n, o, s, pool)?,
                Mixer::Moe(m) => mixers::moe(m, h, n, d, o, s, pool)?,
            }
            add_inplace(x, o)?;
        }
        for r in rows {
            states[r.stream].len = r.pos + 1;
        }
        hidden_out.resize(n * d, 0.0);
        rms_norm(x, &self.final_norm, eps, n, &mut hidden_out[..n * d])?;
        let want: Vec<usize> = (0..n).filter(|&i| rows[i].logits).collect();
        let m = want.len();
        let picked = sized(&mut self.picked, m * d);
        for (j, &i) in want.iter().enumerate() {
            picked[j * d..(j + 1) * d].copy_from_slice(&hidden_out[i * d..(i + 1) * d]);
        }
        logits.resize(m * vocab, 0.0);
        matmul(head, picked, m, &mut logits[..m * vocab], pool)?;
        Ok(())
    }
}

#[cfg(test)]
#[path = "mtp_tests.rs"]
mod tests;
