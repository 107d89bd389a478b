//! Muse Spark weights on the device, from either on-disk form, as the CPU forward reads them.
//!
//! - Norm gains: `1 + w` in f32 (Hugging Face's zero-centred weights) or as stored (MLX).
//! - Attention: one `[q | k | v | gate]` matrix. MLX stores it fused with q/k rows already in
//!   interleaved RoPE order; for the HF form the four matrices are concatenated with the q and k
//!   rows permuted into that order (the CPU permutes the matmul's outputs instead: each output
//!   is the same dot product of the same weight row, so the bits are equal).
//! - Residual gates: `(alpha, beta)` computed on the host from the raw gates (HF, the CPU's
//!   formula) or read as stored (MLX).
//! - Experts: per-expert views of the stacked `[E, R, C]` tensors (HF `gate_up_proj`: gate rows
//!   first) stacked again on the device ([`GpuExperts`]).

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::moe::{ExpertMlp, GpuExperts};
use crate::weights::GpuMatrix;
use cudarc::driver::CudaSlice;
use tf_families::muse_spark::{
    MuseAttnProj, MuseExperts, MuseForm, MuseLayer, MuseResidualGates, MuseSparkConfig,
};
use tf_formats::checkpoint::{Checkpoint, TensorData};
use tf_formats::TensorEntry;
use tf_kernels::matmul::{FloatType, PackedMatrix, WeightData};
use tf_kernels::ops::{norm_gain, NormWeightKind};

/// One decoder layer's device operands.
pub(super) struct Layer {
    pub sliding: bool,
    pub rope: bool,
    pub input_gain: CudaSlice<f32>,
    /// `[q | k | v | gate]` rows, q/k in interleaved RoPE order.
    pub qkvg: GpuMatrix,
    pub o_proj: GpuMatrix,
    pub pre_ffn_gain: CudaSlice<f32>,
    pub post_ffn_gain: CudaSlice<f32>,
    /// `(alpha, beta)` after attention and after the feed-forward.
    pub attn_gate: (CudaSlice<f32>, CudaSlice<f32>),
    pub ffn_gate: (CudaSlice<f32>, CudaSlice<f32>),
    pub router: GpuMatrix,
    pub router_bias: CudaSlice<f32>,
    pub pre_expert_proj: GpuMatrix,
    pub pre_expert_gain: CudaSlice<f32>,
    pub experts: ExpertMlp,
    pub post_expert_gain: CudaSlice<f32>,
    pub post_expert_proj: GpuMatrix,
}

impl Layer {
    /// Bytes of matrices held on the device.
    pub fn weight_bytes(&self) -> usize {
        [
            &self.qkvg,
            &self.o_proj,
            &self.router,
            &self.pre_expert_proj,
            &self.post_expert_proj,
        ]
        .iter()
        .map(|m| m.storage_bytes())
        .sum::<usize>()
            + self.experts.storage_bytes()
    }
}

fn bad(e: &TensorEntry, why: String) -> CudaError {
    CudaError::Shape {
        op: "muse_spark tensor",
        detail: format!("{}: {why}", e.name),
    }
}

