//! Projection biases (qwen2 q/k/v; llama `attention_bias` / `mlp_bias`) and the per-head q/k
//! RMSNorm (qwen3) on the GPU, with the CPU forward's arithmetic and order
//! (`tf_models::llama`): a bias is added to a projection's stored output (`y = s + b`, one
//! rounding), an output bias before the residual (`x = x + (s + b)`), and the q/k norms apply
//! per head after the biases and before RoPE. These launches run only for models that have the
//! tensors, so other models keep their launch sequence.

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::fused::Epilogue;
use crate::load;
use crate::ops::{grid, i32_of, need};
use cudarc::driver::{CudaSlice, LaunchConfig};
use tf_families::llama::{LlamaConfig, LlamaLayer, LlamaPlan};
use tf_formats::checkpoint::Checkpoint;
use tf_formats::TensorEntry;

/// Kernel entry points of `kernels/llama_extra.cu` (planted controls included).
pub const KERNEL_NAMES: &[&str] = &[
    "tf_bias_rows",
    "tf_plant_bias_rows_skip_last",
    "tf_bias_residual",
    "tf_plant_bias_residual_reordered",
    "tf_head_rms_norm",
    "tf_plant_head_rms_norm_short",
];

/// `y[i, j] = y[i, j] + b[j]` for the first `n` rows of width `b.len()`.
pub fn bias_rows(gpu: &Gpu, y: &mut CudaSlice<f32>, b: &CudaSlice<f32>, n: usize) -> Result<()> {
    bias_rows_with(gpu, "tf_bias_rows", y, b, n)
}

/// [`bias_rows`] through a named kernel (the suite's planted controls).
pub fn bias_rows_with(
    gpu: &Gpu,
    kernel: &'static str,
    y: &mut CudaSlice<f32>,
    b: &CudaSlice<f32>,
    n: usize,
) -> Result<()> {
    const OP: &str = "bias_rows";
    let width = b.len();
    need(OP, "y", y.len(), n * width)?;
    let (n_, w_) = (i32_of(OP, "rows", n)?, i32_of(OP, "width", width)?);
    i32_of(OP, "elements", n * width)?;
    if n == 0 || width == 0 {
        return Ok(());
    }
    let mut l = gpu.launcher(kernel)?;
    l.arg(y).arg(b).arg(&n_).arg(&w_);
    // SAFETY: (f32*, f32*, i32, i32); y holds n * width elements, b width (checked above).
    unsafe { l.go(grid(n * width, 256), "launching bias_rows") }
}

/// `x[i, j] = x[i, j] + (s[i, j] + b[j])` for the first `n` rows of width `b.len()`: an output
/// projection's bias, then the residual add, as the CPU rounds them.
pub fn bias_residual(
    gpu: &Gpu,
    x: &mut CudaSlice<f32>,
    s: &CudaSlice<f32>,
    b: &CudaSlice<f32>,
    n: usize,
) -> Result<()> {
    bias_residual_with(gpu, "tf_bias_residual", x, s, b, n)
}

/// [`bias_residual`] through a named kernel (the suite's planted controls).
pub fn bias_residual_with(
    gpu: &Gpu,
    kernel: &'static str,
    x: &mut CudaSlice<f32>,
    s: &CudaSlice<f32>,
    b: &CudaSlice<f32>,
    n: usize,
) -> Result<()> {
    const OP: &str = "bias_residual";
    let width = b.len();
    need(OP, "x", x.len(), n * width)?;
    need(OP, "s", s.len(), n * width)?;
    let (n_, w_) = (i32_of(OP, "rows", n)?, i32_of(OP, "width", width)?);
    i32_of(OP, "elements", n * width)?;
    if n == 0 || width == 0 {
        return Ok(());
    }
    let mut l = gpu.launcher(kernel)?;
    l.arg(x).arg(s).arg(b).arg(&n_).arg(&w_);
    // SAFETY: (f32*, f32*, f32*, i32, i32); x and s hold n * width elements (checked above).
    unsafe { l.go(grid(n * width, 256), "launching bias_residual") }
}

