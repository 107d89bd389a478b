//! `MuseSparkConfig`: the text model of config.json's `text_config` (or the top level).

use crate::fields::Fields;
use crate::refusal::Refusal;
use serde::Serialize;
use serde_json::Value;

/// A resolved Muse Spark text config. Omitted fields take transformers' defaults.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MuseSparkConfig {
    /// Residual stream width.
    pub hidden_size: u64,
    /// Query heads.
    pub num_attention_heads: u64,
    /// Key/value heads.
    pub num_key_value_heads: u64,
    /// Per-head width.
    pub head_dim: u64,
    /// Number of decoder layers.
    pub num_hidden_layers: u64,
    /// Vocabulary size.
    pub vocab_size: u64,
    /// Epsilon of the pre-norms, q/k/o norms and final norm.
    pub rms_norm_eps: f64,
    /// Epsilon of the post-attention/post-feedforward/post-expert norms.
    pub post_norm_eps: f64,
    /// Global RoPE base (`rope_parameters.rope_theta`).
    pub rope_theta: f64,
    /// Per layer RoPE base; 0 means the layer uses no RoPE.
    pub layer_rope_theta: Vec<f64>,
    /// Per layer: whether it attends through the sliding window.
    pub layer_sliding: Vec<bool>,
    /// Sliding-window width.
    pub sliding_window: u64,
    /// Logit soft cap T in `T * tanh(logits * output_multiplier / T)`.
    pub final_logit_softcapping: f64,
    /// Multiplier on the head's logits and on the router logits.
    pub output_multiplier: f64,
    /// Constant scale on normalised queries.
    pub qk_scale_factor: f64,
    /// Routed experts per MoE layer.
    pub num_local_experts: u64,
    /// Experts chosen per token.
    pub num_experts_per_tok: u64,
    /// Compressed width the experts work at (pre/post expert projections).
    pub moe_hidden_size: u64,
    /// Hidden width of each expert's SwiGLU.
    pub moe_intermediate_size: u64,
    /// Multiplier on the combined routing weights.
    pub routed_scaling_factor: f64,
    /// Temperature of the residual gates (HF form computes alpha/beta from it).
    pub residual_gate_temperature: f64,
    /// Trained context length, if stated.
    pub max_position_embeddings: Option<u64>,
    /// Beginning-of-sequence token id, if stated.
    pub bos_token_id: Option<u32>,
    /// End-of-sequence token ids.
    pub eos_token_ids: Vec<u32>,
}

