//! Dense llama-style decoders: llama, mistral, qwen2 (q/k/v bias), qwen3 (q/k norm).

mod config;

pub use config::{LlamaConfig, RopeScaling, LLAMA_MODEL_TYPES};

use crate::formats::Role;
use crate::index::{Claim, Index, TensorClass};
use crate::refusal::Refusal;
use serde::Serialize;
use serde_json::Value;
use tf_formats::TensorEntry;

/// The tensors of one llama decoder layer (canonical Hugging Face names).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LlamaLayer {
    /// RMSNorm before attention.
    pub input_layernorm: TensorEntry,
    /// Query projection `[heads*head_dim, hidden]`.
    pub q_proj: TensorEntry,
    /// Key projection `[kv_heads*head_dim, hidden]`.
    pub k_proj: TensorEntry,
    /// Value projection `[kv_heads*head_dim, hidden]`.
    pub v_proj: TensorEntry,
    /// Output projection `[hidden, heads*head_dim]`.
    pub o_proj: TensorEntry,
    /// q, k, v biases when `qkv_bias`.
    pub qkv_bias: Option<[TensorEntry; 3]>,
    /// Output projection bias when `o_bias`.
    pub o_bias: Option<TensorEntry>,
    /// Per-head q and k RMSNorm gains `[head_dim]` when `qk_norm`.
    pub qk_norm: Option<[TensorEntry; 2]>,
    /// RMSNorm before the MLP.
    pub post_attention_layernorm: TensorEntry,
    /// SwiGLU gate `[intermediate, hidden]`.
    pub gate_proj: TensorEntry,
    /// SwiGLU up `[intermediate, hidden]`.
    pub up_proj: TensorEntry,
    /// SwiGLU down `[hidden, intermediate]`.
    pub down_proj: TensorEntry,
    /// gate, up, down biases when `mlp_bias`.
    pub mlp_bias: Option<[TensorEntry; 3]>,
}

/// A validated dense llama-style model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LlamaPlan {
    /// The resolved config.
    pub config: LlamaConfig,
    /// `model.embed_tokens.weight` `[vocab, hidden]`.
    pub embed_tokens: TensorEntry,
    /// One entry per decoder layer.
    pub layers: Vec<LlamaLayer>,
    /// `model.norm.weight`.
    pub norm: TensorEntry,
    /// `lm_head.weight`, or `None` when the head is tied to the embedding.
    pub lm_head: Option<TensorEntry>,
    /// Every tensor used, classified.
    pub claims: Vec<Claim>,
    /// Tensors present but knowingly unused (e.g. rotary inv_freq buffers).
    pub ignored: Vec<String>,
}

/// Validates a llama-style config and tensor index into a plan.
pub fn plan(config: &Value, tensors: &[TensorEntry]) -> Result<LlamaPlan, Refusal> {
    let mut ix = Index::new(tensors);
    let cfg = LlamaConfig::from_json(config, ix.has("lm_head.weight"))?;
    let (h, v) = (cfg.hidden_size, cfg.vocab_size);
    let q_out = cfg.num_attention_heads * cfg.head_dim;
    let kv_out = cfg.num_key_value_heads * cfg.head_dim;
    let i = cfg.intermediate_size;
    let mat = Role::Matrix;
    let dense = Role::Dense;
    use TensorClass::{Attention as A, Mlp as M, Norm as N};

    let embed_tokens = ix.require(
        "model.embed_tokens.weight",
        &[v, h],
        mat,
        TensorClass::Embedding,
        None,
    )?;
    let mut layers = Vec::with_capacity(cfg.num_hidden_layers as usize);
    for l in 0..cfg.num_hidden_layers as usize {
        let p = format!("model.layers.{l}.");
        let at = Some(l);
        let mut req = |suffix: &str, shape: &[u64], role, class| {
            ix.require(&format!("{p}{suffix}"), shape, role, class, at)
        };
        let input_layernorm = req("input_layernorm.weight", &[h], dense, N)?;
        let q_proj = req("self_attn.q_proj.weight", &[q_out, h], mat, A)?;
        let k_proj = req("self_attn.k_proj.weight", &[kv_out, h], mat, A)?;
        let v_proj = req("self_attn.v_proj.weight", &[kv_out, h], mat, A)?;
        let o_proj = req("self_attn.o_proj.weight", &[h, q_out], mat, A)?;
        let qkv_bias = if cfg.qkv_bias {
            Some([
                req("self_attn.q_proj.bias", &[q_out], dense, A)?,
                req("self_attn.k_proj.bias", &[kv_out], dense, A)?,
                req("self_attn.v_proj.bias", &[kv_out], dense, A)?,
            ])
        } else {
            None
        };
        let o_bias = if cfg.o_bias {
            Some(req("self_attn.o_proj.bias", &[h], dense, A)?)
        } else {
            None
        };
        let qk_norm = if cfg.qk_norm {
            Some([
                req("self_attn.q_norm.weight", &[cfg.head_dim], dense, N)?,
                req("self_attn.k_norm.weight", &[cfg.head_dim], dense, N)?,
            ])
        } else {
            None
        };
        let post_attention_layernorm = req("post_attention_layernorm.weight", &[h], dense, N)?;
        let gate_proj = req("mlp.gate_proj.weight", &[i, h], mat, M)?;
        let up_proj = req("mlp.up_proj.weight", &[i, h], mat, M)?;
        let down_proj = req("mlp.down_proj.weight", &[h, i], mat, M)?;
        let mlp_bias = if cfg.mlp_bias {
            Some([
                req("mlp.gate_proj.bias", &[i], dense, M)?,
                req("mlp.up_proj.bias", &[i], dense, M)?,
                req("mlp.down_proj.bias", &[h], dense, M)?,
            ])
        } else {
            None
        };
        layers.push(LlamaLayer {
            input_layernorm,
            q_proj,
            k_proj,
            v_proj,
            o_proj,
            qkv_bias,
            o_bias,
            qk_norm,
            post_attention_layernorm,
            gate_proj,
            up_proj,
            down_proj,
            mlp_bias,
        });
    }
    let norm = ix.require("model.norm.weight", &[h], dense, N, None)?;
    let lm_head = if cfg.tie_word_embeddings {
        None
    } else {
        Some(ix.require("lm_head.weight", &[v, h], mat, TensorClass::Head, None)?)
    };
    let tied = cfg.tie_word_embeddings;
    ix.ignore_where(|n| n.ends_with("rotary_emb.inv_freq") || (tied && n == "lm_head.weight"));
    let (claims, ignored) = ix.finish()?;
    Ok(LlamaPlan {
        config: cfg,
        embed_tokens,
        layers,
        norm,
        lm_head,
        claims,
        ignored,
    })
}