/// Where a run of heads lies in each row of a buffer: `heads` heads of `gain.len()` elements
/// from element `offset` of rows `row_stride` apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadRun {
    /// Heads in the run.
    pub heads: usize,
    /// Elements between consecutive rows.
    pub row_stride: usize,
    /// The run's first element within a row.
    pub offset: usize,
}

/// In-place RMSNorm of every head of `run` in the first `n` rows: `h = gain * (h * r)`,
/// `r = 1 / sqrt(dot(h, h) / head_dim + eps)`, `head_dim = gain.len()`.
pub fn head_rms_norm(
    gpu: &Gpu,
    x: &mut CudaSlice<f32>,
    gain: &CudaSlice<f32>,
    eps: f32,
    n: usize,
    run: HeadRun,
) -> Result<()> {
    head_rms_norm_with(gpu, "tf_head_rms_norm", x, gain, eps, n, run)
}

/// [`head_rms_norm`] through a named kernel (the suite's planted controls).
pub fn head_rms_norm_with(
    gpu: &Gpu,
    kernel: &'static str,
    x: &mut CudaSlice<f32>,
    gain: &CudaSlice<f32>,
    eps: f32,
    n: usize,
    run: HeadRun,
) -> Result<()> {
    const OP: &str = "head_rms_norm";
    let hd = gain.len();
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(CudaError::Param {
            op: OP,
            what: "eps",
            value: eps as f64,
            why: "must be finite and >= 0",
        });
    }
    if hd == 0 || run.offset + run.heads * hd > run.row_stride {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!(
                "{} heads of {hd} from element {} do not fit rows of {}",
                run.heads, run.offset, run.row_stride
            ),
        });
    }
    if n == 0 || run.heads == 0 {
        return Ok(());
    }
    need(
        OP,
        "x",
        x.len(),
        (n - 1) * run.row_stride + run.offset + run.heads * hd,
    )?;
    let blocks = i32_of(OP, "rows * heads", n * run.heads)?;
    let heads = i32_of(OP, "heads", run.heads)?;
    let hd_ = i32_of(OP, "head_dim", hd)?;
    let stride = i32_of(OP, "row stride", run.row_stride)?;
    let offset = i32_of(OP, "offset", run.offset)?;
    i32_of(OP, "elements", n * run.row_stride)?;
    let mut l = gpu.launcher(kernel)?;
    l.arg(x)
        .arg(gain)
        .arg(&heads)
        .arg(&hd_)
        .arg(&stride)
        .arg(&offset)
        .arg(&eps);
    let cfg = LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: (f32*, f32*, i32, i32, i32, i32, f32); every head of every row lies inside x
    // (checked above); one warp per (row, head).
    unsafe { l.go(cfg, "launching head_rms_norm") }
}

impl LayerExtras {
    /// The launches after the `[q | k | v]` projection (rows `n`, `heads`/`kv_heads` heads of
    /// `head_dim`), in the CPU's order: the q, k, v biases, then the per-head q and k norms.
    /// Nothing for a model without them.
    pub fn after_qkv(
        &self,
        gpu: &Gpu,
        qkv: &mut CudaSlice<f32>,
        eps: f32,
        n: usize,
        (heads, kv_heads, head_dim): (usize, usize, usize),
    ) -> Result<()> {
        if let Some(b) = &self.qkv_bias {
            bias_rows(gpu, qkv, b, n)?;
        }
        if let Some([gq, gk]) = &self.qk_norm {
            let row_stride = (heads + 2 * kv_heads) * head_dim;
            let run = |heads, offset| HeadRun {
                heads,
                row_stride,
                offset,
            };
            head_rms_norm(gpu, qkv, gq, eps, n, run(heads, 0))?;
            head_rms_norm(gpu, qkv, gk, eps, n, run(kv_heads, heads * head_dim))?;
        }
        Ok(())
    }
}

