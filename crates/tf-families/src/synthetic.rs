//! Synthetic checkpoints: a config plus the tensor list its family's plan expects, in a chosen
//! stored layout, with no bytes on the host (the backend generates the values where they live,
//! see `tf_formats::checkpoint::synthetic`).
//!
//! The tensor list is asked of the family's own [`plan`](crate::plan): starting from nothing,
//! each named refusal (a missing tensor, a wrong shape, a format its role cannot take) is
//! answered by adding or correcting one entry until the plan accepts. So a synthetic checkpoint
//! is, by construction, one the family serves; the family's hints for the layout it prefers are
//! [`hint_missing`] (stacked experts rather than one tensor per expert).
//!
//! Entry points: [`checkpoint`] (config name, JSON text or path, and a layout string, for the
//! CLI), [`checkpoint_from`] and [`synthetic_entries`].

#[cfg(test)]
mod tests;

use crate::refusal::Refusal;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use tf_formats::checkpoint::{parse_config_json, Checkpoint};
use tf_formats::gguf::GgmlType;
use tf_formats::mlx_affine::QuantizationConfig;
use tf_formats::{DType, TensorEntry, WeightFormat};

/// The seed used when the caller names none.
pub const DEFAULT_SEED: u64 = 0x7EA5_0F01_D5EE_D000;

/// Named configs (configs/synthetic/*.json; README.md there cites their sources).
pub const NAMED_CONFIGS: [(&str, &str); 4] = [
    (
        "lightning",
        include_str!("../../../configs/synthetic/lightning.json"),
    ),
    ("bolt", include_str!("../../../configs/synthetic/bolt.json")),
    (
        "llama3-8b",
        include_str!("../../../configs/synthetic/llama3-8b.json"),
    ),
    (
        "smollm2-135m",
        include_str!("../../../configs/synthetic/smollm2-135m.json"),
    ),
];

/// Most refusals answered before giving up (each tensor takes two or three).
const MAX_STEPS: usize = 1_000_000;

/// Why a synthetic checkpoint could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SyntheticError {
    /// The config source is neither a named config, JSON text, nor a readable file.
    #[error("synthetic config '{source_name}': {reason} (give one of {known}, JSON text, a config.json or a directory holding one)")]
    Config {
        source_name: String,
        reason: String,
        known: String,
    },
    /// The layout string could not be read.
    #[error("synthetic layout '{spec}': {reason} (e.g. q4_0, q4_1,embed=q8_0,dense=f32, q8_0, bf16, mlx4g64, mlx4g64,head=bf16)")]
    Layout { spec: String, reason: String },
    /// The family refused the config itself (not a tensor the generator can supply).
    #[error("the family refuses this config: {0}")]
    Refused(Refusal),
    /// A refusal the generator cannot answer (it would repeat forever).
    #[error("no synthetic tensor list satisfies the plan: {0}")]
    Stuck(Refusal),
    /// The checkpoint could not be assembled.
    #[error("{0}")]
    Checkpoint(#[from] tf_formats::checkpoint::CheckpointError),
}

/// The stored layout of a synthetic checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntheticQuant {
    /// Format of every matrix the plan multiplies (linear layers, experts).
    pub matrices: WeightFormat,
    /// Format of the token embedding table (`None`: as the matrices).
    pub embedding: Option<WeightFormat>,
    /// Format of the output head (`None`: as the matrices).
    pub head: Option<WeightFormat>,
    /// Float type of everything the plan needs dense (norms, routers, Mamba parameters,
    /// biases, latent projections, matrices whose width is not whole blocks).
    pub dense: DType,
    /// Per-module MLX specs (config.json's `quantization` overrides), when read from a config.
    pub mlx_modules: Option<QuantizationConfig>,
}

fn layout_err(spec: &str, reason: impl Into<String>) -> SyntheticError {
    SyntheticError::Layout {
        spec: spec.into(),
        reason: reason.into(),
    }
}

