//! Nemotron-H layers on the device, built from the plan's per-layer blocks (Puzzle layers carry
//! their own expert counts, widths and top-k). Every matrix comes through `crate::load` from the
//! plan's `TensorEntry` (routed experts through [`expert_packs`], the one place that slices a
//! stacked tensor); small vectors are decoded to f32 on the host with the CPU's arithmetic.

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::load;
use crate::mamba::GpuMambaMixer;
use crate::moe::{ExpertMlp, GpuExperts, Routing};
use crate::ops::AttnShape;
use crate::weights::{GpuFormat, GpuMatrix};
use cudarc::driver::CudaSlice;
use std::ops::Range;
use tf_families::nemotron_h::{
    ExpertWeights, MambaSpec, MoeSpec, NemotronBlock, NemotronHPlan, NemotronLayer, NemotronMixer,
};
use tf_formats::checkpoint::{Checkpoint, TensorData};
use tf_formats::{TensorEntry, WeightFormat};
use tf_kernels::matmul::PackedMatrix;
use tf_kernels::ops::{exp, DroppedGroups, MambaParams, RouteParams};

/// A Mamba2 mixer.
pub(super) struct MambaLayer {
    pub in_proj: GpuMatrix,
    pub in_bias: Option<CudaSlice<f32>>,
    pub mixer: GpuMambaMixer,
    /// Gated norm gain `[heads × head_dim]`.
    pub norm: CudaSlice<f32>,
    pub groups: usize,
    pub out_proj: GpuMatrix,
    pub out_bias: Option<CudaSlice<f32>>,
    /// Index among the Mamba layers (the state pool's layer).
    pub state_index: usize,
}

/// An attention mixer (no RoPE).
pub(super) struct AttnLayer {
    pub q: GpuMatrix,
    pub k: GpuMatrix,
    pub v: GpuMatrix,
    pub o: GpuMatrix,
    /// q, k, v, o biases.
    pub biases: Option<[CudaSlice<f32>; 4]>,
    pub shape: AttnShape,
    /// Index among the attention layers (its KV pool).
    pub kv_index: usize,
}

/// A relu² MLP (also the shared expert).
pub(super) struct MlpLayer {
    pub up: GpuMatrix,
    pub down: GpuMatrix,
    /// up and down biases.
    pub biases: Option<[CudaSlice<f32>; 2]>,
}

/// A mixture-of-experts layer.
pub(super) struct MoeLayer {
    /// Router `[experts, hidden]`.
    pub gate: GpuMatrix,
    pub correction: CudaSlice<f32>,
    pub routing: Routing,
    pub experts: ExpertMlp,
    pub shared: Option<MlpLayer>,
    /// fc1_latent_proj `[latent, hidden]` and fc2_latent_proj `[hidden, latent]`.
    pub latent: Option<(GpuMatrix, GpuMatrix)>,
    /// Width the routed experts read and write (latent or hidden).
    pub expert_dim: usize,
}

/// One layer's mixer.
pub(super) enum Mixer {
    Mamba(Box<MambaLayer>),
    Attention(Box<AttnLayer>),
    Mlp(Box<MlpLayer>),
    Moe(Box<MoeLayer>),
}

/// One layer: pre-norm gain and mixer.
pub(super) struct Layer {
    pub norm: CudaSlice<f32>,
    pub mixer: Mixer,
}

impl MlpLayer {
    fn bytes(&self) -> usize {
        self.up.storage_bytes() + self.down.storage_bytes()
    }
}