/// Where a projection that ends in the residual add writes: into `x` with the fused add when
/// it has no bias (the launch of a plain model), else into `proj`, stored, for
/// [`residual_bias`].
pub fn residual_out<'a>(
    bias: Option<&CudaSlice<f32>>,
    x: &'a mut CudaSlice<f32>,
    proj: &'a mut Option<CudaSlice<f32>>,
) -> Result<(Epilogue, &'a mut CudaSlice<f32>)> {
    match bias {
        None => Ok((Epilogue::Add, x)),
        Some(_) => Ok((Epilogue::Store, proj.as_mut().ok_or_else(no_proj)?)),
    }
}

/// After [`residual_out`]: `x = x + (proj + bias)` when there is a bias, else nothing.
pub fn residual_bias(
    gpu: &Gpu,
    bias: Option<&CudaSlice<f32>>,
    x: &mut CudaSlice<f32>,
    proj: &Option<CudaSlice<f32>>,
    n: usize,
) -> Result<()> {
    match bias {
        None => Ok(()),
        Some(b) => bias_residual(gpu, x, proj.as_ref().ok_or_else(no_proj)?, b, n),
    }
}

fn no_proj() -> CudaError {
    CudaError::Shape {
        op: "llama",
        detail: "a biased projection without its workspace buffer".into(),
    }
}

/// One layer's biases and q/k norm gains decoded to f32 on the host, concatenated as the
/// GPU's fused projections lay out their outputs (`[q | k | v]`, `[gate | up]`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LayerExtrasHost {
    /// `[bq | bk | bv]`.
    pub qkv_bias: Option<Vec<f32>>,
    /// The output projection's bias.
    pub o_bias: Option<Vec<f32>>,
    /// Per-head q and k gains (`[head_dim]` each).
    pub qk_norm: Option<[Vec<f32>; 2]>,
    /// `[b_gate | b_up]`.
    pub gate_up_bias: Option<Vec<f32>>,
    /// The down projection's bias.
    pub down_bias: Option<Vec<f32>>,
}

fn vec_of(ck: &Checkpoint, e: &TensorEntry, want: usize) -> Result<Vec<f32>> {
    let v = load::vector_host(ck, e)?;
    if v.len() != want {
        return Err(CudaError::Shape {
            op: "llama extras",
            detail: format!(
                "{} holds {} values, the layer needs {want}",
                e.name,
                v.len()
            ),
        });
    }
    Ok(v)
}

fn concat(ck: &Checkpoint, parts: &[(&TensorEntry, usize)]) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    for &(e, want) in parts {
        out.extend(vec_of(ck, e, want)?);
    }
    Ok(out)
}

impl LayerExtrasHost {
    /// Decodes `layer`'s biases and q/k norm gains, checking each length against `cfg`.
    pub fn read(ck: &Checkpoint, cfg: &LlamaConfig, layer: &LlamaLayer) -> Result<Self> {
        let hd = cfg.head_dim as usize;
        let qw = cfg.num_attention_heads as usize * hd;
        let kw = cfg.num_key_value_heads as usize * hd;
        let (hidden, ffn) = (cfg.hidden_size as usize, cfg.intermediate_size as usize);
        Ok(LayerExtrasHost {
            qkv_bias: layer
                .qkv_bias
                .as_ref()
                .map(|[q, k, v]| concat(ck, &[(q, qw), (k, kw), (v, kw)]))
                .transpose()?,
            o_bias: layer
                .o_bias
                .as_ref()
                .map(|e| vec_of(ck, e, hidden))
                .transpose()?,
            qk_norm: layer
                .qk_norm
                .as_ref()
                .map(|[q, k]| Ok::<_, CudaError>([vec_of(ck, q, hd)?, vec_of(ck, k, hd)?]))
                .transpose()?,
            gate_up_bias: layer
                .mlp_bias
                .as_ref()
                .map(|[g, u, _]| concat(ck, &[(g, ffn), (u, ffn)]))
                .transpose()?,
            down_bias: layer
                .mlp_bias
                .as_ref()
                .map(|[_, _, d]| vec_of(ck, d, hidden))
                .transpose()?,
        })
    }

