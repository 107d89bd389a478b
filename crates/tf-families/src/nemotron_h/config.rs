//! Nemotron-H configs: the global fields, the layer pattern (`nemotron_h`) or per-layer
//! `block_configs` (`nemotron_h_puzzle`), resolved into one typed block per layer.

use crate::fields::Fields;
use crate::refusal::Refusal;
use serde::Serialize;
use serde_json::{Map, Value};

/// A Mamba2 mixer's dimensions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MambaSpec {
    /// SSM heads.
    pub num_heads: u64,
    /// Channels per head.
    pub head_dim: u64,
    /// SSM state size per group.
    pub ssm_state_size: u64,
    /// B/C groups.
    pub n_groups: u64,
    /// Causal conv kernel width.
    pub conv_kernel: u64,
    /// Whether conv1d has a bias.
    pub use_conv_bias: bool,
    /// Whether in_proj/out_proj have biases (`mamba_proj_bias`).
    pub proj_bias: bool,
    /// Clamp for dt after softplus, (min, max); max may be infinite.
    pub time_step_limit: (f64, f64),
}

impl MambaSpec {
    /// Width of the SSM input/output (heads × head_dim).
    pub fn intermediate(&self) -> u64 {
        self.num_heads * self.head_dim
    }
    /// Channels through the causal conv (x, B and C).
    pub fn conv_dim(&self) -> u64 {
        self.intermediate() + 2 * self.n_groups * self.ssm_state_size
    }
    /// Rows of in_proj: gate z, conv input (x, B, C) and dt.
    pub fn in_proj_rows(&self) -> u64 {
        self.intermediate() + self.conv_dim() + self.num_heads
    }
}

/// An attention mixer's dimensions (Nemotron-H attention has no RoPE).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttentionSpec {
    /// Query heads.
    pub num_heads: u64,
    /// Key/value heads.
    pub num_kv_heads: u64,
    /// Per-head width.
    pub head_dim: u64,
    /// Biases on q/k/v/o.
    pub bias: bool,
}

/// A dense relu² MLP's dimensions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MlpSpec {
    /// Hidden width of up/down.
    pub intermediate_size: u64,
    /// Biases on up/down.
    pub bias: bool,
}

/// A MoE layer's routing and expert dimensions (this layer's own values).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoeSpec {
    /// Routed experts.
    pub n_routed_experts: u64,
    /// Experts chosen per token.
    pub num_experts_per_tok: u64,
    /// Hidden width of each routed expert.
    pub moe_intermediate_size: u64,
    /// Hidden width of the shared expert, when there is one.
    pub shared_intermediate_size: Option<u64>,
    /// Expert groups for grouped routing (1 = none).
    pub n_group: u64,
    /// Groups kept per token.
    pub topk_group: u64,
    /// Multiplier on the combined routing weights.
    pub routed_scaling_factor: f64,
    /// Whether the top-k weights are renormalised to sum to one.
    pub norm_topk_prob: bool,
    /// Latent width the routed experts work at (fc1/fc2_latent_proj), if any.
    pub latent_size: Option<u64>,
    /// Biases on expert/latent/shared projections (`mlp_bias`).
    pub bias: bool,
}

impl MoeSpec {
    /// Width of the routed experts' input and output.
    pub fn expert_dim(&self, hidden: u64) -> u64 {
        self.latent_size.unwrap_or(hidden)
    }
}

/// One layer's block, with its own resolved values.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum NemotronBlock {
    /// Mamba2 mixer ('M').
    Mamba(MambaSpec),
    /// Attention mixer ('*').
    Attention(AttentionSpec),
    /// relu² MLP ('-').
    Mlp(MlpSpec),
    /// Mixture of experts ('E').
    Moe(MoeSpec),
}

impl NemotronBlock {
    /// The pattern character of this block type.
    pub fn symbol(&self) -> char {
        match self {
            NemotronBlock::Mamba(_) => 'M',
            NemotronBlock::Attention(_) => '*',
            NemotronBlock::Mlp(_) => '-',
            NemotronBlock::Moe(_) => 'E',
        }
    }
    /// The block type's name as block_configs spells it.
    pub fn type_name(&self) -> &'static str {
        match self {
            NemotronBlock::Mamba(_) => "mamba",
            NemotronBlock::Attention(_) => "attention",
            NemotronBlock::Mlp(_) => "mlp",
            NemotronBlock::Moe(_) => "moe",
        }
    }
}

