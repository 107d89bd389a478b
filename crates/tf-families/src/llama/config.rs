//! `LlamaConfig`: everything the dense llama-style forward needs, read from config.json.

use crate::fields::Fields;
use crate::refusal::Refusal;
use serde::Serialize;
use serde_json::Value;

/// RoPE frequency scaling, as config.json's `rope_scaling` (or `rope_parameters`) describes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "rope_type", rename_all = "snake_case")]
pub enum RopeScaling {
    /// Positions divided by `factor`.
    Linear { factor: f64 },
    /// Llama 3.x frequency-band scaling.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: u64,
    },
    /// YaRN; absent optional fields take the usual defaults (beta_fast 32, beta_slow 1,
    /// mscale 1, mscale_all_dim 0).
    Yarn {
        factor: f64,
        original_max_position_embeddings: Option<u64>,
        beta_fast: f64,
        beta_slow: f64,
        mscale: f64,
        mscale_all_dim: f64,
        attention_factor: Option<f64>,
    },
}

/// A dense llama-style decoder (llama, mistral, qwen2, qwen3), fields resolved with defaults.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LlamaConfig {
    /// config.json's model_type (llama, mistral, qwen2, qwen3).
    pub model_type: String,
    /// Residual stream width.
    pub hidden_size: u64,
    /// Feed-forward (SwiGLU) width.
    pub intermediate_size: u64,
    /// Number of decoder layers.
    pub num_hidden_layers: u64,
    /// Query heads.
    pub num_attention_heads: u64,
    /// Key/value heads (defaults to the query heads).
    pub num_key_value_heads: u64,
    /// Per-head width (defaults to hidden_size / num_attention_heads).
    pub head_dim: u64,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// RoPE base.
    pub rope_theta: f64,
    /// Whether RoPE pairs neighbours (2i, 2i+1) ("traditional") instead of (i, i + d/2).
    pub rope_traditional: bool,
    /// RoPE frequency scaling, if any.
    pub rope_scaling: Option<RopeScaling>,
    /// Vocabulary size (embedding and head rows).
    pub vocab_size: u64,
    /// Trained context length, if stated.
    pub max_position_embeddings: Option<u64>,
    /// Whether the head reuses the embedding table.
    pub tie_word_embeddings: bool,
    /// Biases on q, k and v projections (qwen2 always; llama with attention_bias).
    pub qkv_bias: bool,
    /// Bias on the output projection (llama with attention_bias).
    pub o_bias: bool,
    /// Biases on gate/up/down projections.
    pub mlp_bias: bool,
    /// RMSNorm on each query and key head before RoPE (qwen3).
    pub qk_norm: bool,
    /// Sliding-window width for layers marked sliding.
    pub sliding_window: Option<u64>,
    /// Per layer: whether it attends through the sliding window.
    pub layer_sliding: Vec<bool>,
    /// Beginning-of-sequence token id, if stated.
    pub bos_token_id: Option<u32>,
    /// End-of-sequence token ids (config.json may give one or a list).
    pub eos_token_ids: Vec<u32>,
}

/// model_types this family serves.
pub const LLAMA_MODEL_TYPES: &[&str] = &["llama", "mistral", "qwen2", "qwen3"];

impl LlamaConfig {
    /// Reads and checks a config.json object; `has_lm_head` decides tying when the field is absent.
    pub fn from_json(config: &Value, has_lm_head: bool) -> Result<LlamaConfig, Refusal> {
        let f = Fields::new(config, "config.json")?;
        let model_type = f.opt_str("model_type")?.unwrap_or("llama").to_string();
        let hidden_size = f.pos("hidden_size")?;
        let heads = f.pos("num_attention_heads")?;
        let kv_heads = f.opt_u64("num_key_value_heads")?.unwrap_or(heads);
        if kv_heads == 0 || heads % kv_heads != 0 {
            return Err(Refusal::bad(
                "num_key_value_heads",
                format!("{kv_heads} does not divide num_attention_heads {heads}"),
            ));
        }
        let head_dim = match f.opt_u64("head_dim")? {
            Some(0) => return Err(Refusal::bad("head_dim", "must be positive")),
            Some(d) => d,
            None if hidden_size % heads == 0 => hidden_size / heads,
            None => {
                return Err(Refusal::bad(
                    "num_attention_heads",
                    format!(
                        "{heads} does not divide hidden_size {hidden_size} and head_dim is absent"
                    ),
                ))
            }
        };
        if head_dim % 2 != 0 {
            return Err(Refusal::bad(
                "head_dim",
                format!("{head_dim} is odd; RoPE needs pairs"),
            ));
        }
        let num_hidden_layers = f.pos("num_hidden_layers")?;
        let (rope_theta, rope_scaling) = rope(&f, &model_type)?;
        let attention_bias = f.opt_bool("attention_bias")?.unwrap_or(false);
        let is_qwen2 = model_type == "qwen2";
        let sliding_window = f.opt_u64("sliding_window")?;
        let layer_sliding = layer_sliding(&f, &model_type, num_hidden_layers, sliding_window)?;
        Ok(LlamaConfig {
            hidden_size,
            intermediate_size: f.pos("intermediate_size")?,
            num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            rms_norm_eps: f
                .opt_pos_f64("rms_norm_eps")?
                .ok_or_else(|| Refusal::MissingField {
                    field: "rms_norm_eps".into(),
                })?,
            rope_theta,
            rope_traditional: f.opt_bool("rope_traditional")?.unwrap_or(false),
            rope_scaling,
            vocab_size: f.pos("vocab_size")?,
            max_position_embeddings: f.opt_u64("max_position_embeddings")?,
            tie_word_embeddings: f.opt_bool("tie_word_embeddings")?.unwrap_or(!has_lm_head),
            qkv_bias: is_qwen2 || attention_bias,
            o_bias: !is_qwen2 && attention_bias,
            mlp_bias: f.opt_bool("mlp_bias")?.unwrap_or(false),
            qk_norm: model_type == "qwen3",
            sliding_window,
            layer_sliding,
            bos_token_id: f.token_ids("bos_token_id")?.first().copied(),
            eos_token_ids: f.token_ids("eos_token_id")?,
            model_type,
        })
    }
}

