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
    /// Size a muse_spark config.json alone (no weights needed): parameters and weight bytes per
    /// tensor-parallel rank for each `--tp` and `--bits`.
    #[arg(long)]
    pub sizing: bool,
    /// Tensor-parallel rank counts for `--sizing`.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4, 8])]
    pub tp: Vec<u32>,
    /// Bits per quantized weight for `--sizing`.
    #[arg(long, value_delimiter = ',', default_values_t = [4.0, 1.8])]
    pub bits: Vec<f64>,
}

/// `--sizing`: reads MODEL's config.json (MODEL may be the file or its directory).
fn sizing(args: &Args) -> anyhow::Result<ExitCode> {
    let model = args
        .model
        .as_deref()
        .ok_or_else(|| anyhow::anyhow!("--sizing needs MODEL"))?;
    let mut path = std::path::PathBuf::from(model);
    if path.is_dir() {
        path.push("config.json");
    }
    let text = std::fs::read_to_string(&path)?;
    let config = tf_formats::checkpoint::parse_config_json(&text).map_err(anyhow::Error::msg)?;
    let s = tf_families::muse_spark::sizing::sizing(&config, &args.tp, &args.bits)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        println!("{} (config only)", path.display());
        print!("{s}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `tensorfold info`: exit 0 with a summary, or 2 with the refusal's name and message.
pub fn main(args: Args) -> anyhow::Result<ExitCode> {
    if args.sizing {
        return sizing(&args);
    }
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
