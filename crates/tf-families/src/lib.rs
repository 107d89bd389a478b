//! Model families: config validation with named refusals, tensor maps and forward plans.
//!
//! [`plan`] turns a config.json value and a checkpoint's tensor index into a [`ModelPlan`] (the
//! typed config with per-layer resolved blocks and the tensors found) or a named [`Refusal`],
//! before any weight byte is read. [`summarize`] sizes a plan for `tensorfold info`.

mod fields;
pub mod formats;
mod index;
pub mod llama;
pub mod muse_spark;
pub mod nemotron_h;
mod refusal;
mod summary;
pub mod synthetic;

pub use formats::{matrix_kernel, KernelPath, Role};
pub use index::{Claim, TensorClass};
pub use refusal::Refusal;
pub use summary::{
    summarize, ClassSummary, LayerCount, MoeLayer, StreamMemory, Summary, STATE_ELEMENT_BYTES,
};

use serde::Serialize;
use serde_json::Value;
use tf_formats::gguf::GgmlType;
use tf_formats::{DType, TensorEntry, WeightFormat};

/// A family the engine serves: the model_types it claims and the formats its kernels read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FamilyInfo {
    /// Family name ("llama", "nemotron_h", "nemotron_h_puzzle", "muse_spark").
    pub name: &'static str,
    /// config.json `model_type` values it claims.
    pub model_types: &'static [&'static str],
    /// GGUF `general.architecture` values it claims (GGUF names are mapped for these only).
    pub gguf_architectures: &'static [&'static str],
    /// Dense element types its matrices may be stored in.
    pub dense: &'static [DType],
    /// GGUF types read by a fast kernel.
    pub gguf_fast: &'static [GgmlType],
    /// GGUF types read by a slower kernel.
    pub gguf_slow: &'static [GgmlType],
    /// MLX affine bit widths read.
    pub mlx_bits: &'static [u8],
    /// MLX affine group sizes read.
    pub mlx_group_sizes: &'static [u32],
}

impl FamilyInfo {
    /// The kernel path for a matrix of this family stored in `format`, if any.
    pub fn accepts(&self, format: WeightFormat) -> Option<KernelPath> {
        matrix_kernel(format)
    }
}

const fn family(
    name: &'static str,
    model_types: &'static [&'static str],
    gguf_architectures: &'static [&'static str],
) -> FamilyInfo {
    FamilyInfo {
        name,
        model_types,
        gguf_architectures,
        dense: formats::DENSE_FLOATS,
        gguf_fast: formats::GGUF_FAST,
        gguf_slow: formats::GGUF_SLOW,
        mlx_bits: formats::MLX_BITS,
        mlx_group_sizes: formats::MLX_GROUP_SIZES,
    }
}

static FAMILIES: [FamilyInfo; 4] = [
    family(
        "llama",
        llama::LLAMA_MODEL_TYPES,
        &["llama", "qwen2", "qwen3"],
    ),
    family("nemotron_h", &["nemotron_h"], &[]),
    family("nemotron_h_puzzle", &["nemotron_h_puzzle"], &[]),
    family("muse_spark", muse_spark::MUSE_MODEL_TYPES, &[]),
];

/// Every family the engine serves.
pub fn families() -> &'static [FamilyInfo] {
    &FAMILIES
}

/// The family that claims a config.json model_type.
pub fn family_for_model_type(model_type: &str) -> Option<&'static FamilyInfo> {
    FAMILIES
        .iter()
        .find(|f| f.model_types.contains(&model_type))
}

/// A validated model: its family's typed config, per-layer blocks and tensor map.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "family", rename_all = "snake_case")]
pub enum ModelPlan {
    /// llama, mistral, qwen2, qwen3.
    Llama(llama::LlamaPlan),
    /// nemotron_h and nemotron_h_puzzle.
    NemotronH(nemotron_h::NemotronHPlan),
    /// muse_spark.
    MuseSpark(muse_spark::MuseSparkPlan),
}

impl ModelPlan {
    /// The family name (as in [`families`]).
    pub fn family(&self) -> &'static str {
        match self {
            ModelPlan::Llama(_) => "llama",
            ModelPlan::NemotronH(p) if p.config.model_type == "nemotron_h_puzzle" => {
                "nemotron_h_puzzle"
            }
            ModelPlan::NemotronH(_) => "nemotron_h",
            ModelPlan::MuseSpark(_) => "muse_spark",
        }
    }

    /// config.json's model_type.
    pub fn model_type(&self) -> &str {
        match self {
            ModelPlan::Llama(p) => &p.config.model_type,
            ModelPlan::NemotronH(p) => &p.config.model_type,
            ModelPlan::MuseSpark(_) => "muse_spark",
        }
    }

    /// Every tensor the plan uses, classified by part of the model and layer.
    pub fn claims(&self) -> &[Claim] {
        match self {
            ModelPlan::Llama(p) => &p.claims,
            ModelPlan::NemotronH(p) => &p.claims,
            ModelPlan::MuseSpark(p) => &p.claims,
        }
    }

    /// Tensors present in the checkpoint that the plan knowingly leaves unused.
    pub fn ignored(&self) -> &[String] {
        match self {
            ModelPlan::Llama(p) => &p.ignored,
            ModelPlan::NemotronH(p) => &p.ignored,
            ModelPlan::MuseSpark(p) => &p.ignored,
        }
    }

    /// Number of layers.
    pub fn num_layers(&self) -> usize {
        match self {
            ModelPlan::Llama(p) => p.layers.len(),
            ModelPlan::NemotronH(p) => p.layers.len(),
            ModelPlan::MuseSpark(p) => p.layers.len(),
        }
    }
}

/// Validates config.json and the tensor index into a plan, or refuses by name.
pub fn plan(config: &Value, tensors: &[TensorEntry]) -> Result<ModelPlan, Refusal> {
    let model_type = config
        .get("model_type")
        .ok_or_else(|| Refusal::MissingField {
            field: "model_type".into(),
        })?
        .as_str()
        .ok_or_else(|| Refusal::bad("model_type", "is not a string"))?;
    let family = family_for_model_type(model_type).ok_or_else(|| Refusal::UnknownModelType {
        model_type: model_type.into(),
        known: FAMILIES
            .iter()
            .flat_map(|f| f.model_types.iter().map(|s| s.to_string()))
            .collect(),
    })?;
    match family.name {
        "llama" => llama::plan(config, tensors).map(ModelPlan::Llama),
        "muse_spark" => muse_spark::plan(config, tensors).map(ModelPlan::MuseSpark),
        _ => nemotron_h::plan(config, tensors).map(ModelPlan::NemotronH),
    }
}
