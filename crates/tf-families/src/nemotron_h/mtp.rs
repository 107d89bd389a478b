//! Nemotron-H MTP (multi-token prediction) layers: `num_nextn_predict_layers` steps, each a
//! short stack of Nemotron blocks (`mtp_hybrid_override_pattern`, e.g. `*E`) stored flat as
//! `mtp.layers.{i}.*`. The first block of a step carries the fusion (`enorm`, `hnorm`,
//! `eh_proj`), the last one `final_layernorm`. See docs/families/nemotron_h.md (MTP).

use super::config::{canonical_type, merge, resolve_block, LayerType, NemotronBlock, KNOWN_TYPES};
use super::tensors::{self, NemotronLayer};
use crate::fields::Fields;
use crate::formats::Role;
use crate::index::{Index, TensorClass};
use crate::refusal::Refusal;
use serde::Serialize;
use serde_json::Value;
use tf_formats::TensorEntry;

/// Tensor-name prefix of the MTP layers.
pub const MTP_PREFIX: &str = "mtp.layers.";

/// The fusion at the start of an MTP step: `eh_proj(cat(enorm(embed), hnorm(hidden)))`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MtpStart {
    /// `enorm.weight` `[hidden]`: RMSNorm gain on the next token's embedding.
    pub enorm: TensorEntry,
    /// `hnorm.weight` `[hidden]`: RMSNorm gain on the conditioning hidden state.
    pub hnorm: TensorEntry,
    /// `eh_proj.weight` `[hidden, 2·hidden]`; input columns: embedding first, then hidden.
    pub eh_proj: TensorEntry,
}

/// One MTP block: a backbone-style layer, plus the step's start fusion or end norm.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MtpSublayer {
    /// Present on the first block of a step.
    pub start: Option<MtpStart>,
    /// `norm.weight` and the mixer, as in a backbone layer.
    pub layer: NemotronLayer,
    /// `final_layernorm.weight`, present on the last block of a step.
    pub final_norm: Option<TensorEntry>,
}

/// The MTP layers of a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NemotronMtp {
    /// Steps stored (`num_nextn_predict_layers`).
    pub steps: usize,
    /// The resolved block of each sublayer of one step.
    pub blocks: Vec<NemotronBlock>,
    /// `steps × blocks.len()` sublayers, flat (`mtp.layers.{i}`).
    pub sublayers: Vec<MtpSublayer>,
}

/// Plans the MTP layers when the config declares steps and the checkpoint carries `mtp.*`
/// tensors (`None` otherwise: such a checkpoint is served without them). A malformed MTP
/// block is refused by name (missing or misshapen tensor, missing or unknown pattern).
pub(crate) fn plan(
    ix: &mut Index<'_>,
    config: &Value,
    steps: u64,
    backbone_layers: usize,
    hidden: u64,
) -> Result<Option<NemotronMtp>, Refusal> {
    if steps == 0 || !ix.any(|n| n.starts_with(MTP_PREFIX)) {
        return Ok(None);
    }
    let blocks = blocks(config, backbone_layers)?;
    let per = blocks.len();
    let mut sublayers = Vec::with_capacity(steps as usize * per);
    for i in 0..steps as usize * per {
        let p = format!("{MTP_PREFIX}{i}.");
        let l = backbone_layers + i;
        let norm = |ix: &mut Index<'_>, n: &str| {
            ix.require(
                &format!("{p}{n}.weight"),
                &[hidden],
                Role::Dense,
                TensorClass::Norm,
                Some(l),
            )
        };
        let start = if i % per == 0 {
            Some(MtpStart {
                enorm: norm(ix, "enorm")?,
                hnorm: norm(ix, "hnorm")?,
                eh_proj: ix.require(
                    &format!("{p}eh_proj.weight"),
                    &[hidden, 2 * hidden],
                    Role::Matrix,
                    TensorClass::Mlp,
                    Some(l),
                )?,
            })
        } else {
            None
        };
        let layer = tensors::layer(ix, &p, l, &blocks[i % per], hidden)?;
        let final_norm = if i % per == per - 1 {
            Some(norm(ix, "final_layernorm")?)
        } else {
            None
        };
        sublayers.push(MtpSublayer {
            start,
            layer,
            final_norm,
        });
    }
    Ok(Some(NemotronMtp {
        steps: steps as usize,
        blocks,
        sublayers,
    }))
}

