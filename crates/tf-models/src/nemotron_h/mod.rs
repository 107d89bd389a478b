//! Nemotron-H (`nemotron_h`) and Nemotron Puzzle (`nemotron_h_puzzle`) forward over batched rows:
//! hybrid Mamba2 / attention (no RoPE) / relu² MLP / (latent) MoE blocks.
//!
//! Per layer: `x += mixer(rms_norm(x))`; then the final norm and the head for the rows that
//! want logits. Per-stream state: one [`MambaState`] per Mamba layer (conv and SSM state) and
//! one KV cache per attention layer. See docs/families/nemotron_h.md.

mod layers;
mod mixers;
mod mtp;

use crate::error::ModelError;
use crate::model::{check_rows, DraftHead, Model, ModelInfo, Row, StreamState};
use crate::weights::{matrix, vector};
use layers::{build_layer, Layer, Mixer};
use mixers::{sized, Scratch};
use mtp::MtpHead;
use std::sync::Arc;
use tf_families::nemotron_h::{NemotronBlock, NemotronHPlan};
use tf_formats::checkpoint::Checkpoint;
use tf_kernels::matmul::{embedding_row, matmul, PackedMatrix};
use tf_kernels::ops::{add_inplace, rms_norm, KvCache, LayerKv, MambaState};
use tf_kernels::pool::Pool;

/// A loaded Nemotron-H or Puzzle model.
pub struct NemotronH {
    // Field order matters: `layers`, `embed` and `head` borrow from `_checkpoint`, and fields
    // drop in declaration order, so they go first.
    layers: Vec<Layer<'static>>,
    embed: PackedMatrix<'static>,
    head: PackedMatrix<'static>,
    /// The MTP head, when the checkpoint carries MTP layers (borrows the checkpoint too).
    mtp: Option<MtpHead<'static>>,
    /// With an MTP head: every row's final-normed hidden state of the latest forward.
    normed: Vec<f32>,
    /// Where drafts come from, one line for the log.
    draft_note: String,
    final_norm: Vec<f32>,
    hidden: usize,
    eps: f32,
    /// (kv heads, head_dim) of each attention layer, in order.
    kv_shapes: Vec<(usize, usize)>,
    info: ModelInfo,
    pool: Pool,
    x: Vec<f32>,
    h: Vec<f32>,
    o: Vec<f32>,
    last: Vec<f32>,
    scratch: Scratch,
    _checkpoint: Arc<Checkpoint>,
}

