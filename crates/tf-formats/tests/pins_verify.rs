//! sha256 pins: known digests, the file set of each checkpoint form, and named mismatches.

use std::path::Path;
use tf_formats::pins::{pinned_files, pins, sha256_file, verify, Pin, PinError};

#[test]
fn sha256_of_known_contents() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("abc");
    std::fs::write(&p, b"abc").unwrap();
    // FIPS 180-2 test vector.
    assert_eq!(
        sha256_file(&p).unwrap(),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    std::fs::write(&p, b"").unwrap();
    assert_eq!(
        sha256_file(&p).unwrap(),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    // Larger than one read chunk: a million 'a's (FIPS 180-2).
    std::fs::write(&p, vec![b'a'; 1_000_000]).unwrap();
    assert_eq!(
        sha256_file(&p).unwrap(),
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
    );
}

fn sharded(dir: &Path) {
    std::fs::write(dir.join("config.json"), b"{}").unwrap();
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        br#"{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}}"#,
    )
    .unwrap();
    std::fs::write(dir.join("model-00001-of-00002.safetensors"), b"shard one").unwrap();
    std::fs::write(dir.join("model-00002-of-00002.safetensors"), b"shard two").unwrap();
    std::fs::write(dir.join("tokenizer.json"), b"not pinned").unwrap();
}

#[test]
fn pins_cover_config_index_and_shards() {
    let dir = tempfile::tempdir().unwrap();
    sharded(dir.path());
    let p = pins(dir.path()).unwrap();
    let names: Vec<_> = p.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        names,
        [
            "config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json"
        ]
    );
    assert_eq!(p[1].size, 9);
    assert_eq!(
        p[1].sha256,
        sha256_file(&dir.path().join("model-00001-of-00002.safetensors")).unwrap()
    );
    verify(dir.path(), &p).unwrap();
    // Round trip through the text form.
    let text: String = p.iter().map(|p| p.to_line() + "\n").collect();
    assert_eq!(Pin::parse_lines(&format!("# pins\n\n{text}")).unwrap(), p);
}

#[test]
fn single_file_and_gguf_forms() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("model.safetensors"), b"x").unwrap();
    let names: Vec<_> = pinned_files(dir.path())
        .unwrap()
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    assert_eq!(names, ["model.safetensors"]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.Q4_1.gguf"), b"GGUF").unwrap();
    let p = pins(dir.path()).unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].path, "m.Q4_1.gguf");
    let file_pins = pins(&dir.path().join("m.Q4_1.gguf")).unwrap();
    assert_eq!(file_pins, p);
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        pins(empty.path()),
        Err(PinError::NoWeights { .. })
    ));
}

#[test]
fn mismatches_are_named() {
    let dir = tempfile::tempdir().unwrap();
    sharded(dir.path());
    let good = pins(dir.path()).unwrap();
    // Same size, different bytes: the sha256 check must catch it.
    std::fs::write(
        dir.path().join("model-00002-of-00002.safetensors"),
        b"shard 2wo",
    )
    .unwrap();
    let e = verify(dir.path(), &good).unwrap_err();
    assert!(
        matches!(&e, PinError::Mismatch { path, .. } if path == "model-00002-of-00002.safetensors"),
        "{e}"
    );
    std::fs::write(
        dir.path().join("model-00002-of-00002.safetensors"),
        b"longer shard",
    )
    .unwrap();
    assert!(matches!(
        verify(dir.path(), &good),
        Err(PinError::SizeMismatch {
            expected: 9,
            found: 12,
            ..
        })
    ));
    sharded(dir.path());
    verify(dir.path(), &good).unwrap();
    // A pin for a file that is not there; a file that has no pin.
    let mut extra = good.clone();
    extra.push(Pin {
        path: "model-00003-of-00003.safetensors".into(),
        size: 1,
        sha256: "0".repeat(64),
    });
    assert!(
        matches!(verify(dir.path(), &extra), Err(PinError::Missing { path }) if path.contains("00003"))
    );
    assert!(
        matches!(verify(dir.path(), &good[1..]), Err(PinError::Unexpected { path }) if path == "config.json")
    );
    assert!(matches!(
        Pin::parse_lines("abc  1  x"),
        Err(PinError::BadPinLine { line: 1, .. })
    ));
}

#[test]
fn index_naming_escaping_shard_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        br#"{"weight_map":{"a":"../secret"}}"#,
    )
    .unwrap();
    assert!(matches!(
        pins(dir.path()),
        Err(PinError::InvalidIndex { .. })
    ));
}
