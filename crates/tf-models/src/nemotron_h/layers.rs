//! Nemotron-H layer weights, borrowed from the checkpoint's memory map, built from the plan's
//! per-layer blocks (so Puzzle layers carry their own expert counts, widths and top-k).

use crate::error::ModelError;
use crate::weights::{matrix, vector};
use tf_families::nemotron_h::{
    ExpertWeights, MambaSpec, MoeSpec, NemotronBlock, NemotronLayer, NemotronMixer,
};
use tf_formats::checkpoint::{Checkpoint, TensorData};
use tf_formats::TensorEntry;
use tf_kernels::matmul::{FloatType, PackedMatrix, WeightData};
use tf_kernels::ops::{exp, AttnParams, DroppedGroups, MambaParams, RouteParams};

/// A Mamba2 mixer's weights and shape.
pub struct MambaLayer<'a> {
    pub in_proj: PackedMatrix<'a>,
    pub in_bias: Option<Vec<f32>>,
    pub conv_weight: Vec<f32>,
    pub conv_bias: Option<Vec<f32>>,
    /// `-exp(A_log)` per head.
    pub a: Vec<f32>,
    pub d: Vec<f32>,
    pub dt_bias: Vec<f32>,
    pub norm: Vec<f32>,
    pub out_proj: PackedMatrix<'a>,
    pub out_bias: Option<Vec<f32>>,
    pub spec: MambaSpec,
    /// Index of this layer's state in `StreamState::mamba`.
    pub state_index: usize,
}

impl MambaLayer<'_> {
    /// The kernel parameters of this mixer.
    pub fn params(&self) -> MambaParams<'_> {
        let s = &self.spec;
        MambaParams {
            n_heads: s.num_heads as usize,
            head_dim: s.head_dim as usize,
            n_groups: s.n_groups as usize,
            state_size: s.ssm_state_size as usize,
            conv_kernel: s.conv_kernel as usize,
            conv_weight: &self.conv_weight,
            conv_bias: self.conv_bias.as_deref(),
            a: &self.a,
            d: &self.d,
            dt_bias: &self.dt_bias,
            dt_limit: (
                s.time_step_limit.0 as f32,
                // configs spell "no limit" as a huge number (JSON has no Infinity)
                if s.time_step_limit.1 >= f32::MAX as f64 {
                    f32::INFINITY
                } else {
                    s.time_step_limit.1 as f32
                },
            ),
        }
    }
}

/// An attention mixer (no RoPE).
pub struct AttnLayer<'a> {
    pub q: PackedMatrix<'a>,
    pub k: PackedMatrix<'a>,
    pub v: PackedMatrix<'a>,
    pub o: PackedMatrix<'a>,
    /// q, k, v, o biases.
    pub biases: Option<[Vec<f32>; 4]>,
    pub params: AttnParams,
    /// Index of this layer's cache in `StreamState::kv`.
    pub kv_index: usize,
}

/// A relu² MLP (also the shape of a routed or shared expert).
pub struct Mlp<'a> {
    pub up: PackedMatrix<'a>,
    pub down: PackedMatrix<'a>,
    /// up and down biases.
    pub biases: Option<[Vec<f32>; 2]>,
}

/// A mixture-of-experts layer.
pub struct MoeLayer<'a> {
    /// Router `[experts, hidden]`.
    pub gate: PackedMatrix<'a>,
    pub correction: Vec<f32>,
    pub route: RouteParams,
    /// Routed experts, in expert id order.
    pub experts: Vec<Mlp<'a>>,
    pub shared: Option<Mlp<'a>>,
    /// fc1_latent_proj `[latent, hidden]` and fc2_latent_proj `[hidden, latent]`.
    pub latent: Option<(PackedMatrix<'a>, PackedMatrix<'a>)>,
    /// Width the routed experts read and write (latent or hidden).
    pub expert_dim: usize,
}