/// Reads rope_theta and rope scaling, accepting transformers 5's nested `rope_parameters`.
fn rope(f: &Fields<'_>, model_type: &str) -> Result<(f64, Option<RopeScaling>), Refusal> {
    let nested = match f.get("rope_parameters") {
        Some(v) => Some(
            v.as_object()
                .ok_or_else(|| Refusal::bad("rope_parameters", "is not a JSON object"))?,
        ),
        None => None,
    };
    let nested_theta = match nested {
        Some(obj) => Fields::with_prefix(obj, "rope_parameters.").opt_pos_f64("rope_theta")?,
        None => None,
    };
    let theta = match (f.opt_pos_f64("rope_theta")?, nested_theta) {
        (Some(t), _) | (None, Some(t)) => t,
        (None, None) => match model_type {
            "qwen2" => 1_000_000.0,
            "qwen3" => {
                return Err(Refusal::MissingField {
                    field: "rope_theta".into(),
                })
            }
            _ => 10_000.0,
        },
    };
    let scaling = match f.get("rope_scaling") {
        Some(v) => parse_scaling(v, "rope_scaling")?,
        None => match f.get("rope_parameters") {
            Some(v) => parse_scaling(v, "rope_parameters")?,
            None => None,
        },
    };
    Ok((theta, scaling))
}

/// Parses one rope scaling object; "default" means none.
fn parse_scaling(v: &Value, field: &str) -> Result<Option<RopeScaling>, Refusal> {
    let obj = v
        .as_object()
        .ok_or_else(|| Refusal::bad(field, "is not a JSON object"))?;
    let prefix = format!("{field}.");
    let s = Fields::with_prefix(obj, &prefix);
    let kind = s
        .opt_str("rope_type")?
        .or(s.opt_str("type")?)
        .unwrap_or("default");
    let factor = || {
        s.opt_pos_f64("factor")?
            .ok_or_else(|| Refusal::MissingField {
                field: format!("{field}.factor"),
            })
    };
    Ok(Some(match kind {
        "default" => return Ok(None),
        "linear" => RopeScaling::Linear { factor: factor()? },
        // Dynamic NTK rescales the frequencies by the current sequence length, so earlier keys
        // would have been rotated with other frequencies: not servable exactly.
        "dynamic" => {
            return Err(Refusal::bad(
                format!("{field}.rope_type"),
                "dynamic NTK scaling changes RoPE frequencies with the sequence length; \
                 it is not supported (use a checkpoint with default, linear, llama3 or yarn RoPE)",
            ))
        }
        "llama3" => RopeScaling::Llama3 {
            factor: factor()?,
            low_freq_factor: s.f64("low_freq_factor")?,
            high_freq_factor: s.f64("high_freq_factor")?,
            original_max_position_embeddings: s.pos("original_max_position_embeddings")?,
        },
        "yarn" => RopeScaling::Yarn {
            factor: factor()?,
            original_max_position_embeddings: s.opt_u64("original_max_position_embeddings")?,
            beta_fast: s.opt_f64("beta_fast")?.unwrap_or(32.0),
            beta_slow: s.opt_f64("beta_slow")?.unwrap_or(1.0),
            mscale: s.opt_f64("mscale")?.unwrap_or(1.0),
            mscale_all_dim: s.opt_f64("mscale_all_dim")?.unwrap_or(0.0),
            attention_factor: s.opt_f64("attention_factor")?,
        },
        other => {
            return Err(Refusal::bad(
                format!("{field}.rope_type"),
                format!(
                "'{other}' is not supported (supported: default, linear, dynamic, llama3, yarn)"
            ),
            ))
        }
    }))
}

/// Which layers use the sliding window: from `layer_types`, else all of them for mistral
/// with a window set, else none.
fn layer_sliding(
    f: &Fields<'_>,
    model_type: &str,
    layers: u64,
    window: Option<u64>,
) -> Result<Vec<bool>, Refusal> {
    let Some(types) = f.opt_str_list("layer_types")? else {
        let all = model_type == "mistral" && window.is_some();
        return Ok(vec![all; layers as usize]);
    };
    if types.len() as u64 != layers {
        return Err(Refusal::PatternLengthMismatch {
            field: "layer_types".into(),
            expected: layers,
            found: types.len() as u64,
        });
    }
    let mut out = Vec::with_capacity(types.len());
    for (layer, t) in types.iter().enumerate() {
        out.push(match *t {
            "full_attention" => false,
            "sliding_attention" if window.is_some() => true,
            "sliding_attention" => {
                return Err(Refusal::MissingField {
                    field: "sliding_window".into(),
                })
            }
            other => {
                return Err(Refusal::UnknownBlockType {
                    layer,
                    block_type: other.into(),
                    known: "full_attention, sliding_attention".into(),
                })
            }
        });
    }
    Ok(out)
}