/// Reads a muse_spark config.json (text fields under `text_config`, or at the top level).
pub fn parse(config: &Value) -> Result<MuseSparkConfig, Refusal> {
    let top = Fields::new(config, "config.json")?;
    let text = match top.get("text_config") {
        Some(v) => v
            .as_object()
            .ok_or_else(|| Refusal::bad("text_config", "is not a JSON object"))?,
        None => config
            .as_object()
            .ok_or_else(|| Refusal::bad("config.json", "is not a JSON object"))?,
    };
    let prefix = if top.get("text_config").is_some() {
        "text_config."
    } else {
        ""
    };
    let f = Fields::with_prefix(text, prefix);
    let name = |k: &str| format!("{prefix}{k}");

    let hidden_size = f.pos("hidden_size")?;
    let heads = f.pos("num_attention_heads")?;
    let kv_heads = f.pos("num_key_value_heads")?;
    if heads % kv_heads != 0 {
        return Err(Refusal::bad(
            name("num_key_value_heads"),
            format!("{kv_heads} does not divide {heads}"),
        ));
    }
    let head_dim = f.pos("head_dim")?;
    if head_dim % 2 != 0 {
        return Err(Refusal::bad(name("head_dim"), "is odd; RoPE needs pairs"));
    }
    let layers = f.pos("num_hidden_layers")?;
    let n = layers as usize;
    let rope_theta = match f.get("rope_parameters") {
        Some(v) => {
            let obj = v
                .as_object()
                .ok_or_else(|| Refusal::bad(name("rope_parameters"), "is not an object"))?;
            let p = format!("{prefix}rope_parameters.");
            let rp = Fields::with_prefix(obj, &p);
            if let Some(t) = rp.opt_str("rope_type")? {
                if t != "default" {
                    return Err(Refusal::bad(
                        format!("{p}rope_type"),
                        format!("'{t}' is not supported (default only)"),
                    ));
                }
            }
            rp.opt_pos_f64("rope_theta")?.unwrap_or(500_000.0)
        }
        None => f.opt_pos_f64("rope_theta")?.unwrap_or(500_000.0),
    };
    // Full attention without RoPE on every 4th layer counted back from the last, as transformers.
    let nope = |i: usize| (n - 1 - i) % 4 == 0;
    let layer_types: Vec<String> = match f.opt_str_list("layer_types")? {
        Some(v) => v.into_iter().map(String::from).collect(),
        None => (0..n)
            .map(|i| {
                if nope(i) {
                    "full_attention"
                } else {
                    "sliding_attention"
                }
                .to_string()
            })
            .collect(),
    };
    check_len(&name("layer_types"), layers, layer_types.len())?;
    let mut layer_sliding = Vec::with_capacity(n);
    for (layer, t) in layer_types.iter().enumerate() {
        layer_sliding.push(match t.as_str() {
            "full_attention" => false,
            "sliding_attention" => true,
            other => {
                return Err(Refusal::UnknownBlockType {
                    layer,
                    block_type: other.into(),
                    known: "full_attention, sliding_attention".into(),
                })
            }
        });
    }
    let layer_rope_theta = match f.opt_f64_list("layer_rope_theta")? {
        Some(v) => v,
        None => (0..n)
            .map(|i| if nope(i) { 0.0 } else { rope_theta })
            .collect(),
    };
    check_len(&name("layer_rope_theta"), layers, layer_rope_theta.len())?;
    if let Some(t) = layer_rope_theta
        .iter()
        .find(|t| !(t.is_finite() && **t >= 0.0))
    {
        return Err(Refusal::bad(
            name("layer_rope_theta"),
            format!("contains {t}"),
        ));
    }
    if let Some(types) = f.opt_str_list("mlp_layer_types")? {
        check_len(&name("mlp_layer_types"), layers, types.len())?;
        if let Some((layer, t)) = types.iter().enumerate().find(|(_, t)| **t != "sparse") {
            return Err(Refusal::UnknownBlockType {
                layer,
                block_type: (*t).into(),
                known: "sparse (dense feed-forward layers are not supported)".into(),
            });
        }
    }
    if f.opt_u64("num_shared_experts")?.unwrap_or(0) != 0 {
        return Err(Refusal::bad(
            name("num_shared_experts"),
            "shared experts are not supported",
        ));
    }
    if f.opt_bool("attention_bias")?.unwrap_or(false) {
        return Err(Refusal::bad(
            name("attention_bias"),
            "attention biases are not supported",
        ));
    }
    let experts = f.pos("num_local_experts")?;
    let top_k = f.pos("num_experts_per_tok")?;
    if top_k > experts {
        return Err(Refusal::TopKExceedsExperts {
            layer: 0,
            top_k,
            experts,
        });
    }
    let ids = |k: &str| -> Result<Vec<u32>, Refusal> {
        let v = f.token_ids(k)?;
        if v.is_empty() {
            top.token_ids(k)
        } else {
            Ok(v)
        }
    };
    Ok(MuseSparkConfig {
        hidden_size,
        num_attention_heads: heads,
        num_key_value_heads: kv_heads,
        head_dim,
        num_hidden_layers: layers,
        vocab_size: f.pos("vocab_size")?,
        rms_norm_eps: f.opt_pos_f64("rms_norm_eps")?.unwrap_or(1e-5),
        post_norm_eps: f.opt_pos_f64("post_norm_eps")?.unwrap_or(1e-8),
        rope_theta,
        layer_rope_theta,
        layer_sliding,
        sliding_window: f.opt_u64("sliding_window")?.unwrap_or(2048),
        final_logit_softcapping: f.opt_pos_f64("final_logit_softcapping")?.unwrap_or(20.0),
        output_multiplier: f
            .opt_pos_f64("output_multiplier")?
            .unwrap_or(0.176_776_695_296_636_9),
        qk_scale_factor: f
            .opt_pos_f64("qk_scale_factor")?
            .unwrap_or(5.473_006_486_387_5),
        num_local_experts: experts,
        num_experts_per_tok: top_k,
        moe_hidden_size: f.pos("moe_hidden_size")?,
        moe_intermediate_size: f.pos("moe_intermediate_size")?,
        routed_scaling_factor: f.opt_f64("routed_scaling_factor")?.unwrap_or(1.0),
        residual_gate_temperature: f.opt_pos_f64("residual_gate_temperature")?.unwrap_or(0.3),
        max_position_embeddings: f.opt_u64("max_position_embeddings")?,
        bos_token_id: ids("bos_token_id")?.first().copied(),
        eos_token_ids: ids("eos_token_id")?,
    })
}

fn check_len(field: &str, layers: u64, found: usize) -> Result<(), Refusal> {
    if found as u64 != layers {
        return Err(Refusal::PatternLengthMismatch {
            field: field.into(),
            expected: layers,
            found: found as u64,
        });
    }
    Ok(())
}