/// One layer's mixer.
pub enum Mixer<'a> {
    Mamba(MambaLayer<'a>),
    Attention(AttnLayer<'a>),
    Mlp(Mlp<'a>),
    Moe(MoeLayer<'a>),
}

/// One layer: pre-norm gain and mixer.
pub struct Layer<'a> {
    pub norm: Vec<f32>,
    pub mixer: Mixer<'a>,
}

impl Layer<'_> {
    /// Bytes of matrices read from the checkpoint.
    pub fn weight_bytes(&self) -> usize {
        let mlp = |m: &Mlp| m.up.storage_bytes() + m.down.storage_bytes();
        match &self.mixer {
            Mixer::Mamba(m) => m.in_proj.storage_bytes() + m.out_proj.storage_bytes(),
            Mixer::Attention(a) => [&a.q, &a.k, &a.v, &a.o]
                .iter()
                .map(|m| m.storage_bytes())
                .sum(),
            Mixer::Mlp(m) => mlp(m),
            Mixer::Moe(m) => {
                m.gate.storage_bytes()
                    + m.experts.iter().map(mlp).sum::<usize>()
                    + m.shared.as_ref().map_or(0, mlp)
                    + m.latent
                        .as_ref()
                        .map_or(0, |(a, b)| a.storage_bytes() + b.storage_bytes())
            }
        }
    }
}

fn opt_vector(ck: &Checkpoint, e: &Option<TensorEntry>) -> Result<Option<Vec<f32>>, ModelError> {
    e.as_ref().map(|e| vector(ck, e)).transpose()
}

/// Builds layer `l` from its plan entry and resolved block.
pub fn build_layer<'a>(
    ck: &'a Checkpoint,
    plan: &NemotronLayer,
    block: &NemotronBlock,
    hidden: usize,
    state_index: usize,
    kv_index: usize,
) -> Result<Layer<'a>, ModelError> {
    let mixer = match (&plan.mixer, block) {
        (
            NemotronMixer::Mamba {
                in_proj,
                in_proj_bias,
                conv1d_weight,
                conv1d_bias,
                dt_bias,
                a_log,
                d,
                norm,
                out_proj,
                out_proj_bias,
                ..
            },
            NemotronBlock::Mamba(spec),
        ) => Mixer::Mamba(MambaLayer {
            in_proj: matrix(ck, in_proj)?,
            in_bias: opt_vector(ck, in_proj_bias)?,
            // [C, 1, K] (HF) and [C, K, 1] (MLX) hold the same bytes in the same order.
            conv_weight: vector(ck, conv1d_weight)?,
            conv_bias: opt_vector(ck, conv1d_bias)?,
            a: vector(ck, a_log)?.iter().map(|&v| -exp(v)).collect(),
            d: vector(ck, d)?,
            dt_bias: vector(ck, dt_bias)?,
            norm: vector(ck, norm)?,
            out_proj: matrix(ck, out_proj)?,
            out_bias: opt_vector(ck, out_proj_bias)?,
            spec: spec.clone(),
            state_index,
        }),
        (
            NemotronMixer::Attention {
                q_proj,
                k_proj,
                v_proj,
                o_proj,
                biases,
            },
            NemotronBlock::Attention(spec),
        ) => {
            let head_dim = spec.head_dim as usize;
            Mixer::Attention(AttnLayer {
                q: matrix(ck, q_proj)?,
                k: matrix(ck, k_proj)?,
                v: matrix(ck, v_proj)?,
                o: matrix(ck, o_proj)?,
                biases: match biases {
                    Some([a, b, c, d]) => Some([
                        vector(ck, a)?,
                        vector(ck, b)?,
                        vector(ck, c)?,
                        vector(ck, d)?,
                    ]),
                    None => None,
                },
                params: AttnParams {
                    n_heads: spec.num_heads as usize,
                    n_kv_heads: spec.num_kv_heads as usize,
                    head_dim,
                    // mlx-lm: head_dim ** -0.5 in Python floats, rounded to f32 once.
                    scale: (head_dim as f64).powf(-0.5) as f32,
                    window: None,
                    softcap: None,
                },
                kv_index,
            })
        }
        (
            NemotronMixer::Mlp {
                up_proj,
                down_proj,
                biases,
            },
            NemotronBlock::Mlp(_),
        ) => Mixer::Mlp(Mlp {
            up: matrix(ck, up_proj)?,
            down: matrix(ck, down_proj)?,
            biases: match biases {
                Some([a, b]) => Some([vector(ck, a)?, vector(ck, b)?]),
                None => None,
            },
        }),
        (
            NemotronMixer::Moe {
                gate,
                e_score_correction_bias,
                experts,
                shared,
                latent,
            },
            NemotronBlock::Moe(spec),
        ) => Mixer::Moe(moe_layer(
            ck,
            spec,
            hidden,
            gate,
            e_score_correction_bias,
            experts,
            shared,
            latent,
        )?),
        _ => {
            return Err(ModelError::BadTensor {
                name: plan.norm.name.clone(),
                why: format!(
                    "the plan's tensors do not match block {}",
                    block.type_name()
                ),
            })
        }
    };
    Ok(Layer {
        norm: vector(ck, &plan.norm)?,
        mixer,
    })
}

