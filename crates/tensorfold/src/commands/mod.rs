//! One module per subcommand.

pub mod bench;
pub mod info;
pub mod models;
pub mod pull;
pub mod receipts;
pub mod run;
pub mod score;
pub mod serve;

use std::process::ExitCode;

/// What a subcommand that is not built yet prints; exits with status 2.
pub fn not_there_yet(what: &str, issue: &str) -> anyhow::Result<ExitCode> {
    eprintln!("tensorfold {what} is not there yet (tracked in the issue \"{issue}\").");
    Ok(ExitCode::from(2))
}
