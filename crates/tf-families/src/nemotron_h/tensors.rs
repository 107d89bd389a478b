//! Tensor maps of Nemotron-H layers, in either on-disk form (HF: experts one by one, conv1d
//! `[C, 1, K]`; MLX: stacked `switch_mlp.fc1/fc2`, conv1d `[C, K, 1]`).

use super::config::{AttentionSpec, MambaSpec, MlpSpec, MoeSpec, NemotronBlock};
use crate::formats::Role;
use crate::index::{Index, TensorClass};
use crate::refusal::Refusal;
use serde::Serialize;
use tf_formats::TensorEntry;

/// Axis order of a stored depthwise conv1d weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ConvLayout {
    /// Hugging Face / PyTorch: `[channels, 1, kernel]`.
    ChannelOneKernel,
    /// MLX: `[channels, kernel, 1]`.
    ChannelKernelOne,
}

/// Routed expert weights: stacked `[experts, out, in]` or one tensor per expert.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum ExpertWeights {
    /// `switch_mlp.fc1/fc2.weight` (MLX) or `experts.up_proj/down_proj` (transformers 3-D).
    Stacked { up: TensorEntry, down: TensorEntry },
    /// `experts.N.up_proj.weight` / `experts.N.down_proj.weight` (HF checkpoints), `[out, in]`.
    PerExpert {
        up: Vec<TensorEntry>,
        down: Vec<TensorEntry>,
    },
}

/// The mixer tensors of one layer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum NemotronMixer {
    /// Mamba2 mixer.
    Mamba {
        in_proj: TensorEntry,
        in_proj_bias: Option<TensorEntry>,
        conv1d_weight: TensorEntry,
        conv_layout: ConvLayout,
        conv1d_bias: Option<TensorEntry>,
        dt_bias: TensorEntry,
        a_log: TensorEntry,
        d: TensorEntry,
        /// Gated RMSNorm gain `[heads*head_dim]`, normalised per group.
        norm: TensorEntry,
        out_proj: TensorEntry,
        out_proj_bias: Option<TensorEntry>,
    },
    /// Attention (no RoPE).
    Attention {
        q_proj: TensorEntry,
        k_proj: TensorEntry,
        v_proj: TensorEntry,
        o_proj: TensorEntry,
        /// q, k, v, o biases when `attention_bias`.
        biases: Option<[TensorEntry; 4]>,
    },
    /// relu² MLP.
    Mlp {
        up_proj: TensorEntry,
        down_proj: TensorEntry,
        biases: Option<[TensorEntry; 2]>,
    },
    /// Mixture of experts.
    Moe {
        /// Router `[experts, hidden]`.
        gate: TensorEntry,
        /// Score correction bias `[experts]` (added for selection only).
        e_score_correction_bias: TensorEntry,
        experts: ExpertWeights,
        /// Shared expert up `[shared, hidden]` and down `[hidden, shared]`.
        shared: Option<[TensorEntry; 2]>,
        /// fc1_latent_proj `[latent, hidden]` and fc2_latent_proj `[hidden, latent]`.
        latent: Option<[TensorEntry; 2]>,
    },
}

/// One layer: its pre-norm and mixer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NemotronLayer {
    /// `layers.N.norm.weight`.
    pub norm: TensorEntry,
    /// The mixer's tensors.
    pub mixer: NemotronMixer,
}

/// Validates and claims one layer's tensors under prefix `p` ("backbone.layers.N.").
pub(crate) fn layer(
    ix: &mut Index<'_>,
    p: &str,
    l: usize,
    block: &NemotronBlock,
    hidden: u64,
) -> Result<NemotronLayer, Refusal> {
    let norm = ix.require(
        &format!("{p}norm.weight"),
        &[hidden],
        Role::Dense,
        TensorClass::Norm,
        Some(l),
    )?;
    let m = format!("{p}mixer.");
    let mixer = match block {
        NemotronBlock::Mamba(s) => mamba(ix, &m, l, s, hidden)?,
        NemotronBlock::Attention(s) => attention(ix, &m, l, s, hidden)?,
        NemotronBlock::Mlp(s) => mlp(ix, &m, l, s, hidden)?,
        NemotronBlock::Moe(s) => moe(ix, &m, l, s, hidden)?,
    };
    Ok(NemotronLayer { norm, mixer })
}

