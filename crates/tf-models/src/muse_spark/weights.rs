//! Muse Spark weights from either on-disk form, as one set of kernel operands.
//!
//! Both forms end up identical where the forms carry the same numbers: norm gains (`1 + w` in f32
//! for the Hugging Face form, stored for MLX), the attention projections (the HF q/k outputs are
//! permuted into MLX's interleaved order after the matmul, so one RoPE pairing serves both), and
//! per-expert matrix views of the stacked expert tensors. Only the residual-gate coefficients
//! differ in provenance: computed here from the raw gates (HF) or read as stored (MLX).

use crate::error::ModelError;
use crate::weights::{matrix, vector};
use tf_families::muse_spark::{
    MuseAttnProj, MuseExperts, MuseForm, MuseLayer, MuseResidualGates, MuseSparkConfig,
};
use tf_formats::checkpoint::{Checkpoint, TensorData};
use tf_formats::TensorEntry;
use tf_kernels::matmul::{FloatType, PackedMatrix, WeightData};
use tf_kernels::ops::{norm_gain, NormWeightKind};

/// The attention input projections.
pub(crate) enum AttnWeights<'a> {
    /// MLX: one `[q | k | v | gate]` matrix, q/k rows already interleaved.
    Fused(PackedMatrix<'a>),
    /// HF: four matrices; q/k outputs are in (i, i + d/2) order and get permuted.
    Separate(Box<[PackedMatrix<'a>; 4]>),
}

/// One routed expert's three matrices.
pub(crate) struct Expert<'a> {
    pub gate: PackedMatrix<'a>,
    pub up: PackedMatrix<'a>,
    pub down: PackedMatrix<'a>,
}

/// One decoder layer's operands.
pub(crate) struct LayerWeights<'a> {
    pub sliding: bool,
    pub rope: bool,
    pub input_gain: Vec<f32>,
    pub attn: AttnWeights<'a>,
    pub o_proj: PackedMatrix<'a>,
    pub pre_ffn_gain: Vec<f32>,
    pub post_ffn_gain: Vec<f32>,
    /// `(alpha, beta)` of the residual gate after attention and after the feed-forward.
    pub attn_gate: (Vec<f32>, Vec<f32>),
    pub ffn_gate: (Vec<f32>, Vec<f32>),
    pub router: PackedMatrix<'a>,
    pub router_bias: Vec<f32>,
    pub pre_expert_proj: PackedMatrix<'a>,
    pub pre_expert_gain: Vec<f32>,
    pub experts: Vec<Expert<'a>>,
    pub post_expert_gain: Vec<f32>,
    pub post_expert_proj: PackedMatrix<'a>,
}

fn bad(e: &TensorEntry, why: String) -> ModelError {
    ModelError::BadTensor {
        name: e.name.clone(),
        why,
    }
}

/// A norm gain: `1 + w` for HF's zero-centred weights, the stored gain for MLX.
fn gain(ck: &Checkpoint, e: &TensorEntry, form: MuseForm) -> Result<Vec<f32>, ModelError> {
    let w = vector(ck, e)?;
    Ok(match form {
        MuseForm::HuggingFace => norm_gain(&w, NormWeightKind::ZeroCentred),
        MuseForm::Mlx => w,
    })
}

/// `sigmoid(x)` evaluated in f64 and rounded once.
fn sigmoid64(x: f32) -> f32 {
    (1.0 / (1.0 + (-(x as f64)).exp())) as f32
}

/// The residual gate's `(alpha, beta)` from a raw gate: `w = g / T`, `beta = sigmoid(w)`,
/// `alpha = sqrt(max(sigmoid(-w) * (1 + beta), 1e-3))`, each step rounded to f32.
pub(crate) fn residual_coefficients(gate: &[f32], temperature: f32) -> (Vec<f32>, Vec<f32>) {
    let mut alpha = Vec::with_capacity(gate.len());
    let mut beta = Vec::with_capacity(gate.len());
    for &g in gate {
        let w = g / temperature;
        let b = sigmoid64(w);
        let a = (sigmoid64(-w) * (1.0 + b)).max(1e-3).sqrt();
        alpha.push(a);
        beta.push(b);
    }
    (alpha, beta)
}