/// A resolved Nemotron-H (or Puzzle) config.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NemotronHConfig {
    /// "nemotron_h" or "nemotron_h_puzzle".
    pub model_type: String,
    /// Residual stream width.
    pub hidden_size: u64,
    /// Vocabulary size.
    pub vocab_size: u64,
    /// RMSNorm epsilon (block norms, gated norm, final norm).
    pub layer_norm_epsilon: f64,
    /// Trained context length, if stated.
    pub max_position_embeddings: Option<u64>,
    /// Whether the head reuses the embedding table.
    pub tie_word_embeddings: bool,
    /// Beginning-of-sequence token id, if stated.
    pub bos_token_id: Option<u32>,
    /// End-of-sequence token ids.
    pub eos_token_ids: Vec<u32>,
    /// One block per layer, in order.
    pub layers: Vec<NemotronBlock>,
    /// MTP (multi-token prediction) steps the config declares (`num_nextn_predict_layers`;
    /// 0 when absent). The MTP blocks are resolved (`mtp::plan`) only when the checkpoint
    /// carries `mtp.*` tensors.
    pub num_nextn_predict_layers: u64,
}

/// Block type names and pattern characters Nemotron-H configs use.
pub(super) const KNOWN_TYPES: &str = "M/mamba, */attention, -/mlp, E/moe";

/// Maps a block type spelling (pattern char or name) to its canonical name.
pub(super) fn canonical_type(t: &str) -> Option<&'static str> {
    Some(match t {
        "M" | "mamba" | "mamba2" | "linear_attention" | "conv" => "mamba",
        "*" | "attention" | "full_attention" => "attention",
        "-" | "mlp" => "mlp",
        "E" | "moe" => "moe",
        _ => return None,
    })
}

/// Reads a config.json of model_type nemotron_h or nemotron_h_puzzle.
pub fn parse(config: &Value, has_lm_head: bool) -> Result<NemotronHConfig, Refusal> {
    let f = Fields::new(config, "config.json")?;
    let obj = config
        .as_object()
        .ok_or_else(|| Refusal::bad("config.json", "not an object"))?;
    let model_type = f.opt_str("model_type")?.unwrap_or("nemotron_h").to_string();
    let hidden_size = f.pos("hidden_size")?;
    let types = if model_type == "nemotron_h_puzzle" {
        puzzle_types(&f)?
    } else {
        pattern_types(&f)?
    };
    if let Some(n) = f.opt_u64("num_hidden_layers")? {
        if n != types.len() as u64 {
            let field = if model_type == "nemotron_h_puzzle" {
                "block_configs"
            } else {
                "hybrid_override_pattern"
            };
            return Err(Refusal::PatternLengthMismatch {
                field: field.into(),
                expected: n,
                found: types.len() as u64,
            });
        }
    }
    if types.is_empty() {
        return Err(Refusal::bad(
            "hybrid_override_pattern",
            "describes no layers",
        ));
    }
    let mut layers = Vec::with_capacity(types.len());
    for (layer, (kind, overrides)) in types.iter().enumerate() {
        let merged = merge(obj, overrides.as_ref());
        let prefix = if overrides.is_some() {
            format!("block_configs[{layer}].")
        } else {
            String::new()
        };
        let lf = Fields::with_prefix(&merged, &prefix);
        layers.push(resolve_block(layer, kind, &lf, hidden_size)?);
    }
    Ok(NemotronHConfig {
        hidden_size,
        vocab_size: f.pos("vocab_size")?,
        layer_norm_epsilon: f
            .opt_pos_f64("layer_norm_epsilon")?
            .or(f.opt_pos_f64("rms_norm_eps")?)
            .ok_or_else(|| Refusal::MissingField {
                field: "layer_norm_epsilon".into(),
            })?,
        max_position_embeddings: f.opt_u64("max_position_embeddings")?,
        tie_word_embeddings: f.opt_bool("tie_word_embeddings")?.unwrap_or(!has_lm_head),
        bos_token_id: f.token_ids("bos_token_id")?.first().copied(),
        eos_token_ids: f.token_ids("eos_token_id")?,
        num_nextn_predict_layers: f.opt_u64("num_nextn_predict_layers")?.unwrap_or(0),
        model_type,
        layers,
    })
}

