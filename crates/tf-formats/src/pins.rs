//! sha256 pins of a checkpoint's files: config.json, the shard index and every shard, or a
//! GGUF file. A pin list identifies exactly the bytes a fidelity result was measured on.

use crate::safetensors::{INDEX_FILE, SINGLE_FILE};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// One pinned file.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Pin {
    /// Path relative to the checkpoint directory, `/`-separated (the file name for a file).
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Lower-case hex sha256 of the contents.
    pub sha256: String,
}

impl Pin {
    /// `"<sha256>  <size>  <path>"`, one line of a pin file.
    pub fn to_line(&self) -> String {
        format!("{}  {}  {}", self.sha256, self.size, self.path)
    }

    /// Parses lines written by [`Pin::to_line`]; blank lines and `#` comments are skipped.
    pub fn parse_lines(text: &str) -> Result<Vec<Pin>, PinError> {
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: &str| PinError::BadPinLine {
                line: i + 1,
                reason: reason.to_string(),
            };
            let mut parts = line.splitn(3, "  ");
            let (Some(sha), Some(size), Some(path)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(bad("expected \"<sha256>  <size>  <path>\""));
            };
            if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad("sha256 must be 64 hex digits"));
            }
            let size = size.parse().map_err(|_| bad("size is not an integer"))?;
            out.push(Pin {
                path: path.to_string(),
                size,
                sha256: sha.to_ascii_lowercase(),
            });
        }
        Ok(out)
    }
}

/// A file that cannot be pinned, or a checkpoint that does not match its pins.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// An I/O error on a named file.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Neither a GGUF file nor safetensors weights were found.
    #[error("{path}: no .gguf file, {INDEX_FILE} or {SINGLE_FILE} to pin")]
    NoWeights { path: PathBuf },
    /// The shard index cannot be read as a weight map of plain file names.
    #[error("{path}: invalid shard index: {reason}")]
    InvalidIndex { path: PathBuf, reason: String },
    /// An expected file is absent.
    #[error("pinned file {path:?} is missing")]
    Missing { path: String },
    /// A file is part of the checkpoint but not in the expected pins.
    #[error("file {path:?} is not pinned")]
    Unexpected { path: String },
    /// A file's size differs from its pin.
    #[error("{path:?}: size {found} bytes, pinned {expected}")]
    SizeMismatch {
        path: String,
        expected: u64,
        found: u64,
    },
    /// A file's sha256 differs from its pin.
    #[error("{path:?}: sha256 {found}, pinned {expected}")]
    Mismatch {
        path: String,
        expected: String,
        found: String,
    },
    /// A malformed line in a pin file.
    #[error("pin file line {line}: {reason}")]
    BadPinLine { line: usize, reason: String },
}

/// Lower-case hex sha256 of a file, read in 1 MiB chunks.
pub fn sha256_file(path: &Path) -> Result<String, PinError> {
    let io = |source| PinError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// The files a pin list covers, as (relative path, absolute path), sorted by relative path.
///
/// A `.gguf` or `.safetensors` file is its own list. A directory contributes config.json (when
/// present) and either the shard index plus every shard it names, or model.safetensors, or
/// else its `.gguf` files.
pub fn pinned_files(path: &Path) -> Result<Vec<(String, PathBuf)>, PinError> {
    if path.is_file() {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        return Ok(vec![(name, path.to_path_buf())]);
    }
    let mut names: BTreeSet<String> = BTreeSet::new();
    let index = path.join(INDEX_FILE);
    if index.is_file() {
        names.insert(INDEX_FILE.to_string());
        names.extend(shard_names(&index)?);
    } else if path.join(SINGLE_FILE).is_file() {
        names.insert(SINGLE_FILE.to_string());
    } else {
        let entries = std::fs::read_dir(path).map_err(|source| PinError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| PinError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".gguf") && entry.path().is_file() {
                names.insert(name);
            }
        }
    }
    if names.is_empty() {
        return Err(PinError::NoWeights {
            path: path.to_path_buf(),
        });
    }
    if path.join("config.json").is_file() {
        names.insert("config.json".to_string());
    }
    Ok(names
        .into_iter()
        .map(|n| (n.clone(), path.join(&n)))
        .collect())
}

fn shard_names(index: &Path) -> Result<BTreeSet<String>, PinError> {
    let bad = |reason: String| PinError::InvalidIndex {
        path: index.to_path_buf(),
        reason,
    };
    let bytes = std::fs::read(index).map_err(|source| PinError::Io {
        path: index.to_path_buf(),
        source,
    })?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    let map = value
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("missing \"weight_map\" object".into()))?;
    map.iter()
        .map(|(tensor, shard)| {
            let name = shard
                .as_str()
                .ok_or_else(|| bad(format!("shard of {tensor:?} is not a string")))?;
            let plain = !name.is_empty()
                && Path::new(name)
                    .components()
                    .all(|c| matches!(c, Component::Normal(_)));
            if !plain {
                return Err(bad(format!(
                    "shard name {name:?} is not a plain relative path"
                )));
            }
            Ok(name.replace('\\', "/"))
        })
        .collect()
}

/// Pins (relative path, size, sha256) of a checkpoint's files (see [`pinned_files`]).
pub fn pins(path: &Path) -> Result<Vec<Pin>, PinError> {
    pinned_files(path)?
        .into_iter()
        .map(|(rel, abs)| {
            let size = std::fs::metadata(&abs)
                .map_err(|source| PinError::Io {
                    path: abs.clone(),
                    source,
                })?
                .len();
            Ok(Pin {
                path: rel,
                size,
                sha256: sha256_file(&abs)?,
            })
        })
        .collect()
}

/// Checks that a checkpoint's files are exactly `expected`: same set of paths, sizes and
/// sha256 (sizes are compared before any file is hashed).
pub fn verify(path: &Path, expected: &[Pin]) -> Result<(), PinError> {
    let files = pinned_files(path)?;
    for pin in expected {
        if !files.iter().any(|(rel, _)| *rel == pin.path) {
            return Err(PinError::Missing {
                path: pin.path.clone(),
            });
        }
    }
    for (rel, _) in &files {
        if !expected.iter().any(|p| p.path == *rel) {
            return Err(PinError::Unexpected { path: rel.clone() });
        }
    }
    let lookup = |rel: &str| expected.iter().find(|p| p.path == rel);
    for (rel, abs) in &files {
        let Some(pin) = lookup(rel) else { continue };
        let size = std::fs::metadata(abs)
            .map_err(|source| PinError::Io {
                path: abs.clone(),
                source,
            })?
            .len();
        if size != pin.size {
            return Err(PinError::SizeMismatch {
                path: rel.clone(),
                expected: pin.size,
                found: size,
            });
        }
    }
    for (rel, abs) in &files {
        let Some(pin) = lookup(rel) else { continue };
        let found = sha256_file(abs)?;
        if !found.eq_ignore_ascii_case(&pin.sha256) {
            return Err(PinError::Mismatch {
                path: rel.clone(),
                expected: pin.sha256.clone(),
                found,
            });
        }
    }
    Ok(())
}