impl Layer {
    /// The products on the path its mixer runs first, from its normed input, each with the
    /// byte ranges worth asking L2 for ahead (docs/perf.md, session 44):
    /// - Mamba: in_proj's rows past z, the first `head` bytes, scale pairs first (z's rows run
    ///   beside the conv and the scan, off the path: mixers::in_proj_z_beside);
    /// - MoE: the router and the latent fc1 whole, not the shared expert, which has the whole
    ///   layer to finish;
    /// - the others' first products whole.
    pub fn first_products(&self, head: usize) -> Vec<(&GpuMatrix, Range<usize>)> {
        let whole = |w| (w, 0..usize::MAX);
        match &self.mixer {
            Mixer::Mamba(m) => {
                let w = &m.in_proj;
                let (mut asks, mut left) = (Vec::new(), head);
                for r in w
                    .row_spans(m.mixer.shape().inner()..w.rows())
                    .into_iter()
                    .rev()
                {
                    let take = r.len().min(left);
                    left -= take;
                    asks.push((w, r.start..r.start + take));
                }
                asks
            }
            Mixer::Attention(a) => vec![whole(&a.q), whole(&a.k), whole(&a.v)],
            Mixer::Mlp(m) => vec![whole(&m.up)],
            Mixer::Moe(m) => std::iter::once(&m.gate)
                .chain(m.latent.as_ref().map(|(fc1, _)| fc1))
                .map(whole)
                .collect(),
        }
    }

    /// Bytes of matrices on the device.
    pub fn weight_bytes(&self) -> usize {
        match &self.mixer {
            Mixer::Mamba(m) => m.in_proj.storage_bytes() + m.out_proj.storage_bytes(),
            Mixer::Attention(a) => [&a.q, &a.k, &a.v, &a.o]
                .iter()
                .map(|m| m.storage_bytes())
                .sum(),
            Mixer::Mlp(m) => m.bytes(),
            Mixer::Moe(m) => {
                m.gate.storage_bytes()
                    + m.experts.storage_bytes()
                    + m.shared.as_ref().map_or(0, MlpLayer::bytes)
                    + m.latent
                        .as_ref()
                        .map_or(0, |(a, b)| a.storage_bytes() + b.storage_bytes())
            }
        }
    }
}

fn opt_vector(
    gpu: &Gpu,
    ck: &Checkpoint,
    e: &Option<TensorEntry>,
) -> Result<Option<CudaSlice<f32>>> {
    e.as_ref().map(|e| load::vector(gpu, ck, e)).transpose()
}

/// The kernel parameters' dt clamp of a spec, as the CPU model maps it (configs spell "no
/// limit" as a huge number).
pub(super) fn dt_limit(s: &MambaSpec) -> (f32, f32) {
    (
        s.time_step_limit.0 as f32,
        if s.time_step_limit.1 >= f32::MAX as f64 {
            f32::INFINITY
        } else {
            s.time_step_limit.1 as f32
        },
    )
}

