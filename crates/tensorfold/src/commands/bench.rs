//! `tensorfold models`.

use clap::Parser;
use std::process::ExitCode;

/// Arguments of `tensorfold models`.
#[derive(Parser)]
pub struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `tensorfold models`.
pub fn main(_args: Args) -> anyhow::Result<ExitCode> {
    super::not_there_yet("models", "Foundation")
}
