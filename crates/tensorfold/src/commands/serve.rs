//! `tensorfold serve`.

use clap::Parser;
use std::process::ExitCode;

/// Arguments of `tensorfold serve`.
#[derive(Parser)]
pub struct Args {
    /// Model to serve (GGUF file, safetensors directory, or owner/name); default model if omitted.
    pub model: Option<String>,
    /// Address to bind; keep 127.0.0.1 unless you mean to expose the server.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on.
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
}

/// Runs `tensorfold serve`.
pub fn main(_args: Args) -> anyhow::Result<ExitCode> {
    super::not_there_yet(
        "serve",
        "The server: OpenAI API, continuous batching across streams",
    )
}