/// Builds layer `l` from its plan entry and resolved block.
pub(super) fn build_layer(
    gpu: &Gpu,
    ck: &Checkpoint,
    plan: &NemotronLayer,
    block: &NemotronBlock,
    hidden: usize,
    state_index: usize,
    kv_index: usize,
) -> Result<Layer> {
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
        ) => {
            // [C, 1, K] (HF) and [C, K, 1] (MLX) hold the same bytes in the same order.
            let conv_weight = load::vector_host(ck, conv1d_weight)?;
            let conv_bias = conv1d_bias
                .as_ref()
                .map(|e| load::vector_host(ck, e))
                .transpose()?;
            let a: Vec<f32> = load::vector_host(ck, a_log)?
                .iter()
                .map(|&v| -exp(v))
                .collect();
            let (dv, dtb) = (load::vector_host(ck, d)?, load::vector_host(ck, dt_bias)?);
            let params = MambaParams {
                n_heads: spec.num_heads as usize,
                head_dim: spec.head_dim as usize,
                n_groups: spec.n_groups as usize,
                state_size: spec.ssm_state_size as usize,
                conv_kernel: spec.conv_kernel as usize,
                conv_weight: &conv_weight,
                conv_bias: conv_bias.as_deref(),
                a: &a,
                d: &dv,
                dt_bias: &dtb,
                dt_limit: dt_limit(spec),
            };
            Mixer::Mamba(Box::new(MambaLayer {
                in_proj: load::product_matrix(gpu, ck, in_proj)?,
                in_bias: opt_vector(gpu, ck, in_proj_bias)?,
                mixer: GpuMambaMixer::upload(gpu, &params)?,
                norm: load::vector(gpu, ck, norm)?,
                groups: spec.n_groups as usize,
                out_proj: load::product_matrix(gpu, ck, out_proj)?,
                out_bias: opt_vector(gpu, ck, out_proj_bias)?,
                state_index,
            }))
        }
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
            Mixer::Attention(Box::new(AttnLayer {
                q: load::product_matrix(gpu, ck, q_proj)?,
                k: load::product_matrix(gpu, ck, k_proj)?,
                v: load::product_matrix(gpu, ck, v_proj)?,
                o: load::product_matrix(gpu, ck, o_proj)?,
                biases: match biases {
                    Some([a, b, c, d]) => Some([
                        load::vector(gpu, ck, a)?,
                        load::vector(gpu, ck, b)?,
                        load::vector(gpu, ck, c)?,
                        load::vector(gpu, ck, d)?,
                    ]),
                    None => None,
                },
                shape: AttnShape {
                    heads: spec.num_heads as usize,
                    kv_heads: spec.num_kv_heads as usize,
                    head_dim,
                    // mlx-lm: head_dim ** -0.5 in Python floats, rounded to f32 once (as the CPU).
                    scale: (head_dim as f64).powf(-0.5) as f32,
                    window: None,
                },
                kv_index,
            }))
        }
        (
            NemotronMixer::Mlp {
                up_proj,
                down_proj,
                biases,
            },
            NemotronBlock::Mlp(_),
        ) => Mixer::Mlp(Box::new(MlpLayer {
            up: load::product_matrix(gpu, ck, up_proj)?,
            down: load::product_matrix(gpu, ck, down_proj)?,
            biases: match biases {
                Some([a, b]) => Some([load::vector(gpu, ck, a)?, load::vector(gpu, ck, b)?]),
                None => None,
            },
        })),
        (
            NemotronMixer::Moe {
                gate,
                e_score_correction_bias,
                experts,
                shared,
                latent,
            },
            NemotronBlock::Moe(spec),
        ) => Mixer::Moe(Box::new(MoeLayer {
            gate: load::matrix(gpu, ck, gate)?,
            correction: load::vector(gpu, ck, e_score_correction_bias)?,
            routing: routing(spec)?,
            experts: expert_mlp(gpu, ck, experts, spec.n_routed_experts as usize)?,
            shared: match shared {
                Some([u, d]) => Some(MlpLayer {
                    up: load::product_matrix(gpu, ck, u)?,
                    down: load::product_matrix(gpu, ck, d)?,
                    biases: None,
                }),
                None => None,
            },
            latent: match latent {
                Some([a, b]) => Some((
                    load::product_matrix(gpu, ck, a)?,
                    load::product_matrix(gpu, ck, b)?,
                )),
                None => None,
            },
            expert_dim: spec.expert_dim(hidden as u64) as usize,
        })),
        _ => {
            return Err(CudaError::Shape {
                op: "nemotron_h layer",
                detail: format!(
                    "{}: the plan's tensors do not match block {}",
                    plan.norm.name,
                    block.type_name()
                ),
            })
        }
    };
    Ok(Layer {
        norm: load::vector(gpu, ck, &plan.norm)?,
        mixer,
    })
}

/// The CPU model's routing parameters of a MoE block (mlx-lm's dropped groups = 0.0).
pub(super) fn routing(spec: &MoeSpec) -> Result<Routing> {
    let r = Routing::Grouped(RouteParams {
        n_experts: spec.n_routed_experts as usize,
        top_k: spec.num_experts_per_tok as usize,
        n_group: spec.n_group as usize,
        topk_group: spec.topk_group as usize,
        scaling: spec.routed_scaling_factor as f32,
        norm_topk_prob: spec.norm_topk_prob,
        dropped: DroppedGroups::Zero,
    });
    r.validate()?;
    Ok(r)
}

