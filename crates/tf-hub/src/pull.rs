//! `tensorfold pull REPO[@REV]`: download a model's config, tokenizer and weights from a Hugging
//! Face hub into `<home>/hub` (the hub's own cache layout) and return the snapshot directory.

use std::fs;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use hf_hub::api::sync::{Api, ApiBuilder, ApiError};
use hf_hub::api::Progress;
use hf_hub::{Cache, Repo, RepoType};
use indicatif::{ProgressBar, ProgressStyle};

use crate::HubError;

/// The hub used when neither [`PullOptions::endpoint`] nor `$HF_ENDPOINT` is set.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Top-level files fetched besides the weights, whenever the repository has them.
pub const METADATA_FILES: &[&str] = &[
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
];

/// Options of [`pull`]; `Default` means: hub from `$HF_ENDPOINT`, token from `$HF_TOKEN`, no
/// include glob, [`crate::home_dir`], no progress output.
#[derive(Debug, Clone, Default)]
pub struct PullOptions {
    /// Hub base URL; `None` = `$HF_ENDPOINT`, else [`DEFAULT_ENDPOINT`].
    pub endpoint: Option<String>,
    /// Access token; `None` = `$HF_TOKEN`, else `<home>/token` if present.
    pub token: Option<String>,
    /// Glob choosing the weight files (e.g. `*Q4_K_M*.gguf`) instead of the automatic choice.
    pub include: Option<String>,
    /// Model home; `None` = [`crate::home_dir`].
    pub home: Option<PathBuf>,
    /// Report each file on stderr: a progress bar on a terminal, a plain line otherwise.
    pub progress: bool,
}

/// Downloads `repo` at `revision` (default `main`) and returns its local snapshot directory.
///
/// Fetched: [`METADATA_FILES`] that exist, and the weights: files matching `opts.include` if
/// given, else every top-level `*.safetensors` (+ `*.safetensors.index.json`), else the single
/// `*.gguf`. Files already in the cache are not downloaded again.
pub fn pull(repo: &str, revision: Option<&str>, opts: &PullOptions) -> Result<PathBuf, HubError> {
    if !crate::resolve::is_repo_id(repo) {
        return Err(HubError::InvalidRepoId { arg: repo.into() });
    }
    let revision = revision.unwrap_or("main");
    let home = opts.home.clone().unwrap_or_else(crate::home_dir);
    let hub_dir = home.join("hub");
    let endpoint = opts
        .endpoint
        .clone()
        .or_else(|| std::env::var("HF_ENDPOINT").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| DEFAULT_ENDPOINT.into());
    let endpoint = endpoint.trim_end_matches('/').to_string();
    let cache = Cache::new(hub_dir.clone());
    let token = opts
        .token
        .clone()
        .or_else(|| std::env::var("HF_TOKEN").ok().filter(|s| !s.is_empty()))
        .or_else(|| cache.token());
    let api = ApiBuilder::from_cache(cache.clone())
        .with_endpoint(endpoint.clone())
        .with_token(token)
        .with_progress(false)
        .with_user_agent("tensorfold", env!("CARGO_PKG_VERSION"))
        .build()
        .map_err(|e| HubError::Network {
            endpoint: endpoint.clone(),
            message: e.to_string(),
        })?;

    let (commit, names) = repo_listing(&api, repo, revision, &endpoint)?;
    let files = select_files(repo, revision, &names, opts.include.as_deref())?;
    let pinned = Repo::with_revision(repo.into(), RepoType::Model, commit.clone());
    let cached = cache.repo(pinned.clone());
    let remote = api.repo(pinned);
    let show_bar = opts.progress && std::io::stderr().is_terminal();
    for file in &files {
        if cached.get(file).is_some() {
            continue;
        }
        let progress = FileProgress::new(opts.progress, show_bar);
        remote
            .download_with_progress(file, progress)
            .map_err(|e| download_error(repo, file, e))?;
    }

    let snapshot = snapshot_dir(&hub_dir, repo, &commit);
    if !snapshot.is_dir() {
        return Err(HubError::BadResponse {
            url: endpoint,
            message: format!(
                "no snapshot directory {} after download",
                snapshot.display()
            ),
        });
    }
    record_pull(&hub_dir, repo, revision, &commit)?;
    if opts.progress {
        eprintln!(
            "tensorfold: {repo}@{revision} ({commit}) is at {}",
            snapshot.display()
        );
    }
    Ok(snapshot)
}

/// The directory of `repo`'s cache under `hub_dir`: `models--owner--name`.
fn repo_dir(hub_dir: &Path, repo: &str) -> PathBuf {
    hub_dir.join(Repo::model(repo.into()).folder_name())
}

/// The snapshot directory of `repo` at `commit`.
fn snapshot_dir(hub_dir: &Path, repo: &str, commit: &str) -> PathBuf {
    repo_dir(hub_dir, repo).join("snapshots").join(commit)
}