/// One format name: f32, f16, bf16, a GGUF type (q4_0, q4_1, q8_0, q4_k, q6_k, ...), or
/// `mlx<bits>[g<group>]` (MLX affine, BF16 scales; group 64 by default).
pub fn parse_format(s: &str) -> Option<WeightFormat> {
    let s = s.trim().to_ascii_lowercase();
    Some(match s.as_str() {
        "f32" => WeightFormat::Dense(DType::F32),
        "f16" => WeightFormat::Dense(DType::F16),
        "bf16" => WeightFormat::Dense(DType::BF16),
        "q4_0" => WeightFormat::Gguf(GgmlType::Q4_0),
        "q4_1" => WeightFormat::Gguf(GgmlType::Q4_1),
        "q5_0" => WeightFormat::Gguf(GgmlType::Q5_0),
        "q5_1" => WeightFormat::Gguf(GgmlType::Q5_1),
        "q8_0" => WeightFormat::Gguf(GgmlType::Q8_0),
        "q4_k" => WeightFormat::Gguf(GgmlType::Q4K),
        "q6_k" => WeightFormat::Gguf(GgmlType::Q6K),
        _ => {
            let rest = s.strip_prefix("mlx")?;
            let (bits, group) = rest.split_once('g').unwrap_or((rest, "64"));
            WeightFormat::MlxAffine {
                bits: bits.parse().ok()?,
                group_size: group.parse().ok()?,
                scales: DType::BF16,
            }
        }
    })
}

impl SyntheticQuant {
    /// Every matrix in `matrices`, dense tensors in `dense`.
    pub fn uniform(matrices: WeightFormat, dense: DType) -> SyntheticQuant {
        SyntheticQuant {
            matrices,
            embedding: None,
            head: None,
            dense,
            mlx_modules: None,
        }
    }

    /// Reads `FORMAT[,embed=FORMAT][,head=FORMAT][,dense=f32|f16|bf16]`; dense defaults to F32
    /// for GGUF matrices (as GGUF files store norms) and BF16 otherwise.
    pub fn parse(spec: &str) -> Result<SyntheticQuant, SyntheticError> {
        let mut parts = spec.split(',');
        let first = parts.next().unwrap_or_default();
        let matrices = parse_format(first)
            .ok_or_else(|| layout_err(spec, format!("unknown format '{first}'")))?;
        let dense = match matrices {
            WeightFormat::Gguf(_) => DType::F32,
            _ => DType::BF16,
        };
        let mut q = SyntheticQuant::uniform(matrices, dense);
        for part in parts {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| layout_err(spec, format!("expected key=format, found '{part}'")))?;
            let f = parse_format(value)
                .ok_or_else(|| layout_err(spec, format!("unknown format '{value}'")))?;
            match key.trim() {
                "embed" | "embedding" => q.embedding = Some(f),
                "head" | "lm_head" => q.head = Some(f),
                "dense" => match f {
                    WeightFormat::Dense(d) => q.dense = d,
                    other => {
                        return Err(layout_err(
                            spec,
                            format!("dense must be a float type, found {other}"),
                        ))
                    }
                },
                other => {
                    return Err(layout_err(
                        spec,
                        format!("unknown key '{other}' (embed, head, dense)"),
                    ))
                }
            }
        }
        Ok(q)
    }

    /// The layout a config.json describes: its MLX `quantization` (every module by its own
    /// spec, `false` overrides left BF16, BF16 scales), else BF16 throughout.
    pub fn from_config(config: &Value) -> Result<SyntheticQuant, SyntheticError> {
        let qc = QuantizationConfig::from_config(config)
            .map_err(|e| layout_err("config.json quantization", e.to_string()))?;
        Ok(match qc {
            Some(qc) => SyntheticQuant {
                matrices: mlx(qc.default.bits, qc.default.group_size),
                embedding: None,
                head: None,
                dense: DType::BF16,
                mlx_modules: Some(qc),
            },
            None => SyntheticQuant::uniform(WeightFormat::Dense(DType::BF16), DType::BF16),
        })
    }

    /// The format a matrix of this name is first given.
    pub fn matrix_format(&self, name: &str) -> WeightFormat {
        if let Some(qc) = &self.mlx_modules {
            let module = name.strip_suffix(".weight").unwrap_or(name);
            return match qc.spec_for(module) {
                Some(s) => mlx(s.bits, s.group_size),
                None => WeightFormat::Dense(self.dense),
            };
        }
        if name == "lm_head.weight" {
            self.head.unwrap_or(self.matrices)
        } else if name.ends_with("embed_tokens.weight") || name.ends_with("embeddings.weight") {
            self.embedding.unwrap_or(self.matrices)
        } else {
            self.matrices
        }
    }
}

