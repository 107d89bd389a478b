//! `tensorfold score`: teacher-forced logits of a token sequence, for fidelity checks.

use crate::model_args::ModelArgs;
use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use tf_engine::score::{score, ScoreMode};

/// Arguments of `tensorfold score`.
#[derive(Parser)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A JSON file holding a list of token ids (or an object with the list under "ids").
    #[arg(long)]
    pub tokens: PathBuf,
    /// How the sequence is fed: full (one round), serial (one token per round) or chunk:N.
    /// All modes give bit-identical logits.
    #[arg(long, default_value = "full")]
    pub mode: ScoreMode,
    /// Output safetensors file; it holds one float32 tensor `logits` [T, vocab].
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs `tensorfold score`.
pub fn main(args: Args) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.tokens)
        .with_context(|| format!("reading {}", args.tokens.display()))?;
    let tokens = parse_token_ids(&text).with_context(|| {
        format!(
            "{} must hold a JSON list of token ids",
            args.tokens.display()
        )
    })?;
    anyhow::ensure!(
        !tokens.is_empty(),
        "{} holds no tokens",
        args.tokens.display()
    );
    let mut model = args.model.load(1, None)?;
    let vocab = model.info().vocab_size;
    if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
        anyhow::bail!("token id {bad} is out of range: the vocabulary has {vocab} tokens");
    }
    let logits = score(model.as_mut(), &tokens, args.mode)?;
    crate::safetensors_out::write_f32(&args.out, "logits", &[tokens.len(), vocab], &logits)
        .with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!(
        "wrote logits [{}, {vocab}] to {}",
        tokens.len(),
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Token ids from a JSON list, or from an object's "ids" list.
fn parse_token_ids(text: &str) -> anyhow::Result<Vec<u32>> {
    let value: serde_json::Value = serde_json::from_str(text)?;
    let list = value.get("ids").unwrap_or(&value);
    Ok(serde_json::from_value(list.clone())?)
}