/// The routed experts (relu²) of a MoE layer, stacked on the device (generated there for a
/// synthetic checkpoint, whose experts are stacked).
fn expert_mlp(gpu: &Gpu, ck: &Checkpoint, w: &ExpertWeights, n: usize) -> Result<ExpertMlp> {
    let [up, down] = plain_experts(gpu, ck, w, n)?;
    let group = |e: Option<&TensorEntry>| match e.map(|e| e.format) {
        Some(WeightFormat::MlxAffine {
            bits: 4,
            group_size,
            ..
        }) => group_size as usize,
        _ => 0,
    };
    let (gu, gd) = match w {
        ExpertWeights::Stacked { up, down } => (group(Some(up)), group(Some(down))),
        ExpertWeights::PerExpert { up, down } => (group(up.first()), group(down.first())),
    };
    ExpertMlp::new(None, up.for_products(gpu, gu)?, down.for_products(gpu, gd)?)
}

/// The routed experts' up and down matrices, stacked in the rows layout.
fn plain_experts(
    gpu: &Gpu,
    ck: &Checkpoint,
    w: &ExpertWeights,
    n: usize,
) -> Result<[GpuExperts; 2]> {
    if let Some(seed) = ck.synthetic_seed() {
        let ExpertWeights::Stacked { up, down } = w else {
            return Err(CudaError::UnsupportedFormat {
                format: "synthetic per-expert tensors (synthetic checkpoints stack experts)".into(),
            });
        };
        return Ok([
            crate::synthetic::experts(gpu, seed, up, n)?,
            crate::synthetic::experts(gpu, seed, down, n)?,
        ]);
    }
    let (up, down) = match w {
        ExpertWeights::Stacked { up, down } => {
            (expert_packs(ck, up, n)?, expert_packs(ck, down, n)?)
        }
        ExpertWeights::PerExpert { up, down } => (
            up.iter()
                .map(|e| crate::load::packed(ck, e))
                .collect::<Result<Vec<_>>>()?,
            down.iter()
                .map(|e| crate::load::packed(ck, e))
                .collect::<Result<Vec<_>>>()?,
        ),
    };
    if up.len() != n || down.len() != n {
        return Err(CudaError::Shape {
            op: "nemotron_h experts",
            detail: format!(
                "{} up / {} down matrices for {n} experts",
                up.len(),
                down.len()
            ),
        });
    }
    Ok([
        GpuExperts::upload(gpu, &up)?,
        GpuExperts::upload(gpu, &down)?,
    ])
}

fn bad(e: &TensorEntry, why: String) -> CudaError {
    CudaError::Shape {
        op: "checkpoint tensor",
        detail: format!("{}: {why}", e.name),
    }
}

fn pack<'a>(
    e: &TensorEntry,
    data: TensorData<'a>,
    rows: usize,
    cols: usize,
) -> Result<PackedMatrix<'a>> {
    tf_models::weights::pack(data, rows, cols).map_err(|why| bad(e, why))
}

/// The `n` matrices `[rows, cols]` of a stacked `[n, rows, cols]` expert tensor (no copy):
/// dense bytes, or MLX words / scales / biases, split into `n` equal parts.
pub(super) fn expert_packs<'a>(
    ck: &'a Checkpoint,
    e: &TensorEntry,
    n: usize,
) -> Result<Vec<PackedMatrix<'a>>> {
    let [experts, rows, cols] = e.shape[..] else {
        return Err(bad(
            e,
            format!("expected [experts, out, in], found {:?}", e.shape),
        ));
    };
    if experts as usize != n || n == 0 {
        return Err(bad(e, format!("{experts} experts stored, {n} expected")));
    }
    let data = ck
        .data(&e.name)
        .ok_or_else(|| bad(e, "no data in the checkpoint".into()))?;
    let split = |bytes: &'a [u8], what: &str| -> Result<Vec<&'a [u8]>> {
        if !bytes.len().is_multiple_of(n) {
            return Err(bad(
                e,
                format!("{what}: {} bytes do not split into {n}", bytes.len()),
            ));
        }
        Ok(bytes.chunks_exact(bytes.len() / n).collect())
    };
    let (rows, cols) = (rows as usize, cols as usize);
    match data {
        TensorData::Dense { dtype, bytes } => split(bytes, "weight")?
            .into_iter()
            .map(|b| pack(e, TensorData::Dense { dtype, bytes: b }, rows, cols))
            .collect(),
        TensorData::MlxAffine {
            weight,
            scales,
            biases,
            bits,
            group_size,
            scales_dtype,
        } => {
            let (w, s, b) = (
                split(weight, "weight")?,
                split(scales, "scales")?,
                split(biases, "biases")?,
            );
            w.into_iter()
                .zip(s)
                .zip(b)
                .map(|((weight, scales), biases)| {
                    let d = TensorData::MlxAffine {
                        weight,
                        scales,
                        biases,
                        bits,
                        group_size,
                        scales_dtype,
                    };
                    pack(e, d, rows, cols)
                })
                .collect()
        }
        TensorData::Gguf { .. } => Err(CudaError::UnsupportedFormat {
            format: format!("{}: stacked GGUF experts", e.name),
        }),
    }
}