fn mlx(bits: u8, group_size: u32) -> WeightFormat {
    WeightFormat::MlxAffine {
        bits,
        group_size,
        scales: DType::BF16,
    }
}

/// Whether a name is a dense-only tensor by its form (a first guess, corrected by the plan).
fn looks_dense(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    name.ends_with("norm.weight")
        || name.ends_with("norm_f.weight")
        || name.ends_with("conv1d.weight")
        || name.ends_with("mixer.gate.weight")
        || matches!(
            last,
            "bias" | "A_log" | "D" | "dt_bias" | "e_score_correction_bias"
        )
}

/// A family's preferred answer to a missing tensor, when it is not the tensor itself: the
/// Nemotron-H plan falls back to one tensor per expert when no stacked form is present, so the
/// stacked `switch_mlp.fc1/fc2` (MLX form: two tensors instead of two per expert) are added.
pub fn hint_missing(name: &str) -> Option<Vec<String>> {
    let m = name.strip_suffix("experts.0.up_proj.weight")?;
    Some(vec![
        format!("{m}switch_mlp.fc1.weight"),
        format!("{m}switch_mlp.fc2.weight"),
    ])
}

/// The entries being built, by name.
struct Draft<'q> {
    entries: Vec<TensorEntry>,
    at: HashMap<String, usize>,
    quant: &'q SyntheticQuant,
}

impl Draft<'_> {
    fn add(&mut self, name: &str) -> bool {
        if self.at.contains_key(name) {
            return false;
        }
        let format = if looks_dense(name) {
            WeightFormat::Dense(self.quant.dense)
        } else {
            self.quant.matrix_format(name)
        };
        self.at.insert(name.into(), self.entries.len());
        self.entries.push(TensorEntry {
            name: name.into(),
            format,
            shape: vec![1],
        });
        true
    }

    fn get(&mut self, name: &str) -> Option<&mut TensorEntry> {
        let i = *self.at.get(name)?;
        self.entries.get_mut(i)
    }

    fn set_shape(&mut self, name: &str, shape: &[u64]) -> bool {
        match self.get(name) {
            Some(e) if e.shape != shape => {
                e.shape = shape.to_vec();
                true
            }
            _ => false,
        }
    }

    fn set_format(&mut self, name: &str, format: WeightFormat) -> bool {
        match self.get(name) {
            Some(e) if e.format != format => {
                e.format = format;
                true
            }
            _ => false,
        }
    }

    fn remove(&mut self, name: &str) -> bool {
        let Some(i) = self.at.remove(name) else {
            return false;
        };
        self.entries.remove(i);
        for (j, e) in self.entries.iter().enumerate().skip(i) {
            self.at.insert(e.name.clone(), j);
        }
        true
    }

    /// Answers one refusal; `Ok(false)` when it changed nothing (the refusal stands).
    fn answer(&mut self, r: &Refusal, prefix: &str) -> bool {
        let dense = WeightFormat::Dense(self.quant.dense);
        let latent = |layer: &usize, which: &str| {
            format!("{prefix}.layers.{layer}.mixer.{which}_latent_proj.weight")
        };
        match r {
            Refusal::MissingTensor { name } => match hint_missing(name) {
                Some(names) => names.iter().fold(false, |c, n| self.add(n) | c),
                None => self.add(name),
            },
            Refusal::ShapeMismatch { name, expected, .. } => self.set_shape(name, expected),
            Refusal::MustBeDense { tensor, .. }
            | Refusal::UnsupportedQuantization { tensor, .. }
            | Refusal::QuantizedShape { tensor, .. } => self.set_format(tensor, dense),
            Refusal::UnexpectedTensor { name } => self.remove(name),
            Refusal::LatentProjectionMissing { layer, which } => self.add(&latent(layer, which)),
            Refusal::LatentProjectionQuantized { layer, which, .. }
            | Refusal::LatentProjectionDType { layer, which, .. } => {
                self.set_format(&latent(layer, which), WeightFormat::Dense(DType::BF16))
            }
            _ => false,
        }
    }
}

