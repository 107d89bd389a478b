//! The model argument and loading flags shared by run, score, bench and serve, and the choice
//! of backend (CPU or CUDA).

use anyhow::Context;
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use tf_cuda::backend::CudaOptions;
use tf_cuda::CudaError;
use tf_models::Model;

/// Which engine runs the forward pass.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// CUDA when a usable GPU is present and the model has a CUDA path, else the CPU.
    #[default]
    Auto,
    /// The CPU engine (the reference).
    Cpu,
    /// The GPU (refused with exit status 2 when it cannot run the model).
    Cuda,
}

/// A refusal before load (no GPU, a family without a CUDA path, too little memory): exit 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

/// Which model to load and how.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// GGUF file, safetensors directory, or owner/name of a pulled repo; the default model
    /// (SmolLM2-135M-Instruct Q4_1, fetched on first use) when omitted.
    pub model: Option<String>,
    /// Worker threads for the kernels (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Where the forward pass runs: auto (CUDA when a usable GPU is present and the model
    /// has a CUDA path, else the CPU), cpu, or cuda.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
}

impl ModelArgs {
    /// The local path of the model, fetching the default model if needed.
    pub fn path(&self) -> anyhow::Result<PathBuf> {
        Ok(tf_hub::resolve_model(self.model.as_deref(), true)?)
    }

    /// Loads the model's forward pass for `streams` streams at once, each of at most
    /// `context` positions on the GPU (None: the model's own context).
    pub fn load(&self, streams: usize, context: Option<usize>) -> anyhow::Result<Box<dyn Model>> {
        let gpu = CudaOptions {
            slots: streams,
            context,
            ..CudaOptions::default()
        };
        load_model(&self.path()?, self.backend, self.threads, &gpu)
    }
}

/// Whether a CUDA error means "this GPU cannot take this model" (a refusal) rather than a
/// failure along the way.
fn is_refusal(e: &CudaError) -> bool {
    matches!(
        e,
        CudaError::NoDriver
            | CudaError::NoNvrtc
            | CudaError::NoDevice { .. }
            | CudaError::GpuNotSupported { .. }
            | CudaError::UnsupportedFamily { .. }
            | CudaError::UnsupportedFormat { .. }
            | CudaError::DoesNotFit { .. }
    )
}

/// Loads `path` on `backend`; auto falls back to the CPU (saying why) when CUDA cannot take
/// the model, while an explicit `cuda` refuses with [`Refusal`].
pub fn load_model(
    path: &Path,
    backend: Backend,
    threads: Option<usize>,
    gpu: &CudaOptions,
) -> anyhow::Result<Box<dyn Model>> {
    let cpu = || -> anyhow::Result<Box<dyn Model>> {
        let mut opts = tf_models::LoadOptions::default();
        if let Some(t) = threads {
            anyhow::ensure!(t > 0, "--threads must be at least 1");
            opts.threads = t;
        }
        tf_models::load(path, &opts).with_context(|| format!("loading {}", path.display()))
    };
    let driver = tf_cuda::device::driver_present();
    if backend == Backend::Cpu || (backend == Backend::Auto && !driver) {
        return cpu();
    }
    if !driver {
        return Err(Refusal(format!("--backend cuda: {}", CudaError::NoDriver)).into());
    }
    let ck = tf_formats::checkpoint::Checkpoint::open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let plan = tf_families::plan(ck.config(), ck.entries())
        .map_err(|r| Refusal(format!("{}: {r}", r.name())))?;
    match load_on_gpu(&ck, &plan, gpu, &format!("GPU {}", gpu.ordinal)) {
        Err(e) if backend == Backend::Auto && e.is::<Refusal>() => {
            eprintln!("backend: cpu (CUDA cannot take this model: {e})");
            cpu()
        }
        Err(e) if e.is::<Refusal>() => Err(Refusal(format!("--backend cuda: {e}")).into()),
        loaded => loaded.with_context(|| format!("loading {} on the GPU", path.display())),
    }
}

/// Loads a planned checkpoint on the GPU, saying so; what the GPU cannot take comes back as a
/// [`Refusal`].
fn load_on_gpu(
    ck: &tf_formats::checkpoint::Checkpoint,
    plan: &tf_families::ModelPlan,
    opts: &CudaOptions,
    what: &str,
) -> anyhow::Result<Box<dyn Model>> {
    match tf_cuda::backend::load(ck, plan, opts) {
        Ok(m) => {
            eprintln!("backend: cuda ({what}, {} family)", plan.family());
            Ok(m)
        }
        Err(e) if is_refusal(&e) => Err(Refusal(e.to_string()).into()),
        Err(e) => Err(e.into()),
    }
}

/// Builds a synthetic checkpoint (`CONFIG[:LAYOUT]`) on the GPU for `streams` streams; the CPU
/// backend cannot hold one (its weights exist only in device memory).
pub fn load_synthetic(
    spec: &str,
    backend: Backend,
    streams: usize,
    context: usize,
) -> anyhow::Result<Box<dyn Model>> {
    if backend == Backend::Cpu {
        return Err(Refusal(
            "--synthetic needs the CUDA backend (its weights are generated in GPU memory)".into(),
        )
        .into());
    }
    if !tf_cuda::device::driver_present() {
        return Err(Refusal(format!("--synthetic: {}", CudaError::NoDriver)).into());
    }
    let (config, layout) = match spec.split_once(':') {
        Some((c, l)) => (c, Some(l)),
        None => (spec, None),
    };
    let ck = tf_families::synthetic::checkpoint(config, layout, None)
        .map_err(|e| Refusal(format!("--synthetic {spec}: {e}")))?;
    let plan = tf_families::plan(ck.config(), ck.entries())
        .map_err(|r| Refusal(format!("{}: {r}", r.name())))?;
    let opts = CudaOptions {
        slots: streams,
        context: Some(context),
        ..CudaOptions::default()
    };
    load_on_gpu(&ck, &plan, &opts, &format!("synthetic {spec}")).map_err(|e| {
        match e.downcast::<Refusal>() {
            Ok(r) => Refusal(format!("--synthetic {spec}: {r}")).into(),
            Err(e) => e.context(format!("building synthetic {spec} on the GPU")),
        }
    })
}