impl NemotronH {
    /// Builds the model over a validated plan; matrices stay in the checkpoint's memory map.
    pub fn new(
        checkpoint: Arc<Checkpoint>,
        plan: &NemotronHPlan,
        threads: usize,
    ) -> Result<NemotronH, ModelError> {
        // SAFETY: the checkpoint lives in an Arc owned by the returned model and is never
        // mutated; its memory map does not move. Every borrow made here is stored in fields
        // that are dropped before `_checkpoint` (declaration order).
        let ck: &'static Checkpoint = unsafe { &*Arc::as_ptr(&checkpoint) };
        let cfg = &plan.config;
        let hidden = cfg.hidden_size as usize;
        let (mut n_mamba, mut kv_shapes) = (0, Vec::new());
        let mut layers = Vec::with_capacity(plan.layers.len());
        for (lp, block) in plan.layers.iter().zip(&cfg.layers) {
            layers.push(build_layer(
                ck,
                lp,
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
        let embed = matrix(ck, &plan.embeddings)?;
        let head = match &plan.lm_head {
            Some(e) => matrix(ck, e)?,
            None => embed,
        };
        let eps = cfg.layer_norm_epsilon as f32;
        let mtp = match &plan.mtp {
            Some(m) => Some(MtpHead::new(ck, m, hidden, eps)?),
            None => None,
        };
        let family = if cfg.model_type == "nemotron_h_puzzle" {
            "nemotron_h_puzzle"
        } else {
            "nemotron_h"
        };
        let draft_note = match (&mtp, cfg.num_nextn_predict_layers) {
            (Some(m), _) => format!(
                "{family}: MTP head ({} stored step(s), blocks {}); drafts from MTP",
                m.steps(),
                m.pattern()
            ),
            (None, 0) => format!(
                "{family}: no MTP weights (num_nextn_predict_layers = 0); drafts use context copies"
            ),
            (None, k) => format!(
                "{family}: no MTP weights (num_nextn_predict_layers = {k} but no mtp.layers.* tensors); drafts use context copies"
            ),
        };
        let weight_bytes = mtp.as_ref().map_or(0, MtpHead::weight_bytes)
            + layers.iter().map(Layer::weight_bytes).sum::<usize>()
            + embed.storage_bytes()
            + plan.lm_head.as_ref().map_or(0, |_| head.storage_bytes());
        let info = ModelInfo {
            family,
            vocab_size: head.rows(),
            context: cfg.max_position_embeddings.unwrap_or(4096) as usize,
            state_bytes_per_token: kv_shapes.iter().map(|(h, d)| 2 * h * d * 4).sum(),
            weight_bytes,
        };
        Ok(NemotronH {
            final_norm: vector(ck, &plan.norm_f)?,
            hidden,
            eps,
            layers,
            embed,
            head,
            mtp,
            normed: Vec::new(),
            draft_note,
            kv_shapes,
            info,
            pool: Pool::new(threads.max(1)),
            x: Vec::new(),
            h: Vec::new(),
            o: Vec::new(),
            last: Vec::new(),
            scratch: Scratch::default(),
            _checkpoint: checkpoint,
        })
    }
}

impl NemotronH {
    /// Number of Mamba layers (recurrent states per stream).
    fn mamba_layers(&self) -> usize {
        self.layers
            .iter()
            .filter(|l| matches!(l.mixer, Mixer::Mamba(_)))
            .count()
    }
}

impl Model for NemotronH {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn new_state(&self) -> StreamState {
        let kv = self
            .kv_shapes
            .iter()
            .map(|&(h, d)| LayerKv::new(h, d).expect("validated attention shape"))
            .collect();
        let mamba = self
            .layers
            .iter()
            .filter_map(|l| match &l.mixer {
                Mixer::Mamba(m) => Some(MambaState::new(&m.params())),
                _ => None,
            })
            .collect();
        StreamState {
            kv: KvCache::from_layers(kv),
            len: 0,
            mamba,
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
        let hidden = self.hidden;
        let vocab = self.info.vocab_size;
        check_rows(rows, states, vocab, self.info.context)?;
        let n_mamba = self.mamba_layers();
        for r in rows {
            let st = &states[r.stream];
            if st.mamba.len() != n_mamba || st.kv.n_layers() != self.kv_shapes.len() {
                return Err(ModelError::Kernel(format!(
                    "stream {} holds state for {} Mamba / {} attention layers; this model has {} / {}",
                    r.stream,
                    st.mamba.len(),
                    st.kv.n_layers(),
                    n_mamba,
                    self.kv_shapes.len()
                )));
            }
        }
        let pool = &self.pool;
        let x = sized(&mut self.x, n * hidden);
        for (r, xr) in rows.iter().zip(x.chunks_exact_mut(hidden)) {
            embedding_row(&self.embed, r.token as usize, xr)?;
        }
        for l in &self.layers {
            let h = sized(&mut self.h, n * hidden);
            rms_norm(x, &l.norm, self.eps, n, h)?;
            let o = sized(&mut self.o, n * hidden);
            let s = &mut self.scratch;
            match &l.mixer {
                Mixer::Mamba(m) => mixers::mamba(m, rows, states, h, o, self.eps, s, pool)?,
                Mixer::Attention(a) => mixers::attention(a, rows, states, h, o, s, pool)?,
                Mixer::Mlp(m) => mixers::mlp(m, h, n, o, s, pool)?,
                Mixer::Moe(m) => mixers::moe(m, h, n, hidden, o, s, pool)?,
            }
            add_inplace(x, o)?;
        }
        for r in rows {
            states[r.stream].len = r.pos + 1;
        }
        if self.mtp.is_some() {
            let normed = sized(&mut self.normed, n * hidden);
            rms_norm(x, &self.final_norm, self.eps, n, normed)?;
        }
        let picked: Vec<usize> = (0..n).filter(|&i| rows[i].logits).collect();
        let m = picked.len();
        let last = sized(&mut self.last, m * hidden);
        for (j, &i) in picked.iter().enumerate() {
            rms_norm(
                &x[i * hidden..(i + 1) * hidden],
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

    fn draft_head(&mut self) -> Option<&mut dyn DraftHead> {
        match self.mtp {
            Some(_) => Some(self),
            None => None,
        }
    }

    fn draft_note(&self) -> String {
        self.draft_note.clone()
    }
}

impl DraftHead for NemotronH {
    fn hidden_size(&self) -> usize {
        self.hidden
    }

    fn new_draft_state(&self) -> Result<StreamState, ModelError> {
        match &self.mtp {
            Some(m) => m.new_state(),
            None => Err(ModelError::Kernel("this checkpoint has no MTP head".into())),
        }
    }

    fn target_hidden(&self) -> &[f32] {
        &self.normed
    }

    fn draft_forward(
        &mut self,
        rows: &[Row],
        hidden: &[f32],
        states: &mut [&mut StreamState],
        hidden_out: &mut Vec<f32>,
        logits: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        let Some(m) = self.mtp.as_mut() else {
            return Err(ModelError::Kernel("this checkpoint has no MTP head".into()));
        };
        m.forward(
            &self.embed,
            &self.head,
            &self.pool,
            rows,
            hidden,
            states,
            hidden_out,
            logits,
        )
    }
}