/// The packed view of a `[rows, cols]` slice of an entry's bytes: rows `lo..lo + rows` of
/// matrix `index` in a stack of `count` matrices of `total_rows` rows (a plain matrix is
/// `count = 1, index = 0, lo = 0`).
#[allow(clippy::too_many_arguments)]
fn view<'a>(
    ck: &'a Checkpoint,
    e: &TensorEntry,
    count: usize,
    index: usize,
    total_rows: usize,
    lo: usize,
    rows: usize,
    cols: usize,
) -> Result<PackedMatrix<'a>> {
    if lo + rows > total_rows || index >= count {
        return Err(bad(e, format!("rows {lo}..{} of {total_rows}", lo + rows)));
    }
    let data = ck
        .data(&e.name)
        .ok_or_else(|| bad(e, "no data in the checkpoint".into()))?;
    let slice = |bytes: &'a [u8], row_bytes: usize| -> Result<&'a [u8]> {
        let per = total_rows * row_bytes;
        if bytes.len() != count * per {
            return Err(bad(
                e,
                format!("{} bytes, expected {}", bytes.len(), count * per),
            ));
        }
        let start = index * per + lo * row_bytes;
        Ok(&bytes[start..start + rows * row_bytes])
    };
    let wd = match data {
        TensorData::Dense { dtype, bytes } => {
            let ty =
                FloatType::from_dtype(dtype).ok_or_else(|| bad(e, format!("stored as {dtype}")))?;
            WeightData::Dense {
                ty,
                bytes: slice(bytes, cols * ty.size())?,
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
            if gs == 0 || !cols.is_multiple_of(gs) || !(cols * bits as usize).is_multiple_of(32) {
                return Err(bad(e, format!("{cols} inputs, group {gs}, {bits} bits")));
            }
            let groups = cols / gs * scale_ty.size();
            WeightData::MlxAffine {
                bits,
                group_size: gs,
                scale_ty,
                words: slice(weight, cols * bits as usize / 8)?,
                scales: slice(scales, groups)?,
                biases: slice(biases, groups)?,
            }
        }
        TensorData::Gguf { .. } => {
            return Err(CudaError::UnsupportedFormat {
                format: format!("{}: GGUF tensors in a Muse Spark checkpoint", e.name),
            })
        }
    };
    PackedMatrix::new(rows, cols, wd).map_err(|err| bad(e, err.to_string()))
}

/// The packed view of a 2-D entry.
fn matrix<'a>(ck: &'a Checkpoint, e: &TensorEntry) -> Result<PackedMatrix<'a>> {
    let [rows, cols] = e.shape[..] else {
        return Err(bad(e, format!("expected a matrix, found {:?}", e.shape)));
    };
    view(ck, e, 1, 0, rows as usize, 0, rows as usize, cols as usize)
}

/// Per-expert views of rows `lo..lo + rows` of a stacked `[E, R, C]` entry.
fn expert_views<'a>(
    ck: &'a Checkpoint,
    e: &TensorEntry,
    lo: usize,
    rows: Option<usize>,
) -> Result<Vec<PackedMatrix<'a>>> {
    let [n, r, c] = e.shape[..] else {
        return Err(bad(
            e,
            format!("expected [experts, out, in], found {:?}", e.shape),
        ));
    };
    let (n, r, c) = (n as usize, r as usize, c as usize);
    (0..n)
        .map(|i| view(ck, e, n, i, r, lo, rows.unwrap_or(r), c))
        .collect()
}

/// The row order that moves HF's `(i, i + d/2)` RoPE pairs to MLX's `(2i, 2i + 1)`: new row
/// `h * d + 2i + t` is old row `h * d + t * d/2 + i` (the CPU's `interleave_heads`).
pub(super) fn interleave_order(rows: usize, head_dim: usize) -> Vec<usize> {
    let half = head_dim / 2;
    (0..rows)
        .map(|r| {
            let (h, w) = (r / head_dim, r % head_dim);
            h * head_dim + (w % 2) * half + w / 2
        })
        .collect()
}

/// Each buffer of `m` with its rows reordered: row `r` of the result is row `order[r]` of `m`.
pub(super) fn permute_rows(m: &PackedMatrix, order: &[usize]) -> Vec<Vec<u8>> {
    let bufs: Vec<&[u8]> = match *m.data() {
        WeightData::Dense { bytes, .. } | WeightData::Gguf { bytes, .. } => vec![bytes],
        WeightData::MlxAffine {
            words,
            scales,
            biases,
            ..
        } => vec![words, scales, biases],
    };
    bufs.iter()
        .map(|b| {
            let rb = b.len() / m.rows().max(1);
            order
                .iter()
                .flat_map(|&r| &b[r * rb..(r + 1) * rb])
                .copied()
                .collect()
        })
        .collect()
}

