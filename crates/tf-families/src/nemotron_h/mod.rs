//! Nemotron-H hybrids (Mamba2 / attention / relu² MLP / MoE) and Nemotron Puzzle
//! (`nemotron_h_puzzle`: the same blocks with per-layer values), in HF or MLX on-disk form.

mod config;
mod mtp;
mod tensors;

pub use config::{AttentionSpec, MambaSpec, MlpSpec, MoeSpec, NemotronBlock, NemotronHConfig};
pub use mtp::{MtpStart, MtpSublayer, NemotronMtp, MTP_PREFIX};
pub use tensors::{ConvLayout, ExpertWeights, NemotronLayer, NemotronMixer};

use crate::formats::Role;
use crate::index::{Claim, Index, TensorClass};
use crate::refusal::Refusal;
use serde::Serialize;
use serde_json::Value;
use tf_formats::TensorEntry;

/// model_types this family serves.
pub const NEMOTRON_MODEL_TYPES: &[&str] = &["nemotron_h", "nemotron_h_puzzle"];

/// A validated Nemotron-H or Puzzle model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NemotronHPlan {
    /// The resolved config (one typed block per layer).
    pub config: NemotronHConfig,
    /// Tensor-name prefix of the backbone ("backbone" as checkpoints store it).
    pub prefix: String,
    /// `{prefix}.embeddings.weight` `[vocab, hidden]`.
    pub embeddings: TensorEntry,
    /// One entry per layer.
    pub layers: Vec<NemotronLayer>,
    /// `{prefix}.norm_f.weight`.
    pub norm_f: TensorEntry,
    /// `lm_head.weight`, or `None` when tied to the embedding.
    pub lm_head: Option<TensorEntry>,
    /// The MTP (multi-token prediction) layers, when the config declares them
    /// (`num_nextn_predict_layers > 0`) and the checkpoint carries `mtp.*` tensors.
    pub mtp: Option<NemotronMtp>,
    /// Every tensor used, classified.
    pub claims: Vec<Claim>,
    /// Tensors present but knowingly unused (`mtp.*` when no MTP layers are planned).
    pub ignored: Vec<String>,
}

/// Validates a Nemotron-H / Puzzle config and tensor index into a plan.
pub fn plan(config: &Value, tensors: &[TensorEntry]) -> Result<NemotronHPlan, Refusal> {
    let mut ix = Index::new(tensors);
    let cfg = config::parse(config, ix.has("lm_head.weight"))?;
    let prefix = if !ix.has("backbone.embeddings.weight") && ix.has("model.embeddings.weight") {
        "model"
    } else {
        "backbone"
    };
    let (h, v) = (cfg.hidden_size, cfg.vocab_size);
    let embeddings = ix.require(
        &format!("{prefix}.embeddings.weight"),
        &[v, h],
        Role::Matrix,
        TensorClass::Embedding,
        None,
    )?;
    let mut layers = Vec::with_capacity(cfg.layers.len());
    for (l, block) in cfg.layers.iter().enumerate() {
        let p = format!("{prefix}.layers.{l}.");
        layers.push(tensors::layer(&mut ix, &p, l, block, h)?);
    }
    let norm_f = ix.require(
        &format!("{prefix}.norm_f.weight"),
        &[h],
        Role::Dense,
        TensorClass::Norm,
        None,
    )?;
    let lm_head = if cfg.tie_word_embeddings {
        None
    } else {
        Some(ix.require(
            "lm_head.weight",
            &[v, h],
            Role::Matrix,
            TensorClass::Head,
            None,
        )?)
    };
    let mtp = mtp::plan(
        &mut ix,
        config,
        cfg.num_nextn_predict_layers,
        cfg.layers.len(),
        h,
    )?;
    let (tied, planned) = (cfg.tie_word_embeddings, mtp.is_some());
    ix.ignore_where(|n| (!planned && n.starts_with("mtp.")) || (tied && n == "lm_head.weight"));
    let (claims, ignored) = ix.finish()?;
    Ok(NemotronHPlan {
        config: cfg,
        prefix: prefix.into(),
        embeddings,
        layers,
        norm_f,
        lm_head,
        mtp,
        claims,
        ignored,
    })
}