/// Refuses, before any weight is uploaded, what the GPU cannot run: every matrix must have a
/// GPU format, and every MoE layer's routed experts a grouped expert matmul (`crate::moe`).
/// The refusal names the tensor.
pub(super) fn preflight(ck: &Checkpoint, plan: &NemotronHPlan) -> Result<()> {
    let named = |e: &TensorEntry, err: CudaError| match err {
        CudaError::UnsupportedFormat { format } => CudaError::UnsupportedFormat {
            format: format!("{}: {format}", e.name),
        },
        other => other,
    };
    // A synthetic checkpoint has no bytes: its formats come from the entries alone.
    let format = |e: &TensorEntry| -> Result<GpuFormat> {
        if ck.is_synthetic() {
            crate::synthetic::gpu_format(e)
        } else {
            GpuFormat::of(&crate::load::packed(ck, e)?)
        }
    };
    let check = |e: &TensorEntry| -> Result<()> { format(e).map(|_| ()).map_err(|x| named(e, x)) };
    check(&plan.embeddings)?;
    if let Some(h) = &plan.lm_head {
        check(h)?;
    }
    for (l, block) in plan.layers.iter().zip(&plan.config.layers) {
        let mut mats: Vec<&TensorEntry> = Vec::new();
        match &l.mixer {
            NemotronMixer::Mamba {
                in_proj, out_proj, ..
            } => mats.extend([in_proj, out_proj]),
            NemotronMixer::Attention {
                q_proj,
                k_proj,
                v_proj,
                o_proj,
                ..
            } => mats.extend([q_proj, k_proj, v_proj, o_proj]),
            NemotronMixer::Mlp {
                up_proj, down_proj, ..
            } => mats.extend([up_proj, down_proj]),
            NemotronMixer::Moe {
                gate,
                experts,
                shared,
                latent,
                ..
            } => {
                mats.push(gate);
                mats.extend(shared.iter().flatten());
                mats.extend(latent.iter().flatten());
                let NemotronBlock::Moe(spec) = block else {
                    continue;
                };
                let n = spec.n_routed_experts as usize;
                // The first expert's format (a stacked tensor's slice, or the first tensor).
                let found = match experts {
                    ExpertWeights::Stacked { up, .. } if ck.is_synthetic() => {
                        Some((up, crate::synthetic::gpu_format(up)))
                    }
                    ExpertWeights::Stacked { up, .. } => {
                        let packs = expert_packs(ck, up, n)?;
                        packs.first().map(|m| (up, GpuFormat::of(m)))
                    }
                    ExpertWeights::PerExpert { up, .. } => up.first().map(|e| (e, format(e))),
                };
                if let Some((entry, f)) = found {
                    let f = f.map_err(|x| named(entry, x))?;
                    let kernel = format!("tf_moe_matmul_{}", f.kernel_tag());
                    if !crate::moe::KERNEL_NAMES.contains(&kernel.as_str()) {
                        return Err(CudaError::UnsupportedFormat {
                            format: format!(
                                "{}: {f:?} routed experts (no grouped expert matmul {kernel})",
                                entry.name
                            ),
                        });
                    }
                }
            }
        }
        for e in mats {
            check(e)?;
        }
    }
    Ok(())
}