/// Whether a refusal is about the tensor list (answerable) rather than the config.
fn about_tensors(r: &Refusal) -> bool {
    matches!(
        r,
        Refusal::MissingTensor { .. }
            | Refusal::ShapeMismatch { .. }
            | Refusal::MustBeDense { .. }
            | Refusal::UnsupportedQuantization { .. }
            | Refusal::QuantizedShape { .. }
            | Refusal::UnexpectedTensor { .. }
            | Refusal::LatentProjectionMissing { .. }
            | Refusal::LatentProjectionQuantized { .. }
            | Refusal::LatentProjectionDType { .. }
            | Refusal::LatentProjectionTransposed { .. }
            | Refusal::RoutedExpertsOverHidden { .. }
    )
}

/// The tensor list the family of `config` expects, in `quant`'s layout: canonical names,
/// shapes and formats, such that [`crate::plan`] accepts `(config, entries)`.
pub fn synthetic_entries(
    config: &Value,
    quant: &SyntheticQuant,
) -> Result<Vec<TensorEntry>, SyntheticError> {
    let mut draft = Draft {
        entries: Vec::new(),
        at: HashMap::new(),
        quant,
    };
    for _ in 0..MAX_STEPS {
        let refusal = match crate::plan(config, &draft.entries) {
            Ok(_) => return Ok(draft.entries),
            Err(r) => r,
        };
        if !about_tensors(&refusal) {
            return Err(SyntheticError::Refused(refusal));
        }
        let prefix = if draft.at.contains_key("model.embeddings.weight") {
            "model"
        } else {
            "backbone"
        };
        if !draft.answer(&refusal, prefix) {
            return Err(SyntheticError::Stuck(refusal));
        }
    }
    Err(SyntheticError::Stuck(Refusal::bad(
        "synthetic",
        format!("no plan after {MAX_STEPS} corrections"),
    )))
}

/// Reads a config: a name from [`NAMED_CONFIGS`], JSON text, a config.json file, or a
/// directory holding config.json.
pub fn load_config(source: &str) -> Result<Value, SyntheticError> {
    let err = |reason: String| SyntheticError::Config {
        source_name: source.chars().take(80).collect(),
        reason,
        known: NAMED_CONFIGS.map(|(n, _)| n).join(", "),
    };
    let text = if let Some((_, text)) = NAMED_CONFIGS.iter().find(|(n, _)| *n == source) {
        text.to_string()
    } else if source.trim_start().starts_with('{') {
        source.to_string()
    } else {
        let p = Path::new(source);
        let file = if p.is_dir() {
            p.join("config.json")
        } else {
            p.to_path_buf()
        };
        std::fs::read_to_string(&file).map_err(|e| err(format!("{}: {e}", file.display())))?
    };
    parse_config_json(&text).map_err(|e| err(format!("not valid JSON: {e}")))
}

/// A synthetic checkpoint of `config` in `quant`'s layout under `seed`.
pub fn checkpoint_from(
    config: Value,
    quant: &SyntheticQuant,
    seed: u64,
) -> Result<Checkpoint, SyntheticError> {
    let entries = synthetic_entries(&config, quant)?;
    Ok(Checkpoint::synthetic(config, entries, seed)?)
}

/// A synthetic checkpoint for the CLI: `config` as [`load_config`] reads it, `quant` as
/// [`SyntheticQuant::parse`] reads it (`None`: the config's own layout,
/// [`SyntheticQuant::from_config`]), `seed` ([`DEFAULT_SEED`] when `None`).
pub fn checkpoint(
    config: &str,
    quant: Option<&str>,
    seed: Option<u64>,
) -> Result<Checkpoint, SyntheticError> {
    let config = load_config(config)?;
    let quant = match quant {
        Some(q) => SyntheticQuant::parse(q)?,
        None => SyntheticQuant::from_config(&config)?,
    };
    checkpoint_from(config, &quant, seed.unwrap_or(DEFAULT_SEED))
}