fn mamba(
    ix: &mut Index<'_>,
    m: &str,
    l: usize,
    s: &MambaSpec,
    h: u64,
) -> Result<NemotronMixer, Refusal> {
    let (inter, conv, heads) = (s.intermediate(), s.conv_dim(), s.num_heads);
    let at = Some(l);
    let (mat, dense, mc) = (Role::Matrix, Role::Dense, TensorClass::Mamba);
    let in_proj = ix.require(
        &format!("{m}in_proj.weight"),
        &[s.in_proj_rows(), h],
        mat,
        mc,
        at,
    )?;
    let in_proj_bias = bias(
        ix,
        &format!("{m}in_proj.bias"),
        s.in_proj_rows(),
        s.proj_bias,
        mc,
        at,
    )?;
    let conv_name = format!("{m}conv1d.weight");
    let k = s.conv_kernel;
    let conv_layout = match ix.lookup(&conv_name).map(|e| e.shape.as_slice()) {
        Some([c, kk, 1]) if *c == conv && *kk == k => ConvLayout::ChannelKernelOne,
        _ => ConvLayout::ChannelOneKernel,
    };
    let conv_shape = match conv_layout {
        ConvLayout::ChannelOneKernel => [conv, 1, k],
        ConvLayout::ChannelKernelOne => [conv, k, 1],
    };
    let conv1d_weight = ix.require(&conv_name, &conv_shape, dense, mc, at)?;
    let conv1d_bias = bias(
        ix,
        &format!("{m}conv1d.bias"),
        conv,
        s.use_conv_bias,
        mc,
        at,
    )?;
    Ok(NemotronMixer::Mamba {
        in_proj,
        in_proj_bias,
        conv1d_weight,
        conv_layout,
        conv1d_bias,
        dt_bias: ix.require(&format!("{m}dt_bias"), &[heads], dense, mc, at)?,
        a_log: ix.require(&format!("{m}A_log"), &[heads], dense, mc, at)?,
        d: ix.require(&format!("{m}D"), &[heads], dense, mc, at)?,
        norm: ix.require(
            &format!("{m}norm.weight"),
            &[inter],
            dense,
            TensorClass::Norm,
            at,
        )?,
        out_proj: ix.require(&format!("{m}out_proj.weight"), &[h, inter], mat, mc, at)?,
        out_proj_bias: bias(ix, &format!("{m}out_proj.bias"), h, s.proj_bias, mc, at)?,
    })
}

/// A bias that must exist when `wanted` (and is otherwise left for the unclaimed check).
fn bias(
    ix: &mut Index<'_>,
    name: &str,
    len: u64,
    wanted: bool,
    class: TensorClass,
    at: Option<usize>,
) -> Result<Option<TensorEntry>, Refusal> {
    if wanted {
        ix.require(name, &[len], Role::Dense, class, at).map(Some)
    } else {
        Ok(None)
    }
}

fn attention(
    ix: &mut Index<'_>,
    m: &str,
    l: usize,
    s: &AttentionSpec,
    h: u64,
) -> Result<NemotronMixer, Refusal> {
    let (q, kv) = (s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim);
    let (at, mat, ac) = (Some(l), Role::Matrix, TensorClass::Attention);
    let q_proj = ix.require(&format!("{m}q_proj.weight"), &[q, h], mat, ac, at)?;
    let k_proj = ix.require(&format!("{m}k_proj.weight"), &[kv, h], mat, ac, at)?;
    let v_proj = ix.require(&format!("{m}v_proj.weight"), &[kv, h], mat, ac, at)?;
    let o_proj = ix.require(&format!("{m}o_proj.weight"), &[h, q], mat, ac, at)?;
    let biases = if s.bias {
        let mut b = |n: &str, len| ix.require(&format!("{m}{n}.bias"), &[len], Role::Dense, ac, at);
        Some([
            b("q_proj", q)?,
            b("k_proj", kv)?,
            b("v_proj", kv)?,
            b("o_proj", h)?,
        ])
    } else {
        None
    };
    Ok(NemotronMixer::Attention {
        q_proj,
        k_proj,
        v_proj,
        o_proj,
        biases,
    })
}

fn mlp(
    ix: &mut Index<'_>,
    m: &str,
    l: usize,
    s: &MlpSpec,
    h: u64,
) -> Result<NemotronMixer, Refusal> {
    let i = s.intermediate_size;
    let (at, mc) = (Some(l), TensorClass::Mlp);
    let up_proj = ix.require(&format!("{m}up_proj.weight"), &[i, h], Role::Matrix, mc, at)?;
    let down_proj = ix.require(
        &format!("{m}down_proj.weight"),
        &[h, i],
        Role::Matrix,
        mc,
        at,
    )?;
    let biases = if s.bias {
        Some([
            ix.require(&format!("{m}up_proj.bias"), &[i], Role::Dense, mc, at)?,
            ix.require(&format!("{m}down_proj.bias"), &[h], Role::Dense, mc, at)?,
        ])
    } else {
        None
    };
    Ok(NemotronMixer::Mlp {
        up_proj,
        down_proj,
        biases,
    })
}