/// A layer's canonical type name and, for Puzzle, its override object.
pub(super) type LayerType = (&'static str, Option<Map<String, Value>>);

/// Layer types from hybrid_override_pattern (string or list) or layers_block_type/layer_types.
fn pattern_types(f: &Fields<'_>) -> Result<Vec<LayerType>, Refusal> {
    let (field, items): (&str, Vec<String>) = match f.get("hybrid_override_pattern") {
        Some(Value::String(s)) => (
            "hybrid_override_pattern",
            s.chars().map(String::from).collect(),
        ),
        Some(_) => {
            let list = f
                .opt_str_list("hybrid_override_pattern")?
                .unwrap_or_default();
            (
                "hybrid_override_pattern",
                list.into_iter().map(String::from).collect(),
            )
        }
        None => {
            let field = if f.get("layers_block_type").is_some() {
                "layers_block_type"
            } else {
                "layer_types"
            };
            let list = f
                .opt_str_list(field)?
                .ok_or_else(|| Refusal::MissingField {
                    field: "hybrid_override_pattern".into(),
                })?;
            (field, list.into_iter().map(String::from).collect())
        }
    };
    let _ = field;
    items
        .iter()
        .enumerate()
        .map(|(layer, t)| match canonical_type(t) {
            Some(c) => Ok((c, None)),
            None => Err(Refusal::UnknownBlockType {
                layer,
                block_type: t.clone(),
                known: KNOWN_TYPES.into(),
            }),
        })
        .collect()
}

/// Layer types and per-layer overrides from a Puzzle config's block_configs.
fn puzzle_types(f: &Fields<'_>) -> Result<Vec<LayerType>, Refusal> {
    let list = f
        .get("block_configs")
        .ok_or_else(|| Refusal::MissingField {
            field: "block_configs".into(),
        })?
        .as_array()
        .ok_or_else(|| Refusal::bad("block_configs", "is not a list"))?;
    let mut out = Vec::with_capacity(list.len());
    for (layer, item) in list.iter().enumerate() {
        let field = format!("block_configs[{layer}]");
        let obj = item
            .as_object()
            .ok_or_else(|| Refusal::bad(&field, "is not an object"))?;
        let t = obj.get("block_type").ok_or_else(|| Refusal::MissingField {
            field: format!("{field}.block_type"),
        })?;
        let t = t
            .as_str()
            .ok_or_else(|| Refusal::bad(format!("{field}.block_type"), "is not a string"))?;
        let kind = canonical_type(t).ok_or_else(|| Refusal::UnknownBlockType {
            layer,
            block_type: t.into(),
            known: KNOWN_TYPES.into(),
        })?;
        let mut overrides = obj.clone();
        overrides.remove("block_type");
        out.push((kind, Some(overrides)));
    }
    Ok(out)
}

/// The global fields with one layer's overrides laid over them.
pub(super) fn merge(
    global: &Map<String, Value>,
    overrides: Option<&Map<String, Value>>,
) -> Map<String, Value> {
    let mut merged = global.clone();
    merged.remove("block_configs");
    if let Some(o) = overrides {
        for (k, v) in o {
            merged.insert(k.clone(), v.clone());
        }
    }
    merged
}

/// Resolves one layer's typed block from its merged fields.
pub(super) fn resolve_block(
    layer: usize,
    kind: &str,
    f: &Fields<'_>,
    hidden: u64,
) -> Result<NemotronBlock, Refusal> {
    Ok(match kind {
        "mamba" => NemotronBlock::Mamba(mamba(f)?),
        "attention" => {
            let num_heads = f.pos("num_attention_heads")?;
            let num_kv_heads = f.opt_u64("num_key_value_heads")?.unwrap_or(num_heads);
            if num_kv_heads == 0 || num_heads % num_kv_heads != 0 {
                return Err(Refusal::bad(
                    "num_key_value_heads",
                    format!("{num_kv_heads} does not divide num_attention_heads {num_heads}"),
                ));
            }
            let head_dim = match f.opt_u64("head_dim")? {
                Some(d) if d > 0 => d,
                _ if hidden % num_heads == 0 => hidden / num_heads,
                _ => {
                    return Err(Refusal::MissingField {
                        field: "head_dim".into(),
                    })
                }
            };
            let bias = f.opt_bool("attention_bias")?.unwrap_or(false);
            NemotronBlock::Attention(AttentionSpec {
                num_heads,
                num_kv_heads,
                head_dim,
                bias,
            })
        }
        "mlp" => NemotronBlock::Mlp(MlpSpec {
            intermediate_size: f.pos("intermediate_size")?,
            bias: f.opt_bool("mlp_bias")?.unwrap_or(false),
        }),
        _ => NemotronBlock::Moe(moe(layer, f)?),
    })
}

fn mamba(f: &Fields<'_>) -> Result<MambaSpec, Refusal> {
    let num_heads = f.pos("mamba_num_heads")?;
    let n_groups = f.pos("n_groups")?;
    if num_heads % n_groups != 0 {
        return Err(Refusal::bad(
            "n_groups",
            format!("{n_groups} does not divide mamba_num_heads {num_heads}"),
        ));
    }
    let time_step_limit = match f.opt_f64_list("time_step_limit")? {
        None => (0.0, f64::INFINITY),
        Some(v) if v.len() == 2 && v[0] <= v[1] => (v[0], v[1]),
        Some(v) => {
            return Err(Refusal::bad(
                "time_step_limit",
                format!("expected [min, max], found {v:?}"),
            ))
        }
    };
    Ok(MambaSpec {
        num_heads,
        head_dim: f.pos("mamba_head_dim")?,
        ssm_state_size: f.pos("ssm_state_size")?,
        n_groups,
        conv_kernel: f.pos("conv_kernel")?,
        use_conv_bias: f.opt_bool("use_conv_bias")?.unwrap_or(true),
        proj_bias: f.opt_bool("mamba_proj_bias")?.unwrap_or(false),
        time_step_limit,
    })
}

fn moe(layer: usize, f: &Fields<'_>) -> Result<MoeSpec, Refusal> {
    let experts = f.pos("n_routed_experts")?;
    let top_k = f.pos("num_experts_per_tok")?;
    if top_k > experts {
        return Err(Refusal::TopKExceedsExperts {
            layer,
            top_k,
            experts,
        });
    }
    let n_group = f.opt_u64("n_group")?.unwrap_or(1).max(1);
    let topk_group = f.opt_u64("topk_group")?.unwrap_or(1).max(1);
    if n_group > 1 {
        if experts % n_group != 0 {
            return Err(Refusal::bad(
                "n_group",
                format!("{n_group} groups do not divide {experts} experts (layer {layer})"),
            ));
        }
        if topk_group > n_group || top_k > topk_group * (experts / n_group) {
            return Err(Refusal::bad(
                "topk_group",
                format!("layer {layer}: keeping {topk_group} of {n_group} groups leaves too few experts for top-{top_k}"),
            ));
        }
    }
    let shared = f.opt_u64("n_shared_experts")?.unwrap_or(0);
    let shared_intermediate_size = if shared > 0 {
        if shared > 1 {
            return Err(Refusal::bad(
                "n_shared_experts",
                format!("{shared} shared experts; the family supports one"),
            ));
        }
        Some(f.pos("moe_shared_expert_intermediate_size")?)
    } else {
        None
    };
    let norm_topk_prob = f
        .opt_bool("norm_topk_prob")?
        .ok_or_else(|| Refusal::MissingField {
            field: "norm_topk_prob".into(),
        })?;
    let latent_size = match f.opt_u64("moe_latent_size")? {
        Some(0) => return Err(Refusal::bad("moe_latent_size", "must be positive")),
        other => other,
    };
    Ok(MoeSpec {
        n_routed_experts: experts,
        num_experts_per_tok: top_k,
        moe_intermediate_size: f.pos("moe_intermediate_size")?,
        shared_intermediate_size,
        n_group,
        topk_group,
        routed_scaling_factor: f.opt_f64("routed_scaling_factor")?.unwrap_or(1.0),
        norm_topk_prob,
        latent_size,
        bias: f.opt_bool("mlp_bias")?.unwrap_or(false),
    })
}