#[allow(clippy::too_many_arguments)]
fn moe_layer<'a>(
    ck: &'a Checkpoint,
    spec: &MoeSpec,
    hidden: usize,
    gate: &TensorEntry,
    correction: &TensorEntry,
    experts: &ExpertWeights,
    shared: &Option<[TensorEntry; 2]>,
    latent: &Option<[TensorEntry; 2]>,
) -> Result<MoeLayer<'a>, ModelError> {
    let n = spec.n_routed_experts as usize;
    let experts = match experts {
        ExpertWeights::Stacked { up, down } => expert_slices(ck, up, n)?
            .into_iter()
            .zip(expert_slices(ck, down, n)?)
            .map(|(up, down)| Mlp {
                up,
                down,
                biases: None,
            })
            .collect(),
        ExpertWeights::PerExpert { up, down } => up
            .iter()
            .zip(down)
            .map(|(u, d)| {
                Ok(Mlp {
                    up: matrix(ck, u)?,
                    down: matrix(ck, d)?,
                    biases: None,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?,
    };
    Ok(MoeLayer {
        gate: matrix(ck, gate)?,
        correction: vector(ck, correction)?,
        route: RouteParams {
            n_experts: n,
            top_k: spec.num_experts_per_tok as usize,
            n_group: spec.n_group as usize,
            topk_group: spec.topk_group as usize,
            scaling: spec.routed_scaling_factor as f32,
            norm_topk_prob: spec.norm_topk_prob,
            dropped: DroppedGroups::Zero,
        },
        experts,
        shared: match shared {
            Some([u, d]) => Some(Mlp {
                up: matrix(ck, u)?,
                down: matrix(ck, d)?,
                biases: None,
            }),
            None => None,
        },
        latent: match latent {
            Some([a, b]) => Some((matrix(ck, a)?, matrix(ck, b)?)),
            None => None,
        },
        expert_dim: spec.expert_dim(hidden as u64) as usize,
    })
}

/// The `n` matrices `[rows, cols]` of a stacked `[n, rows, cols]` expert tensor (no copy).
fn expert_slices<'a>(
    ck: &'a Checkpoint,
    e: &TensorEntry,
    n: usize,
) -> Result<Vec<PackedMatrix<'a>>, ModelError> {
    let bad = |why: String| ModelError::BadTensor {
        name: e.name.clone(),
        why,
    };
    let [experts, rows, cols] = e.shape[..] else {
        return Err(bad(format!(
            "expected [experts, out, in], found {:?}",
            e.shape
        )));
    };
    let (rows, cols) = (rows as usize, cols as usize);
    if experts as usize != n {
        return Err(bad(format!("{experts} experts stored, {n} expected")));
    }
    let data = ck
        .data(&e.name)
        .ok_or_else(|| bad("no data in the checkpoint".into()))?;
    let split = |bytes: &'a [u8], what: &str| -> Result<Vec<&'a [u8]>, ModelError> {
        if n == 0 || bytes.len() % n != 0 {
            return Err(bad(format!(
                "{what}: {} bytes do not split into {n}",
                bytes.len()
            )));
        }
        Ok(bytes.chunks_exact(bytes.len() / n).collect())
    };
    let mats: Result<Vec<PackedMatrix<'a>>, String> = match data {
        TensorData::Dense { dtype, bytes } => split(bytes, "weight")?
            .into_iter()
            .map(|b| PackedMatrix::dense(dtype, rows, cols, b).map_err(|x| x.to_string()))
            .collect(),
        TensorData::MlxAffine {
            weight,
            scales,
            biases,
            bits,
            group_size,
            scales_dtype,
        } => {
            let scale_ty = FloatType::from_dtype(scales_dtype)
                .ok_or_else(|| bad(format!("scales stored as {scales_dtype}")))?;
            let (w, s, b) = (
                split(weight, "weight")?,
                split(scales, "scales")?,
                split(biases, "biases")?,
            );
            w.into_iter()
                .zip(s)
                .zip(b)
                .map(|((words, scales), biases)| {
                    PackedMatrix::new(
                        rows,
                        cols,
                        WeightData::MlxAffine {
                            bits,
                            group_size: group_size as usize,
                            scale_ty,
                            words,
                            scales,
                            biases,
                        },
                    )
                    .map_err(|x| x.to_string())
                })
                .collect()
        }
        TensorData::Gguf { .. } => Err("stacked GGUF experts are not supported".into()),
    };
    mats.map_err(bad)
}