/// The file recording that a pull of `revision` completed (revision `/` escaped as `%2F`).
fn pulled_record(hub_dir: &Path, repo: &str, revision: &str) -> PathBuf {
    repo_dir(hub_dir, repo)
        .join("tensorfold-pulled")
        .join(revision.replace('/', "%2F"))
}

/// Records a completed pull: our own record, plus the hub layout's `refs/<revision>`.
fn record_pull(hub_dir: &Path, repo: &str, revision: &str, commit: &str) -> Result<(), HubError> {
    let record = pulled_record(hub_dir, repo, revision);
    if let Some(parent) = record.parent() {
        fs::create_dir_all(parent).map_err(|e| HubError::io("create", parent, e))?;
    }
    fs::write(&record, commit).map_err(|e| HubError::io("write", &record, e))?;
    let refs = Cache::new(hub_dir.to_path_buf()).repo(Repo::with_revision(
        repo.into(),
        RepoType::Model,
        revision.into(),
    ));
    refs.create_ref(commit)
        .map_err(|e| HubError::io("write a ref under", repo_dir(hub_dir, repo), e))
}

/// The snapshot directory of a completed earlier pull of `repo` at `revision`, if any.
pub fn pulled_snapshot(home: &Path, repo: &str, revision: &str) -> Option<PathBuf> {
    let hub_dir = home.join("hub");
    let commit = fs::read_to_string(pulled_record(&hub_dir, repo, revision)).ok()?;
    let commit = commit.trim();
    if !is_safe_component(commit) {
        return None;
    }
    let dir = snapshot_dir(&hub_dir, repo, commit);
    dir.is_dir().then_some(dir)
}

