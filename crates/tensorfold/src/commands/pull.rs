//! `tensorfold pull`: download a Hugging Face repository.

use clap::Parser;
use std::process::ExitCode;

/// Arguments of `tensorfold pull`.
#[derive(Parser)]
pub struct Args {
    /// Repository as owner/name, optionally pinned: owner/name@revision (branch, tag or commit).
    pub repo: String,
    /// Glob choosing which weight files to fetch (e.g. '*Q4_K_M*.gguf'); default: all
    /// safetensors, else the single GGUF.
    #[arg(long)]
    pub include: Option<String>,
    /// Hub base URL (default $HF_ENDPOINT, else https://huggingface.co).
    #[arg(long)]
    pub endpoint: Option<String>,
}

/// Runs `tensorfold pull`.
pub fn main(args: Args) -> anyhow::Result<ExitCode> {
    let (repo, revision) = match args.repo.split_once('@') {
        Some((r, rev)) => (r, Some(rev)),
        None => (args.repo.as_str(), None),
    };
    let opts = tf_hub::PullOptions {
        endpoint: args.endpoint,
        include: args.include,
        progress: true,
        ..Default::default()
    };
    let dir = tf_hub::pull(repo, revision, &opts)?;
    println!("{}", dir.display());
    Ok(ExitCode::SUCCESS)
}