    /// Whether an output or down bias needs the projection stored apart before the residual.
    pub fn needs_scratch(&self) -> bool {
        self.o_bias.is_some() || self.down_bias.is_some()
    }
}

/// One layer's extras on the device.
pub struct LayerExtras {
    /// `[bq | bk | bv]`.
    pub qkv_bias: Option<CudaSlice<f32>>,
    /// The output projection's bias.
    pub o_bias: Option<CudaSlice<f32>>,
    /// Per-head q and k gains.
    pub qk_norm: Option<[CudaSlice<f32>; 2]>,
    /// `[b_gate | b_up]`.
    pub gate_up_bias: Option<CudaSlice<f32>>,
    /// The down projection's bias.
    pub down_bias: Option<CudaSlice<f32>>,
}

impl LayerExtras {
    /// Uploads `host`.
    pub fn upload(gpu: &Gpu, host: &LayerExtrasHost) -> Result<LayerExtras> {
        let up = |v: &Option<Vec<f32>>| v.as_ref().map(|v| gpu.upload(v)).transpose();
        Ok(LayerExtras {
            qkv_bias: up(&host.qkv_bias)?,
            o_bias: up(&host.o_bias)?,
            qk_norm: host
                .qk_norm
                .as_ref()
                .map(|[q, k]| Ok::<_, CudaError>([gpu.upload(q)?, gpu.upload(k)?]))
                .transpose()?,
            gate_up_bias: up(&host.gate_up_bias)?,
            down_bias: up(&host.down_bias)?,
        })
    }
}

/// Every layer's extras of `plan`, decoded on the host (no GPU needed): the preflight of
/// [`GpuLlama::new`](super::GpuLlama::new) for biased or q/k-normed models.
pub fn host_extras(ck: &Checkpoint, plan: &LlamaPlan) -> Result<Vec<LayerExtrasHost>> {
    plan.layers
        .iter()
        .map(|l| LayerExtrasHost::read(ck, &plan.config, l))
        .collect()
}

