//! `tensorfold info`: what a checkpoint is, validated without reading a weight byte.

use clap::Parser;
use std::process::ExitCode;
use tf_formats::checkpoint::Checkpoint;

/// Arguments of `tensorfold info`.
#[derive(Parser)]
pub struct Args {
    /// GGUF file, safetensors directory, or owner/name of a pulled repo; the default model when
    /// omitted.
    pub model: Option<String>,
    /// Context length (tokens per stream) for the memory estimate.
    #[arg(long, default_value_t = 4096)]
    pub context: u64,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `tensorfold info`: exit 0 with a summary, or 2 with the refusal's name and message.
pub fn main(args: Args) -> anyhow::Result<ExitCode> {
    let path = tf_hub::resolve_model(args.model.as_deref(), true)?;
    let ck = Checkpoint::open(&path)?;
    let plan = match tf_families::plan(ck.config(), ck.entries()) {
        Ok(plan) => plan,
        Err(refusal) => {
            if args.json {
                let json = serde_json::json!({ "refusal": refusal.name(), "message": refusal.to_string() });
                println!("{json}");
            }
            eprintln!("refused: {}: {refusal}", refusal.name());
            return Ok(ExitCode::from(2));
        }
    };
    let summary = tf_families::summarize(&plan, ck.entries(), args.context);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!("{}", path.display());
        print!("{summary}");
    }
    Ok(ExitCode::SUCCESS)
}