fn moe(
    ix: &mut Index<'_>,
    m: &str,
    l: usize,
    s: &MoeSpec,
    h: u64,
) -> Result<NemotronMixer, Refusal> {
    if s.bias {
        return Err(Refusal::bad(
            "mlp_bias",
            format!("layer {l}: biases in MoE layers are not supported"),
        ));
    }
    let (e, at) = (s.n_routed_experts, Some(l));
    let rc = TensorClass::Router;
    let gate = ix.require(&format!("{m}gate.weight"), &[e, h], Role::Dense, rc, at)?;
    let e_score_correction_bias = ix.require(
        &format!("{m}gate.e_score_correction_bias"),
        &[e],
        Role::Dense,
        rc,
        at,
    )?;
    let latent = match s.latent_size {
        Some(lat) => Some([
            latent_proj(
                ix,
                &format!("{m}fc1_latent_proj.weight"),
                l,
                "fc1",
                [lat, h],
            )?,
            latent_proj(
                ix,
                &format!("{m}fc2_latent_proj.weight"),
                l,
                "fc2",
                [h, lat],
            )?,
        ]),
        None => None,
    };
    let experts = experts(ix, m, l, s, h)?;
    let shared = match s.shared_intermediate_size {
        Some(si) => {
            let sc = TensorClass::SharedExperts;
            Some([
                ix.require(
                    &format!("{m}shared_experts.up_proj.weight"),
                    &[si, h],
                    Role::Matrix,
                    sc,
                    at,
                )?,
                ix.require(
                    &format!("{m}shared_experts.down_proj.weight"),
                    &[h, si],
                    Role::Matrix,
                    sc,
                    at,
                )?,
            ])
        }
        None => None,
    };
    Ok(NemotronMixer::Moe {
        gate,
        e_score_correction_bias,
        experts,
        shared,
        latent,
    })
}

/// A latent projection: present, `[out, in]` (not transposed), unquantized BF16/F32.
fn latent_proj(
    ix: &mut Index<'_>,
    name: &str,
    layer: usize,
    which: &'static str,
    expected: [u64; 2],
) -> Result<TensorEntry, Refusal> {
    let entry = ix
        .lookup(name)
        .ok_or_else(|| Refusal::LatentProjectionMissing {
            layer,
            which: which.into(),
        })?;
    let transposed = [expected[1], expected[0]];
    if expected[0] != expected[1] && entry.shape == transposed {
        return Err(Refusal::LatentProjectionTransposed {
            layer,
            which: which.into(),
            expected: expected.to_vec(),
            found: entry.shape.clone(),
        });
    }
    let role = Role::LatentProjection { layer, which };
    ix.require(
        name,
        &expected,
        role,
        TensorClass::ExpertProjection,
        Some(layer),
    )
}

/// Routed experts in whichever form is present; refuses experts stored over hidden_size
/// when a latent size is set.
fn experts(
    ix: &mut Index<'_>,
    m: &str,
    l: usize,
    s: &MoeSpec,
    h: u64,
) -> Result<ExpertWeights, Refusal> {
    let (e, i, d) = (s.n_routed_experts, s.moe_intermediate_size, s.expert_dim(h));
    let at = Some(l);
    let rc = TensorClass::RoutedExperts;
    let stacked = [
        (
            format!("{m}switch_mlp.fc1.weight"),
            format!("{m}switch_mlp.fc2.weight"),
        ),
        (
            format!("{m}experts.up_proj"),
            format!("{m}experts.down_proj"),
        ),
        (
            format!("{m}experts.up_proj.weight"),
            format!("{m}experts.down_proj.weight"),
        ),
    ];
    for (up, down) in &stacked {
        if ix.has(up) || ix.has(down) {
            over_hidden(ix, up, l, s, h)?;
            return Ok(ExpertWeights::Stacked {
                up: ix.require(up, &[e, i, d], Role::Matrix, rc, at)?,
                down: ix.require(down, &[e, d, i], Role::Matrix, rc, at)?,
            });
        }
    }
    over_hidden(ix, &format!("{m}experts.0.up_proj.weight"), l, s, h)?;
    let mut ups = Vec::with_capacity(e as usize);
    let mut downs = Vec::with_capacity(e as usize);
    for x in 0..e {
        ups.push(ix.require(
            &format!("{m}experts.{x}.up_proj.weight"),
            &[i, d],
            Role::Matrix,
            rc,
            at,
        )?);
        downs.push(ix.require(
            &format!("{m}experts.{x}.down_proj.weight"),
            &[d, i],
            Role::Matrix,
            rc,
            at,
        )?);
    }
    Ok(ExpertWeights::PerExpert {
        up: ups,
        down: downs,
    })
}

/// With a latent size set, refuses an up projection whose input width is hidden_size.
fn over_hidden(ix: &Index<'_>, up: &str, l: usize, s: &MoeSpec, h: u64) -> Result<(), Refusal> {
    let (Some(lat), Some(entry)) = (s.latent_size, ix.lookup(up)) else {
        return Ok(());
    };
    match entry.shape.last() {
        Some(&found) if found == h && lat != h => Err(Refusal::RoutedExpertsOverHidden {
            layer: l,
            tensor: up.into(),
            latent: lat,
            found,
        }),
        _ => Ok(()),
    }
}