/// `m`'s layout over the buffers of [`permute_rows`].
pub(super) fn with_buffers<'a>(m: &PackedMatrix, bufs: &'a [Vec<u8>]) -> Result<PackedMatrix<'a>> {
    let wd = match (*m.data(), bufs) {
        (WeightData::Dense { ty, .. }, [b]) => WeightData::Dense { ty, bytes: b },
        (WeightData::Gguf { ty, .. }, [b]) => WeightData::Gguf { ty, bytes: b },
        (
            WeightData::MlxAffine {
                bits,
                group_size,
                scale_ty,
                ..
            },
            [w, s, b],
        ) => WeightData::MlxAffine {
            bits,
            group_size,
            scale_ty,
            words: w,
            scales: s,
            biases: b,
        },
        _ => {
            return Err(CudaError::Shape {
                op: "row permutation",
                detail: format!("{} buffers for the matrix's format", bufs.len()),
            })
        }
    };
    PackedMatrix::new(m.rows(), m.cols(), wd).map_err(|e| CudaError::Shape {
        op: "row permutation",
        detail: e.to_string(),
    })
}

/// A small tensor decoded to f32 on the host.
fn vector(ck: &Checkpoint, e: &TensorEntry) -> Result<Vec<f32>> {
    crate::load::vector_host(ck, e)
}

/// A norm gain: `1 + w` (HF) or the stored gain (MLX).
fn gain(ck: &Checkpoint, e: &TensorEntry, form: MuseForm) -> Result<Vec<f32>> {
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

/// The residual gate's `(alpha, beta)` from a raw gate (the CPU's formula): `w = g / T`,
/// `beta = sigmoid(w)`, `alpha = sqrt(max(sigmoid(-w) * (1 + beta), 1e-3))`, each step in f32.
pub(super) fn residual_coefficients(gate: &[f32], temperature: f32) -> (Vec<f32>, Vec<f32>) {
    gate.iter()
        .map(|&g| {
            let w = g / temperature;
            let b = sigmoid64(w);
            ((sigmoid64(-w) * (1.0 + b)).max(1e-3).sqrt(), b)
        })
        .unzip()
}

/// The attention input projections on the host.
// One per layer, host-side only: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
pub(super) enum HostAttn<'a> {
    /// MLX: one `[q | k | v | gate]` matrix, q/k rows interleaved.
    Fused(PackedMatrix<'a>),
    /// HF: q, k (their rows re-ordered into the buffers beside them), v, gate.
    Separate {
        q: PackedMatrix<'a>,
        k: PackedMatrix<'a>,
        v: PackedMatrix<'a>,
        gate: PackedMatrix<'a>,
        q_rows: Vec<Vec<u8>>,
        k_rows: Vec<Vec<u8>>,
    },
}

impl HostAttn<'_> {
    /// The parts of the `[q | k | v | gate]` matrix, in row order.
    pub fn parts(&self) -> Result<Vec<PackedMatrix<'_>>> {
        Ok(match self {
            HostAttn::Fused(m) => vec![*m],
            HostAttn::Separate {
                q,
                k,
                v,
                gate,
                q_rows,
                k_rows,
            } => vec![
                with_buffers(q, q_rows)?,
                with_buffers(k, k_rows)?,
                *v,
                *gate,
            ],
        })
    }
}

/// One layer's operands on the host (views of the checkpoint, decoded vectors), before upload.
pub(super) struct HostLayer<'a> {
    pub sliding: bool,
    pub rope: bool,
    pub input_gain: Vec<f32>,
    pub attn: HostAttn<'a>,
    pub o_proj: PackedMatrix<'a>,
    pub pre_ffn_gain: Vec<f32>,
    pub post_ffn_gain: Vec<f32>,
    pub attn_gate: (Vec<f32>, Vec<f32>),
    pub ffn_gate: (Vec<f32>, Vec<f32>),
    pub router: PackedMatrix<'a>,
    pub router_bias: Vec<f32>,
    pub pre_expert_proj: PackedMatrix<'a>,
    pub pre_expert_gain: Vec<f32>,
    /// Per expert: gate, up, down.
    pub experts: [Vec<PackedMatrix<'a>>; 3],
    pub post_expert_gain: Vec<f32>,
    pub post_expert_proj: PackedMatrix<'a>,
}

