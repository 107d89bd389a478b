//! Muse Spark: sliding/full attention (per-layer RoPE, NoPE layers), weightless q/k/o norms,
//! a sigmoid output gate, residual gates, zero-centred norms, compressed-width MoE with pre/post
//! expert norms and a sigmoid top-k router, and a soft-capped head. Text model only.

mod config;
pub mod sizing;

pub use config::MuseSparkConfig;

use crate::formats::Role;
use crate::index::{Claim, Index, TensorClass};
use crate::refusal::Refusal;
use serde::Serialize;
use serde_json::Value;
use tf_formats::TensorEntry;

/// Which on-disk form the checkpoint is in; the forward needs it to read some tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum MuseForm {
    /// Hugging Face: zero-centred norm weights (gain = 1 + w), raw residual-gate values,
    /// separate q/k/v/gate projections with q/k rows in (i, i + d/2) RoPE order, fused
    /// `gate_up_proj` experts `[E, 2I, C]`.
    HuggingFace,
    /// mlx-lm: norm gains stored directly, precomputed residual-gate `alpha/beta` (f32),
    /// fused `qkvg_proj` with q/k rows interleaved for (2i, 2i+1) RoPE pairs, split experts.
    Mlx,
}

/// Attention input projections.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum MuseAttnProj {
    /// HF: q `[H*d, hidden]`, k and v `[KV*d, hidden]`, output gate `[H*d, hidden]`.
    Separate {
        q: TensorEntry,
        k: TensorEntry,
        v: TensorEntry,
        gate: TensorEntry,
    },
    /// MLX: `qkvg_proj` `[2*(H+KV)*d, hidden]`, rows q, k, v, gate.
    Fused { qkvg: TensorEntry },
}

/// Residual gates after attention and after the feed-forward.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum MuseResidualGates {
    /// HF: raw gate vectors `[hidden]` (alpha/beta derived with the temperature).
    Raw { attn: TensorEntry, ffn: TensorEntry },
    /// MLX: `add_attn_alpha/beta`, `add_ffn_alpha/beta` `[hidden]`.
    Coefficients {
        attn: [TensorEntry; 2],
        ffn: [TensorEntry; 2],
    },
}

/// Routed expert weights.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum MuseExperts {
    /// HF: `gate_up_proj` `[E, 2I, C]` (gate rows first) and `down_proj` `[E, C, I]`.
    GateUp {
        gate_up: TensorEntry,
        down: TensorEntry,
    },
    /// MLX: `gate_proj`, `up_proj` `[E, I, C]` and `down_proj` `[E, C, I]`.
    Split {
        gate: TensorEntry,
        up: TensorEntry,
        down: TensorEntry,
    },
}

/// One decoder layer's tensors and per-layer settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MuseLayer {
    /// Whether this layer attends through the sliding window.
    pub sliding: bool,
    /// RoPE base, or `None` for a NoPE layer.
    pub rope_theta: Option<f64>,
    pub input_layernorm: TensorEntry,
    pub attn: MuseAttnProj,
    pub o_proj: TensorEntry,
    pub pre_feedforward_layernorm: TensorEntry,
    pub post_feedforward_layernorm: TensorEntry,
    pub residual_gates: MuseResidualGates,
    /// Router `[E, hidden]` and score bias `[E]`.
    pub router: [TensorEntry; 2],
    pub pre_expert_proj: TensorEntry,
    pub pre_expert_norm: TensorEntry,
    pub experts: MuseExperts,
    pub post_expert_norm: TensorEntry,
    pub post_expert_proj: TensorEntry,
}

/// A validated Muse Spark text model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MuseSparkPlan {
    pub config: MuseSparkConfig,
    pub form: MuseForm,
    pub embed_tokens: TensorEntry,
    pub layers: Vec<MuseLayer>,
    pub norm: TensorEntry,
    pub lm_head: TensorEntry,
    /// Every tensor used, classified.
    pub claims: Vec<Claim>,
    /// Tensors present but knowingly unused (vision/audio towers, activation input scales).
    pub ignored: Vec<String>,
}

/// model_types this family serves.
pub const MUSE_MODEL_TYPES: &[&str] = &["muse_spark"];

const P: &str = "model.language_model.";

/// Validates a Muse Spark config and tensor index into a plan.
pub fn plan(config: &Value, tensors: &[TensorEntry]) -> Result<MuseSparkPlan, Refusal> {
    let cfg = config::parse(config)?;
    let mut ix = Index::new(tensors);
    let mlx = ix.any(|n| n.starts_with(P) && (n.contains(".qkvg_proj.") || n.ends_with("_alpha")));
    let form = if mlx {
        MuseForm::Mlx
    } else {
        MuseForm::HuggingFace
    };
    let (h, v) = (cfg.hidden_size, cfg.vocab_size);
    let embed_tokens = ix.require(
        &format!("{P}embed_tokens.weight"),
        &[v, h],
        Role::Matrix,
        TensorClass::Embedding,
        None,
    )?;
    let mut layers = Vec::with_capacity(cfg.num_hidden_layers as usize);
    for l in 0..cfg.num_hidden_layers as usize {
        layers.push(layer(&mut ix, &cfg, form, l)?);
    }
    let norm = ix.require(
        &format!("{P}norm.weight"),
        &[h],
        Role::Dense,
        TensorClass::Norm,
        None,
    )?;
    let lm_head = ix.require(
        "lm_head.weight",
        &[v, h],
        Role::Matrix,
        TensorClass::Head,
        None,
    )?;
    ix.ignore_where(|n| {
        n.starts_with("model.vision_tower.")
            || n.starts_with("model.vision_adapter.")
            || n.starts_with("model.vision_projection.")
            || n.starts_with("model.audio_tower.")
            || n.ends_with("_proj_input_scale")
    });
    let (claims, ignored) = ix.finish()?;
    Ok(MuseSparkPlan {
        config: cfg,
        form,
        embed_tokens,
        layers,
        norm,
        lm_head,
        claims,
        ignored,
    })
}