/// The blocks of one MTP step, from `mtp_hybrid_override_pattern` (string or list) or
/// `mtp_layers_block_type`; Puzzle configs may give per-block values in `mtp_block_configs`
/// (same form as `block_configs`), else the global fields apply. `first_layer` numbers the
/// blocks after the backbone's layers in refusals.
fn blocks(config: &Value, first_layer: usize) -> Result<Vec<NemotronBlock>, Refusal> {
    let f = Fields::new(config, "config.json")?;
    let obj = config
        .as_object()
        .ok_or_else(|| Refusal::bad("config.json", "not an object"))?;
    let hidden = f.pos("hidden_size")?;
    let types: Vec<LayerType> = if let Some(list) = f.get("mtp_block_configs") {
        let list = list
            .as_array()
            .ok_or_else(|| Refusal::bad("mtp_block_configs", "is not a list"))?;
        let mut out = Vec::with_capacity(list.len());
        for (i, item) in list.iter().enumerate() {
            let field = format!("mtp_block_configs[{i}]");
            let o = item
                .as_object()
                .ok_or_else(|| Refusal::bad(&field, "is not an object"))?;
            let t = o.get("block_type").and_then(Value::as_str).ok_or_else(|| {
                Refusal::MissingField {
                    field: format!("{field}.block_type"),
                }
            })?;
            let kind = canonical_type(t).ok_or_else(|| {
                Refusal::bad(
                    &field,
                    format!("unknown block type '{t}' (known: {KNOWN_TYPES})"),
                )
            })?;
            let mut overrides = o.clone();
            overrides.remove("block_type");
            out.push((kind, Some(overrides)));
        }
        out
    } else {
        let (field, items): (&str, Vec<String>) = match f.get("mtp_hybrid_override_pattern") {
            Some(Value::String(s)) => (
                "mtp_hybrid_override_pattern",
                s.chars().map(String::from).collect(),
            ),
            Some(_) => (
                "mtp_hybrid_override_pattern",
                f.opt_str_list("mtp_hybrid_override_pattern")?
                    .unwrap_or_default()
                    .into_iter()
                    .map(String::from)
                    .collect(),
            ),
            None => (
                "mtp_layers_block_type",
                f.opt_str_list("mtp_layers_block_type")?
                    .ok_or_else(|| Refusal::MissingField {
                        field: "mtp_hybrid_override_pattern".into(),
                    })?
                    .into_iter()
                    .map(String::from)
                    .collect(),
            ),
        };
        items
            .iter()
            .map(|t| match canonical_type(t) {
                Some(c) => Ok((c, None)),
                None => Err(Refusal::bad(
                    field,
                    format!("unknown MTP block type '{t}' (known: {KNOWN_TYPES})"),
                )),
            })
            .collect::<Result<_, _>>()?
    };
    if types.is_empty() {
        return Err(Refusal::bad(
            "mtp_hybrid_override_pattern",
            "describes no MTP blocks",
        ));
    }
    let mut blocks = Vec::with_capacity(types.len());
    for (i, (kind, overrides)) in types.iter().enumerate() {
        let merged = merge(obj, overrides.as_ref());
        let prefix = if overrides.is_some() {
            format!("mtp_block_configs[{i}].")
        } else {
            String::new()
        };
        let lf = Fields::with_prefix(&merged, &prefix);
        blocks.push(resolve_block(first_layer + i, kind, &lf, hidden)?);
    }
    Ok(blocks)
}
