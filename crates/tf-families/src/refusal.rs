//! Named refusals: every reason a checkpoint is turned away before any weight byte is read.

use thiserror::Error;

/// Why a checkpoint cannot be served exactly. Each message says what is wrong and what to do.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum Refusal {
    /// config.json names a model_type no family claims.
    #[error(
        "unknown model_type '{model_type}'; known model types: {}. Use a checkpoint of a \
         supported family or add a family module for it",
        known.join(", ")
    )]
    UnknownModelType {
        model_type: String,
        known: Vec<String>,
    },

    /// A field the family needs is absent from config.json.
    #[error(
        "config.json lacks the field '{field}', which this family needs; add it to config.json"
    )]
    MissingField { field: String },

    /// A field is present but its value is unusable.
    #[error("config.json field '{field}' is unusable: {why}; correct config.json")]
    BadField { field: String, why: String },

    /// A per-layer list (pattern, block_configs, layer_types) disagrees with the layer count.
    #[error(
        "'{field}' describes {found} layers but num_hidden_layers is {expected}; make them agree"
    )]
    PatternLengthMismatch {
        field: String,
        expected: u64,
        found: u64,
    },

    /// A layer's block type is not one this family knows.
    #[error(
        "layer {layer} has block type '{block_type}', which this family does not know \
         (known: {known}); fix the layer pattern or block_configs"
    )]
    UnknownBlockType {
        layer: usize,
        block_type: String,
        known: String,
    },

    /// A tensor the config implies is absent from the checkpoint.
    #[error(
        "tensor '{name}' is missing from the checkpoint (the config implies it); the checkpoint \
         is incomplete or its config does not match it"
    )]
    MissingTensor { name: String },

    /// A tensor the plan does not use, which would otherwise be silently ignored.
    #[error(
        "tensor '{name}' is not used by this family's forward for this config (ignoring it could \
         change the output); check that config.json matches the weights"
    )]
    UnexpectedTensor { name: String },

    /// A tensor's logical shape differs from the one derived from the config.
    #[error(
        "tensor '{name}' has shape {found:?} but the config implies {expected:?}; the config \
         does not match the weights"
    )]
    ShapeMismatch {
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },

    /// A weight is stored in a format no kernel of this family reads.
    #[error(
        "tensor '{tensor}' is stored as {format}, which no kernel reads; supported: dense \
         F32/F16/BF16, GGUF F32/F16/BF16/Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q2_K..Q8_K, MLX affine \
         2/3/4/5/6/8-bit with group 32/64/128; re-quantize or convert the checkpoint"
    )]
    UnsupportedQuantization { tensor: String, format: String },

    /// A quantized weight whose input dimension is not a whole number of blocks/groups.
    #[error(
        "tensor '{tensor}' is stored as {format} but its input dimension {in_dim} is not a \
         multiple of the block/group size {block}; use a format whose block divides it"
    )]
    QuantizedShape {
        tensor: String,
        format: String,
        in_dim: u64,
        block: u64,
    },

    /// A tensor that must be plain floats (norms, router, Mamba parameters, biases) is quantized.
    #[error(
        "tensor '{tensor}' is stored as {format} but must be dense F32/F16/BF16 (norms, routers, \
         biases and Mamba parameters are never quantized); re-export it unquantized"
    )]
    MustBeDense { tensor: String, format: String },

    /// A layer routes to more experts per token than it has.
    #[error(
        "layer {layer} routes each token to {top_k} experts but has only {experts}; set this \
         layer's num_experts_per_tok to at most its n_routed_experts"
    )]
    TopKExceedsExperts {
        layer: usize,
        top_k: u64,
        experts: u64,
    },

    /// moe_latent_size is set but a latent projection is absent.
    #[error(
        "layer {layer} has moe_latent_size set but its {which} latent projection is missing; \
         the checkpoint was exported without it, or moe_latent_size should be removed"
    )]
    LatentProjectionMissing { layer: usize, which: String },

    /// A latent projection is stored quantized.
    #[error(
        "layer {layer}: the {which} latent projection is stored as {format}; latent projections \
         must be unquantized BF16 or F32 — re-export them unquantized"
    )]
    LatentProjectionQuantized {
        layer: usize,
        which: String,
        format: String,
    },

    /// A latent projection is stored [in, out] instead of [out, in].
    #[error(
        "layer {layer}: the {which} latent projection has shape {found:?}, the transpose of the \
         expected {expected:?}; transpose it to [out, in] when exporting"
    )]
    LatentProjectionTransposed {
        layer: usize,
        which: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },

    /// A latent projection is dense but neither BF16 nor F32.
    #[error(
        "layer {layer}: the {which} latent projection is {dtype}; it must be BF16 or F32 — \
         re-export it in one of those"
    )]
    LatentProjectionDType {
        layer: usize,
        which: String,
        dtype: String,
    },

    /// Routed experts were stored over hidden_size although a latent size is set.
    #[error(
        "layer {layer}: moe_latent_size is {latent} but the routed experts in '{tensor}' take \
         inputs of width {found} (hidden_size); the experts must work at the latent width — \
         the config's moe_latent_size does not match these weights"
    )]
    RoutedExpertsOverHidden {
        layer: usize,
        tensor: String,
        latent: u64,
        found: u64,
    },
}

impl Refusal {
    /// The variant's name as a stable string (printed by the CLI).
    pub fn name(&self) -> &'static str {
        match self {
            Refusal::UnknownModelType { .. } => "UnknownModelType",
            Refusal::MissingField { .. } => "MissingField",
            Refusal::BadField { .. } => "BadField",
            Refusal::PatternLengthMismatch { .. } => "PatternLengthMismatch",
            Refusal::UnknownBlockType { .. } => "UnknownBlockType",
            Refusal::MissingTensor { .. } => "MissingTensor",
            Refusal::UnexpectedTensor { .. } => "UnexpectedTensor",
            Refusal::ShapeMismatch { .. } => "ShapeMismatch",
            Refusal::UnsupportedQuantization { .. } => "UnsupportedQuantization",
            Refusal::QuantizedShape { .. } => "QuantizedShape",
            Refusal::MustBeDense { .. } => "MustBeDense",
            Refusal::TopKExceedsExperts { .. } => "TopKExceedsExperts",
            Refusal::LatentProjectionMissing { .. } => "LatentProjectionMissing",
            Refusal::LatentProjectionQuantized { .. } => "LatentProjectionQuantized",
            Refusal::LatentProjectionTransposed { .. } => "LatentProjectionTransposed",
            Refusal::LatentProjectionDType { .. } => "LatentProjectionDType",
            Refusal::RoutedExpertsOverHidden { .. } => "RoutedExpertsOverHidden",
        }
    }

    /// Shorthand for a [`Refusal::BadField`].
    pub(crate) fn bad(field: impl Into<String>, why: impl Into<String>) -> Refusal {
        Refusal::BadField {
            field: field.into(),
            why: why.into(),
        }
    }
}