fn layer(
    ix: &mut Index<'_>,
    c: &MuseSparkConfig,
    form: MuseForm,
    l: usize,
) -> Result<MuseLayer, Refusal> {
    let p = format!("{P}layers.{l}.");
    let (h, d) = (c.hidden_size, c.head_dim);
    let (q, kv) = (c.num_attention_heads * d, c.num_key_value_heads * d);
    let (e, cw, i) = (
        c.num_local_experts,
        c.moe_hidden_size,
        c.moe_intermediate_size,
    );
    let at = Some(l);
    use TensorClass as T;
    let mut req = |suffix: &str, shape: &[u64], role: Role, class: T| {
        ix.require(&format!("{p}{suffix}"), shape, role, class, at)
    };
    let (mat, dense) = (Role::Matrix, Role::Dense);
    let input_layernorm = req("input_layernorm.weight", &[h], dense, T::Norm)?;
    let attn = match form {
        MuseForm::HuggingFace => MuseAttnProj::Separate {
            q: req("self_attn.q_proj.weight", &[q, h], mat, T::Attention)?,
            k: req("self_attn.k_proj.weight", &[kv, h], mat, T::Attention)?,
            v: req("self_attn.v_proj.weight", &[kv, h], mat, T::Attention)?,
            gate: req("self_attn.gate_proj.weight", &[q, h], mat, T::Attention)?,
        },
        MuseForm::Mlx => MuseAttnProj::Fused {
            qkvg: req(
                "self_attn.qkvg_proj.weight",
                &[2 * (q + kv), h],
                mat,
                T::Attention,
            )?,
        },
    };
    let o_proj = req("self_attn.o_proj.weight", &[h, q], mat, T::Attention)?;
    let pre_feedforward_layernorm = req("pre_feedforward_layernorm.weight", &[h], dense, T::Norm)?;
    let post_feedforward_layernorm =
        req("post_feedforward_layernorm.weight", &[h], dense, T::Norm)?;
    let residual_gates = match form {
        MuseForm::HuggingFace => MuseResidualGates::Raw {
            attn: req("post_attention_residual_gate.gate", &[h], dense, T::Norm)?,
            ffn: req("post_feedforward_residual_gate.gate", &[h], dense, T::Norm)?,
        },
        MuseForm::Mlx => MuseResidualGates::Coefficients {
            attn: [
                req("add_attn_alpha", &[h], dense, T::Norm)?,
                req("add_attn_beta", &[h], dense, T::Norm)?,
            ],
            ffn: [
                req("add_ffn_alpha", &[h], dense, T::Norm)?,
                req("add_ffn_beta", &[h], dense, T::Norm)?,
            ],
        },
    };
    let router = [
        req("mlp.gate.weight", &[e, h], dense, T::Router)?,
        req("mlp.gate.e_score_correction_bias", &[e], dense, T::Router)?,
    ];
    let pre_expert_proj = req(
        "mlp.pre_expert_proj.weight",
        &[cw, h],
        mat,
        T::ExpertProjection,
    )?;
    let pre_expert_norm = req("mlp.pre_expert_norm.weight", &[cw], dense, T::Norm)?;
    let experts = match form {
        MuseForm::HuggingFace => MuseExperts::GateUp {
            gate_up: req(
                "mlp.experts.gate_up_proj",
                &[e, 2 * i, cw],
                mat,
                T::RoutedExperts,
            )?,
            down: req("mlp.experts.down_proj", &[e, cw, i], mat, T::RoutedExperts)?,
        },
        MuseForm::Mlx => MuseExperts::Split {
            gate: req(
                "mlp.experts.gate_proj.weight",
                &[e, i, cw],
                mat,
                T::RoutedExperts,
            )?,
            up: req(
                "mlp.experts.up_proj.weight",
                &[e, i, cw],
                mat,
                T::RoutedExperts,
            )?,
            down: req(
                "mlp.experts.down_proj.weight",
                &[e, cw, i],
                mat,
                T::RoutedExperts,
            )?,
        },
    };
    let post_expert_norm = req("mlp.experts.post_expert_norm.weight", &[cw], dense, T::Norm)?;
    let post_expert_proj = req(
        "mlp.post_expert_proj.weight",
        &[h, cw],
        mat,
        T::ExpertProjection,
    )?;
    let theta = c.layer_rope_theta[l];
    Ok(MuseLayer {
        sliding: c.layer_sliding[l],
        rope_theta: (theta > 0.0).then_some(theta),
        input_layernorm,
        attn,
        o_proj,
        pre_feedforward_layernorm,
        post_feedforward_layernorm,
        residual_gates,
        router,
        pre_expert_proj,
        pre_expert_norm,
        experts,
        post_expert_norm,
        post_expert_proj,
    })
}
