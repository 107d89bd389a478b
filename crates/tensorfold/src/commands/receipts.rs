//! `tensorfold receipts`: exactness receipts run against a server.

use clap::Parser;
use std::process::ExitCode;

/// Arguments of `tensorfold receipts`.
#[derive(Parser)]
pub struct Args {
    /// Which receipt: concurrency (concurrent == solo).
    pub which: String,
}

/// Runs `tensorfold receipts`.
pub fn main(_args: Args) -> anyhow::Result<ExitCode> {
    super::not_there_yet(
        "receipts",
        "The server: OpenAI API, continuous batching across streams",
    )
}