/// The attention projections of a layer.
fn attention<'a>(
    ck: &'a Checkpoint,
    cfg: &MuseSparkConfig,
    a: &MuseAttnProj,
) -> Result<HostAttn<'a>> {
    Ok(match a {
        MuseAttnProj::Fused { qkvg } => HostAttn::Fused(matrix(ck, qkvg)?),
        MuseAttnProj::Separate { q, k, v, gate } => {
            let hd = cfg.head_dim as usize;
            let (q, k) = (matrix(ck, q)?, matrix(ck, k)?);
            HostAttn::Separate {
                q_rows: permute_rows(&q, &interleave_order(q.rows(), hd)),
                k_rows: permute_rows(&k, &interleave_order(k.rows(), hd)),
                q,
                k,
                v: matrix(ck, v)?,
                gate: matrix(ck, gate)?,
            }
        }
    })
}

/// The routed experts' views: gate, up, down per expert.
fn experts<'a>(
    ck: &'a Checkpoint,
    ex: &MuseExperts,
    inter: usize,
) -> Result<[Vec<PackedMatrix<'a>>; 3]> {
    let (gate, up, down) = match ex {
        MuseExperts::GateUp { gate_up, down } => (
            expert_views(ck, gate_up, 0, Some(inter))?,
            expert_views(ck, gate_up, inter, Some(inter))?,
            down,
        ),
        MuseExperts::Split { gate, up, down } => (
            expert_views(ck, gate, 0, None)?,
            expert_views(ck, up, 0, None)?,
            down,
        ),
    };
    Ok([gate, up, expert_views(ck, down, 0, None)?])
}

/// One layer's host operands.
pub(super) fn host_layer<'a>(
    ck: &'a Checkpoint,
    cfg: &MuseSparkConfig,
    form: MuseForm,
    l: &MuseLayer,
) -> Result<HostLayer<'a>> {
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
    Ok(HostLayer {
        sliding: l.sliding,
        rope: l.rope_theta.is_some(),
        input_gain: gain(ck, &l.input_layernorm, form)?,
        attn: attention(ck, cfg, &l.attn)?,
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

/// Uploads one layer's operands.
pub(super) fn upload(gpu: &Gpu, h: &HostLayer) -> Result<Layer> {
    let up = |m: &PackedMatrix| GpuMatrix::upload(gpu, m);
    let [gate, upm, down] = &h.experts;
    Ok(Layer {
        sliding: h.sliding,
        rope: h.rope,
        input_gain: gpu.upload(&h.input_gain)?,
        qkvg: GpuMatrix::concat(gpu, &h.attn.parts()?)?,
        o_proj: up(&h.o_proj)?,
        pre_ffn_gain: gpu.upload(&h.pre_ffn_gain)?,
        post_ffn_gain: gpu.upload(&h.post_ffn_gain)?,
        attn_gate: (gpu.upload(&h.attn_gate.0)?, gpu.upload(&h.attn_gate.1)?),
        ffn_gate: (gpu.upload(&h.ffn_gate.0)?, gpu.upload(&h.ffn_gate.1)?),
        router: up(&h.router)?,
        router_bias: gpu.upload(&h.router_bias)?,
        pre_expert_proj: up(&h.pre_expert_proj)?,
        pre_expert_gain: gpu.upload(&h.pre_expert_gain)?,
        experts: ExpertMlp::new(
            Some(GpuExperts::upload(gpu, gate)?),
            GpuExperts::upload(gpu, upm)?,
            GpuExperts::upload(gpu, down)?,
        )?,
        post_expert_gain: gpu.upload(&h.post_expert_gain)?,
        post_expert_proj: up(&h.post_expert_proj)?,
    })
}

/// The packed view of a 2-D entry (the embedding and the head).
pub(super) fn plain_matrix<'a>(ck: &'a Checkpoint, e: &TensorEntry) -> Result<PackedMatrix<'a>> {
    matrix(ck, e)
}

/// The final norm's gain: a plain gain in both forms.
pub(super) fn final_norm(ck: &Checkpoint, e: &TensorEntry) -> Result<Vec<f32>> {
    vector(ck, e)
}