/// Whether `s` can be used as one path component (a commit hash from the server).
fn is_safe_component(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// Whether a file name from the server stays inside the snapshot directory.
fn is_safe_relative(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('/')
        && !name.contains('\\')
        && name
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
}

/// The commit and file list of `repo` at `revision`, with hub errors named.
fn repo_listing(
    api: &Api,
    repo: &str,
    revision: &str,
    endpoint: &str,
) -> Result<(String, Vec<String>), HubError> {
    let request = api
        .repo(Repo::with_revision(
            repo.into(),
            RepoType::Model,
            revision.into(),
        ))
        .info_request();
    let url = request.url().to_string();
    let response = request.call().map_err(|e| match e {
        ureq::Error::Status(status, response) => {
            let code = response.header("x-error-code").unwrap_or("").to_string();
            match (code.as_str(), status) {
                ("RevisionNotFound", _) => HubError::RevisionNotFound {
                    repo: repo.into(),
                    revision: revision.into(),
                    endpoint: endpoint.into(),
                },
                ("GatedRepo", _) | (_, 403) => HubError::AccessDenied {
                    repo: repo.into(),
                    status,
                },
                ("RepoNotFound", _) | (_, 401 | 404) => HubError::RepoNotFound {
                    repo: repo.into(),
                    endpoint: endpoint.into(),
                },
                _ => HubError::HttpStatus {
                    url: url.clone(),
                    status,
                },
            }
        }
        ureq::Error::Transport(t) => HubError::Network {
            endpoint: endpoint.into(),
            message: t.to_string(),
        },
    })?;
    let info: hf_hub::api::RepoInfo = response.into_json().map_err(|e| HubError::BadResponse {
        url: url.clone(),
        message: e.to_string(),
    })?;
    if !is_safe_component(&info.sha) {
        return Err(HubError::BadResponse {
            url,
            message: format!("commit `{}` is not a plain name", info.sha),
        });
    }
    let names = info
        .siblings
        .into_iter()
        .map(|s| s.rfilename)
        .filter(|name| is_safe_relative(name))
        .collect();
    Ok((info.sha, names))
}

/// Chooses which of `names` to download (see [`pull`]); the result is sorted and unique.
pub fn select_files(
    repo: &str,
    revision: &str,
    names: &[String],
    include: Option<&str>,
) -> Result<Vec<String>, HubError> {
    let mut chosen: Vec<String> = names
        .iter()
        .filter(|n| METADATA_FILES.contains(&n.as_str()))
        .cloned()
        .collect();
    let weights: Vec<String> = if let Some(pattern) = include {
        let glob = glob::Pattern::new(pattern).map_err(|e| HubError::InvalidInclude {
            pattern: pattern.into(),
            message: e.to_string(),
        })?;
        let matched: Vec<String> = names.iter().filter(|n| glob.matches(n)).cloned().collect();
        if matched.is_empty() {
            return Err(HubError::IncludeMatchedNothing {
                repo: repo.into(),
                pattern: pattern.into(),
                files: names.to_vec(),
            });
        }
        matched
    } else {
        let top_level = |suffix: &str| -> Vec<String> {
            names
                .iter()
                .filter(|n| !n.contains('/') && n.ends_with(suffix))
                .cloned()
                .collect()
        };
        let safetensors = top_level(".safetensors");
        let ggufs: Vec<String> = names
            .iter()
            .filter(|n| n.ends_with(".gguf"))
            .cloned()
            .collect();
        if !safetensors.is_empty() {
            [safetensors, top_level(".safetensors.index.json")].concat()
        } else if ggufs.len() == 1 {
            ggufs
        } else if ggufs.len() > 1 {
            return Err(HubError::AmbiguousGguf {
                repo: repo.into(),
                candidates: ggufs,
            });
        } else {
            return Err(HubError::NoWeights {
                repo: repo.into(),
                revision: revision.into(),
                files: names.to_vec(),
            });
        }
    };
    chosen.extend(weights);
    chosen.sort();
    chosen.dedup();
    Ok(chosen)
}

/// Names a failed file download.
fn download_error(repo: &str, file: &str, e: ApiError) -> HubError {
    let message = match &e {
        ApiError::RequestError(inner) => match inner.as_ref() {
            ureq::Error::Status(status @ (401 | 403), _) => {
                return HubError::AccessDenied {
                    repo: repo.into(),
                    status: *status,
                }
            }
            ureq::Error::Status(status, response) => {
                format!("HTTP {status} from {}", response.get_url())
            }
            ureq::Error::Transport(t) => t.to_string(),
        },
        other => other.to_string(),
    };
    HubError::Download {
        repo: repo.into(),
        file: file.into(),
        message,
    }
}

/// Per-file progress: a bar on a terminal, one plain line otherwise, or nothing.
struct FileProgress {
    enabled: bool,
    bar: Option<ProgressBar>,
    started: bool,
}

impl FileProgress {
    fn new(enabled: bool, show_bar: bool) -> Self {
        FileProgress {
            enabled,
            bar: (enabled && show_bar).then(|| ProgressBar::new(0)),
            started: false,
        }
    }
}

impl Progress for FileProgress {
    fn init(&mut self, size: usize, filename: &str) {
        // hf-hub calls init twice per download; announce once.
        if !self.enabled || self.started {
            return;
        }
        self.started = true;
        match &self.bar {
            Some(bar) => {
                bar.set_length(size as u64);
                let template = "{msg} [{wide_bar}] {bytes}/{total_bytes} {bytes_per_sec} ({eta})";
                if let Ok(style) = ProgressStyle::with_template(template) {
                    bar.set_style(style);
                }
                bar.set_message(filename.to_string());
            }
            None => eprintln!("tensorfold: downloading {filename} ({size} bytes)"),
        }
    }

    fn update(&mut self, size: usize) {
        if let Some(bar) = &self.bar {
            bar.inc(size as u64);
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish();
            eprintln!(); // keep each finished file's bar on its own line
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn prefers_safetensors_and_skips_other_files() {
        let files = names(&[
            "README.md",
            "config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
            "onnx/model.onnx",
            "model.Q4_0.gguf",
            "tokenizer.json",
        ]);
        let got = select_files("o/n", "main", &files, None).unwrap();
        assert_eq!(
            got,
            names(&[
                "config.json",
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors",
                "model.safetensors.index.json",
                "tokenizer.json",
            ])
        );
    }

    #[test]
    fn gguf_choice_single_ambiguous_and_included() {
        let one = names(&["README.md", "m.Q8_0.gguf"]);
        assert_eq!(
            select_files("o/n", "main", &one, None).unwrap(),
            names(&["m.Q8_0.gguf"])
        );
        let two = names(&["m.Q8_0.gguf", "sub/m.Q4_K_M.gguf"]);
        let err = select_files("o/n", "main", &two, None).unwrap_err();
        assert!(
            matches!(err, HubError::AmbiguousGguf { ref candidates, .. } if candidates.len() == 2)
        );
        let got = select_files("o/n", "main", &two, Some("*Q4_K_M*")).unwrap();
        assert_eq!(got, names(&["sub/m.Q4_K_M.gguf"]));
        let err = select_files("o/n", "main", &two, Some("*Q2_K*")).unwrap_err();
        assert!(matches!(err, HubError::IncludeMatchedNothing { .. }));
        let err = select_files("o/n", "main", &two, Some("[")).unwrap_err();
        assert!(matches!(err, HubError::InvalidInclude { .. }));
    }

    #[test]
    fn no_weights_is_named() {
        let files = names(&["README.md", "config.json"]);
        let err = select_files("o/n", "main", &files, None).unwrap_err();
        assert!(matches!(err, HubError::NoWeights { .. }));
    }

    #[test]
    fn unsafe_server_names_are_rejected() {
        assert!(is_safe_relative("a/b.gguf"));
        assert!(!is_safe_relative("../evil"));
        assert!(!is_safe_relative("/etc/passwd"));
        assert!(!is_safe_relative("a//b"));
        assert!(is_safe_component("0123abcdef"));
        assert!(!is_safe_component(".."));
        assert!(!is_safe_component("a/b"));
    }
}