#[cfg(test)]
#[path = "extra_host.rs"]
mod host;

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn fixture(dir: &str) -> (Checkpoint, LlamaPlan) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/llama");
        let ck = Checkpoint::open(&root.join(dir)).expect(dir);
        let plan = tf_families::llama::plan(ck.config(), ck.entries()).expect(dir);
        (ck, plan)
    }

    /// Which extras each fixture's layers carry, and that they decode at the layer's sizes in
    /// the GPU's concatenated order.
    #[test]
    fn fixtures_preflight_their_extras_on_the_host() {
        // (dir, q/k/v biases, o and MLP biases, q/k norms)
        let cases = [
            ("qwen2/f32_hf", true, false, false),
            ("qwen2/bf16_hf", true, false, false),
            ("qwen2/q4g64", true, false, false),
            ("qwen2/q4g64_bf16", true, false, false),
            ("llama/f32_hf", true, true, false),
            ("llama/q4g64", true, true, false),
            ("qwen3/f32_hf", false, false, true),
            ("qwen3/q4g64", false, false, true),
            ("qwen3/q8g64", false, false, true),
            ("qwen3_yarn/q4g64", false, false, true),
            ("llama3/q4g64", false, false, false),
            ("mistral_swa/q4g64", false, false, false),
        ];
        for (dir, qkv, o_mlp, norm) in cases {
            let (ck, plan) = fixture(dir);
            let c = &plan.config;
            let hd = c.head_dim as usize;
            let qw = c.num_attention_heads as usize * hd;
            let kw = c.num_key_value_heads as usize * hd;
            let (hidden, ffn) = (c.hidden_size as usize, c.intermediate_size as usize);
            let extras = host_extras(&ck, &plan).expect(dir);
            assert_eq!(extras.len(), plan.layers.len(), "{dir}");
            for (e, l) in extras.iter().zip(&plan.layers) {
                assert_eq!(
                    e.qkv_bias.as_ref().map(Vec::len),
                    qkv.then_some(qw + 2 * kw)
                );
                assert_eq!(
                    e.o_bias.as_ref().map(Vec::len),
                    o_mlp.then_some(hidden),
                    "{dir}"
                );
                assert_eq!(
                    e.gate_up_bias.as_ref().map(Vec::len),
                    o_mlp.then_some(2 * ffn)
                );
                assert_eq!(e.down_bias.as_ref().map(Vec::len), o_mlp.then_some(hidden));
                assert_eq!(e.qk_norm.is_some(), norm, "{dir}");
                assert_eq!(e.needs_scratch(), o_mlp, "{dir}");
                if let (Some(b), Some([bq, bk, bv])) = (&e.qkv_bias, &l.qkv_bias) {
                    let parts = [bq, bk, bv].map(|t| load::vector_host(&ck, t).expect("bias"));
                    assert_eq!(b, &parts.concat(), "{dir}: [q | k | v] order");
                    assert!(
                        b.iter().any(|&v| v != 0.0),
                        "{dir}: an all-zero bias tests nothing"
                    );
                }
                if let Some([gq, gk]) = &e.qk_norm {
                    assert!(gq.len() == hd && gk.len() == hd, "{dir}");
                }
            }
        }
    }

    /// A bias entry of the wrong length is refused with the tensor's name (planted: the k bias
    /// given as the q bias).
    #[test]
    fn a_bias_of_the_wrong_length_is_refused() {
        let (ck, plan) = fixture("qwen2/f32_hf");
        let mut layer = plan.layers[0].clone();
        let [_, k, v] = layer.qkv_bias.clone().expect("qwen2 has q/k/v biases");
        layer.qkv_bias = Some([k.clone(), k, v]);
        match LayerExtrasHost::read(&ck, &plan.config, &layer) {
            Err(CudaError::Shape { detail, .. }) => assert!(detail.contains("k_proj"), "{detail}"),
            other => panic!("accepted a short q bias: {other:?}"),
        }
    }

    /// The kernels compile alone after the common header (when NVRTC is here) with the
    /// parameter counts the wrappers push, and IEEE square root and division.
    #[test]
    fn kernels_compile_with_the_wrappers_signatures() {
        if !crate::compile::nvrtc_present() {
            eprintln!("skipped: libnvrtc not found");
            return;
        }
        let src = format!(
            "{}\n{}",
            crate::compile::COMMON,
            include_str!("../../kernels/llama_extra.cu")
        );
        let ptx = crate::compile::compile_to_ptx("llama_extra.cu", &src, "compute_90")
            .unwrap_or_else(|e| panic!("{e}"));
        let counts: std::collections::HashMap<String, usize> =
            crate::launch::ptx_param_counts(&ptx).into_iter().collect();
        for (k, want) in [
            ("tf_bias_rows", 4),
            ("tf_plant_bias_rows_skip_last", 4),
            ("tf_bias_residual", 5),
            ("tf_plant_bias_residual_reordered", 5),
            ("tf_head_rms_norm", 7),
            ("tf_plant_head_rms_norm_short", 7),
        ] {
            assert_eq!(counts.get(k), Some(&want), "{k}");
        }
        assert_eq!(counts.len(), KERNEL_NAMES.len());
        assert!(ptx.contains("sqrt.rn.f32") && ptx.contains("div.rn.f32"));
        assert!(
            ptx.contains("fma.rn.f32"),
            "the sum of squares is an fmaf chain"
        );
    }

    #[test]
    fn kernel_names_are_in_the_program() {
        let names = crate::device::all_kernel_names();
        let src = crate::compile::program_source();
        for k in KERNEL_NAMES {
            assert!(names.iter().any(|n| n == k), "{k} not chained");
            assert!(
                src.contains(&format!("void {k}(")),
                "{k} not in the sources"
            );
        }
    }
}
