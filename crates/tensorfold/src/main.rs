//! `tensorfold`: an exact, receipted serving engine for language models.

mod commands;
mod model_args;
mod safetensors_out;
mod text;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// TensorFold serves language models with an OpenAI-compatible API, returning the same tokens
/// however requests are batched.
///
/// MODEL arguments accept a GGUF file, a Hugging Face safetensors directory (plain or
/// MLX-quantized), or `owner/name[@rev]` of a repository fetched with `tensorfold pull`.
/// With no MODEL, the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) is used, fetched into
/// $TENSORFOLD_HOME on first use.
#[derive(Parser)]
#[command(
    name = "tensorfold",
    version,
    about,
    long_about,
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a model over the OpenAI-compatible HTTP API.
    Serve(commands::serve::Args),
    /// Generate a reply to one prompt and stream it to stdout.
    Run(commands::run::Args),
    /// Describe a checkpoint: family, layers, parameters, formats, memory. Exit 2 on a refusal.
    Info(commands::info::Args),
    /// List the model families and checkpoint formats this build supports.
    Models(commands::models::Args),
    /// Download a Hugging Face repository (config, tokenizer, weights) into $TENSORFOLD_HOME.
    Pull(commands::pull::Args),
    /// Teacher-forced logits for a list of token ids, written as safetensors.
    Score(commands::score::Args),
    /// Measure prefill and decode speed.
    Bench(commands::bench::Args),
    /// Prove exactness against a running server (concurrent == solo, ...).
    Receipts(commands::receipts::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(a) => commands::serve::main(a),
        Command::Run(a) => commands::run::main(a),
        Command::Info(a) => commands::info::main(a),
        Command::Models(a) => commands::models::main(a),
        Command::Pull(a) => commands::pull::main(a),
        Command::Score(a) => commands::score::main(a),
        Command::Bench(a) => commands::bench::main(a),
        Command::Receipts(a) => commands::receipts::main(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.downcast_ref::<model_args::Refusal>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