/// Per-expert `[rows, cols]` views of a stacked `[E, R, cols]` tensor, rows `lo..lo + rows`.
fn expert_views<'a>(
    ck: &'a Checkpoint,
    e: &TensorEntry,
    lo: usize,
    rows: usize,
) -> Result<Vec<PackedMatrix<'a>>, ModelError> {
    let [n, r, cols] = e.shape[..] else {
        return Err(bad(
            e,
            format!("expected [experts, out, in], found {:?}", e.shape),
        ));
    };
    let (n, r, cols) = (n as usize, r as usize, cols as usize);
    if lo + rows > r {
        return Err(bad(e, format!("rows {lo}..{} of {r}", lo + rows)));
    }
    let data = ck
        .data(&e.name)
        .ok_or_else(|| bad(e, "no data in the checkpoint".into()))?;
    // Bytes per row of each buffer, and the per-expert slice of `bytes`.
    let slice = |bytes: &'a [u8], row_bytes: usize, i: usize| -> Result<&'a [u8], ModelError> {
        let per = r * row_bytes;
        if bytes.len() != n * per {
            return Err(bad(
                e,
                format!("{} bytes, expected {}", bytes.len(), n * per),
            ));
        }
        let start = i * per + lo * row_bytes;
        Ok(&bytes[start..start + rows * row_bytes])
    };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let wd = match data {
            TensorData::Dense { dtype, bytes } => {
                let ty = FloatType::from_dtype(dtype)
                    .ok_or_else(|| bad(e, format!("stored as {dtype}")))?;
                WeightData::Dense {
                    ty,
                    bytes: slice(bytes, cols * ty.size(), i)?,
                }
            }
            TensorData::MlxAffine {
                weight,
                scales,
                biases,
                bits,
                group_size,
                scales_dtype,
            } => {
                let scale_ty = FloatType::from_dtype(scales_dtype)
                    .ok_or_else(|| bad(e, format!("scales stored as {scales_dtype}")))?;
                let gs = group_size as usize;
                if gs == 0 || cols % gs != 0 || (cols * bits as usize) % 32 != 0 {
                    return Err(bad(e, format!("{cols} inputs, group {gs}, {bits} bits")));
                }
                let groups = cols / gs * scale_ty.size();
                WeightData::MlxAffine {
                    bits,
                    group_size: gs,
                    scale_ty,
                    words: slice(weight, cols * bits as usize / 8, i)?,
                    scales: slice(scales, groups, i)?,
                    biases: slice(biases, groups, i)?,
                }
            }
            TensorData::Gguf { .. } => {
                return Err(bad(e, "GGUF experts are not supported".into()));
            }
        };
        out.push(PackedMatrix::new(rows, cols, wd).map_err(|err| bad(e, err.to_string()))?);
    }
    Ok(out)
}

/// The expert matrices of a layer, in either form.
fn experts<'a>(
    ck: &'a Checkpoint,
    ex: &MuseExperts,
    inter: usize,
) -> Result<Vec<Expert<'a>>, ModelError> {
    let (gate, up, down) = match ex {
        MuseExperts::GateUp { gate_up, down } => (
            expert_views(ck, gate_up, 0, inter)?,
            expert_views(ck, gate_up, inter, inter)?,
            down,
        ),
        MuseExperts::Split { gate, up, down } => (
            expert_views(ck, gate, 0, inter)?,
            expert_views(ck, up, 0, inter)?,
            down,
        ),
    };
    let down = expert_views(
        ck,
        down,
        0,
        down.shape.get(1).copied().unwrap_or(0) as usize,
    )?;
    Ok(gate
        .into_iter()
        .zip(up)
        .zip(down)
        .map(|((gate, up), down)| Expert { gate, up, down })
        .collect())
}

/// Loads one layer's operands.
pub(crate) fn layer<'a>(
    ck: &'a Checkpoint,
    cfg: &MuseSparkConfig,
    form: MuseForm,
    l: &MuseLayer,
) -> Result<LayerWeights<'a>, ModelError> {
    let attn = match &l.attn {
        MuseAttnProj::Fused { qkvg } => AttnWeights::Fused(matrix(ck, qkvg)?),
        MuseAttnProj::Separate { q, k, v, gate } => AttnWeights::Separate(Box::new([
            matrix(ck, q)?,
            matrix(ck, k)?,
            matrix(ck, v)?,
            matrix(ck, gate)?,
        ])),
    };
    let temperature = cfg.residual_gate_temperature as f32;
    let (attn_gate, ffn_gate) = match &l.residual_gates {
        MuseResidualGates::Raw { attn, ffn } => (
            residual_coefficients(&vector(ck, attn)?, temperature),
            residual_coefficients(&vector(ck, ffn)?, temperature),
        ),
        MuseResidualGates::Coefficients { attn, ffn } => (
            (vector(ck, &attn[0])?, vector(ck, &attn[1])?),
            (vector(ck, &ffn[0])?, vector(ck, &ffn[1])?),
        ),
    };
    Ok(LayerWeights {
        sliding: l.sliding,
        rope: l.rope_theta.is_some(),
        input_gain: gain(ck, &l.input_layernorm, form)?,
        attn,
        o_proj: matrix(ck, &l.o_proj)?,
        pre_ffn_gain: gain(ck, &l.pre_feedforward_layernorm, form)?,
        post_ffn_gain: gain(ck, &l.post_feedforward_layernorm, form)?,
        attn_gate,
        ffn_gate,
        router: matrix(ck, &l.router[0])?,
        router_bias: vector(ck, &l.router[1])?,
        pre_expert_proj: matrix(ck, &l.pre_expert_proj)?,
        pre_expert_gain: gain(ck, &l.pre_expert_norm, form)?,
        experts: experts(ck, &l.experts, cfg.moe_intermediate_size as usize)?,
        post_expert_gain: gain(ck, &l.post_expert_norm, form)?,
        post_expert_proj: matrix(ck, &l.post_expert_proj)?,
    })
}

/// Bytes of weights a layer reads (matrices only).
pub(crate) fn layer_bytes(l: &LayerWeights) -> usize {
    let attn = match &l.attn {
        AttnWeights::Fused(m) => m.storage_bytes(),
        AttnWeights::Separate(ms) => ms.iter().map(|m| m.storage_bytes()).sum(),
    };
    let experts: usize = l
        .experts
        .iter()
        .map(|e| e.gate.storage_bytes() + e.up.storage_bytes() + e.down.storage_bytes())
        .sum();
    attn + l.o_proj.storage_bytes()
        + l.router.storage_bytes()
        + l.pre_expert_proj.storage_bytes()
        + experts
        + l.post_expert_proj.storage_bytes()
}
