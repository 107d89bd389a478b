//! The model argument and loading flags shared by run, score, bench and serve.

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

/// Which model to load and how.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// GGUF file, safetensors directory, or owner/name of a pulled repo; the default model
    /// (SmolLM2-135M-Instruct Q4_1, fetched on first use) when omitted.
    pub model: Option<String>,
    /// Worker threads for the kernels (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

impl ModelArgs {
    /// The local path of the model, fetching the default model if needed.
    pub fn path(&self) -> anyhow::Result<PathBuf> {
        Ok(tf_hub::resolve_model(self.model.as_deref(), true)?)
    }

    /// Loads the model's forward pass.
    pub fn load(&self) -> anyhow::Result<Box<dyn tf_models::Model>> {
        let path = self.path()?;
        let mut opts = tf_models::LoadOptions::default();
        if let Some(t) = self.threads {
            anyhow::ensure!(t > 0, "--threads must be at least 1");
            opts.threads = t;
        }
        tf_models::load(&path, &opts).with_context(|| format!("loading {}", path.display()))
    }
}
