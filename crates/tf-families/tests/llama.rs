//! Llama-family plans and refusals. Each refusal test mutates one thing of a valid sibling that
//! is first shown to pass (the planted control).

mod common;

use common::*;
use serde_json::json;
use tf_families::llama::RopeScaling;
use tf_families::{plan, ModelPlan, Refusal};
use tf_formats::gguf::GgmlType;
use tf_formats::{DType, TensorEntry, WeightFormat};

fn llama(p: ModelPlan) -> tf_families::llama::LlamaPlan {
    match p {
        ModelPlan::Llama(l) => l,
        other => panic!("expected a llama plan, got {}", other.family()),
    }
}

/// Plans the valid pair, then the mutated one, and returns the mutated refusal.
fn refusal_after(
    cfg: serde_json::Value,
    entries: Vec<TensorEntry>,
    mutate: impl FnOnce(&mut serde_json::Value, &mut Vec<TensorEntry>),
) -> Refusal {
    plan(&cfg, &entries).expect("the unmutated control must plan");
    let (mut cfg, mut entries) = (cfg, entries);
    mutate(&mut cfg, &mut entries);
    plan(&cfg, &entries).expect_err("the mutation must be refused")
}

#[test]
fn untied_llama_plans_with_resolved_defaults() {
    let cfg = llama_config("llama", 3, false);
    let p = llama(plan(&cfg, &llama_entries(&cfg, BF16)).unwrap());
    let c = &p.config;
    assert_eq!(
        (c.hidden_size, c.num_hidden_layers, c.head_dim),
        (64, 3, 16)
    );
    assert_eq!((c.num_attention_heads, c.num_key_value_heads), (4, 2));
    assert_eq!(c.rope_theta, 100000.0);
    assert_eq!(c.eos_token_ids, vec![2, 3]);
    assert_eq!(c.bos_token_id, Some(1));
    assert!(!c.tie_word_embeddings && p.lm_head.is_some());
    assert!(!c.qkv_bias && !c.qk_norm);
    assert_eq!(p.layers.len(), 3);
    assert_eq!(
        p.layers[2].down_proj.name,
        "model.layers.2.mlp.down_proj.weight"
    );
}

#[test]
fn tie_is_inferred_from_a_missing_head_when_the_field_is_absent() {
    let mut cfg = llama_config("llama", 2, true);
    cfg.as_object_mut().unwrap().remove("tie_word_embeddings");
    let entries = llama_entries(&llama_config("llama", 2, true), BF16);
    let p = llama(plan(&cfg, &entries).unwrap());
    assert!(p.config.tie_word_embeddings && p.lm_head.is_none());
}

#[test]
fn untied_config_without_head_is_missing_tensor() {
    let cfg = llama_config("llama", 2, false);
    let r = refusal_after(cfg.clone(), llama_entries(&cfg, BF16), |_, en| {
        remove(en, "lm_head.weight")
    });
    assert_eq!(
        r,
        Refusal::MissingTensor {
            name: "lm_head.weight".into()
        }
    );
}

#[test]
fn tied_checkpoint_with_a_stray_head_ignores_it() {
    let cfg = llama_config("llama", 2, true);
    let mut entries = llama_entries(&cfg, BF16);
    entries.push(e("lm_head.weight", BF16, &[256, 64]));
    entries.push(e("model.layers.0.self_attn.rotary_emb.inv_freq", F32, &[8]));
    let p = llama(plan(&cfg, &entries).unwrap());
    assert!(p.lm_head.is_none());
    assert_eq!(p.ignored.len(), 2);
}

#[test]
fn qwen2_needs_qkv_biases_but_no_o_bias() {
    let cfg = llama_config("qwen2", 2, true);
    let entries = llama_entries(&cfg, BF16);
    let p = llama(plan(&cfg, &entries).unwrap());
    assert!(p.config.qkv_bias && !p.config.o_bias);
    assert!(p.layers[1].qkv_bias.is_some());
    let r = refusal_after(cfg, entries, |_, en| {
        remove(en, "model.layers.1.self_attn.k_proj.bias")
    });
    assert_eq!(
        r,
        Refusal::MissingTensor {
            name: "model.layers.1.self_attn.k_proj.bias".into()
        }
    );
}

#[test]
fn qwen3_qk_norm_shape_is_checked() {
    let cfg = llama_config("qwen3", 2, true);
    let entries = llama_entries(&cfg, BF16);
    assert!(llama(plan(&cfg, &entries).unwrap()).layers[0]
        .qk_norm
        .is_some());
    let name = "model.layers.0.self_attn.q_norm.weight";
    let r = refusal_after(cfg, entries, |_, en| set(en, name, |t| t.shape = vec![64]));
    assert_eq!(
        r,
        Refusal::ShapeMismatch {
            name: name.into(),
            expected: vec![16],
            found: vec![64]
        }
    );
}

#[test]
fn unused_bias_is_an_unexpected_tensor() {
    let cfg = llama_config("llama", 2, true);
    let name = "model.layers.0.self_attn.q_proj.bias";
    let r = refusal_after(cfg.clone(), llama_entries(&cfg, BF16), |_, en| {
        en.push(e(name, F32, &[64]))
    });
    assert_eq!(r, Refusal::UnexpectedTensor { name: name.into() });
}

#[test]
fn unknown_model_type_lists_known_ones() {
    let cfg = llama_config("llama", 2, true);
    let r = refusal_after(cfg.clone(), llama_entries(&cfg, BF16), |c, _| {
        c["model_type"] = json!("gpt2")
    });
    match &r {
        Refusal::UnknownModelType { model_type, known } => {
            assert_eq!(model_type, "gpt2");
            for k in [
                "llama",
                "qwen2",
                "qwen3",
                "mistral",
                "nemotron_h",
                "nemotron_h_puzzle",
                "muse_spark",
            ] {
                assert!(known.iter().any(|x| x == k), "{k} missing from {known:?}");
            }
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.name(), "UnknownModelType");
    assert!(r.to_string().contains("gpt2"));
}

#[test]
fn missing_and_bad_fields() {
    let cfg = llama_config("llama", 2, true);
    let en = llama_entries(&cfg, BF16);
    let r = refusal_after(cfg.clone(), en.clone(), |c, _| {
        c.as_object_mut().unwrap().remove("hidden_size");
    });
    assert_eq!(
        r,
        Refusal::MissingField {
            field: "hidden_size".into()
        }
    );
    let r = refusal_after(cfg.clone(), en.clone(), |c, _| {
        c["num_key_value_heads"] = json!(3)
    });
    assert_eq!(r.name(), "BadField");
    let r = refusal_after(cfg.clone(), en.clone(), |c, _| {
        c["hidden_size"] = json!("wide")
    });
    assert_eq!(r.name(), "BadField");
    let r = refusal_after(cfg.clone(), en.clone(), |c, _| {
        c["rope_scaling"] = json!({"rope_type": "su", "factor": 2.0})
    });
    assert!(
        matches!(&r, Refusal::BadField { field, .. } if field == "rope_scaling.rope_type"),
        "{r:?}"
    );
    // Dynamic NTK would be served wrongly as plain RoPE: refused by name.
    let r = refusal_after(cfg, en, |c, _| {
        c["rope_scaling"] = json!({"type": "dynamic", "factor": 2.0})
    });
    assert!(
        matches!(&r, Refusal::BadField { field, .. } if field == "rope_scaling.rope_type"),
        "{r:?}"
    );
}

#[test]
fn rope_scaling_kinds_parse() {
    let en = llama_entries(&llama_config("llama", 2, true), BF16);
    let with = |s: serde_json::Value| {
        let mut c = llama_config("llama", 2, true);
        c["rope_scaling"] = s;
        llama(plan(&c, &en).unwrap()).config.rope_scaling
    };
    assert_eq!(
        with(json!({"type": "linear", "factor": 4.0})),
        Some(RopeScaling::Linear { factor: 4.0 })
    );
    assert_eq!(with(json!({"rope_type": "default"})), None);
    let l3 = json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192});
    assert_eq!(
        with(l3),
        Some(RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192
        })
    );
    match with(
        json!({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
    ) {
        Some(RopeScaling::Yarn {
            factor,
            original_max_position_embeddings,
            beta_fast,
            beta_slow,
            ..
        }) => {
            assert_eq!(
                (factor, original_max_position_embeddings),
                (4.0, Some(32768))
            );
            assert_eq!((beta_fast, beta_slow), (32.0, 1.0));
        }
        other => panic!("{other:?}"),
    }
    // transformers 5 nests both under rope_parameters.
    let mut c = llama_config("llama", 2, true);
    c.as_object_mut().unwrap().remove("rope_theta");
    c["rope_parameters"] = json!({"rope_type": "linear", "factor": 2.0, "rope_theta": 5000.0});
    let p = llama(plan(&c, &en).unwrap());
    assert_eq!(p.config.rope_theta, 5000.0);
    assert_eq!(
        p.config.rope_scaling,
        Some(RopeScaling::Linear { factor: 2.0 })
    );
}

#[test]
fn quantization_support_is_checked_per_role() {
    let cfg = llama_config("llama", 2, true);
    // Controls: every supported matrix format plans.
    for f in [
        WeightFormat::Gguf(GgmlType::Q4_0),
        WeightFormat::Gguf(GgmlType::Q8_0),
        WeightFormat::Gguf(GgmlType::Q5_1),
        mlx(4, 64),
        mlx(8, 32),
        mlx(3, 32),
    ] {
        plan(&cfg, &llama_entries(&cfg, f)).unwrap_or_else(|r| panic!("{f}: {r}"));
    }
    let q = "model.layers.1.self_attn.q_proj.weight";
    for bad in [
        WeightFormat::Gguf(GgmlType::Q8_1),
        mlx(7, 64),
        WeightFormat::Dense(DType::I8),
        mlx(4, 16),
    ] {
        let r = refusal_after(cfg.clone(), llama_entries(&cfg, BF16), |_, en| {
            set(en, q, |t| t.format = bad)
        });
        assert_eq!(
            r,
            Refusal::UnsupportedQuantization {
                tensor: q.into(),
                format: bad.to_string()
            }
        );
    }
    // Q4_K blocks are 256 wide; hidden 64 is not a whole block.
    let k4 = WeightFormat::Gguf(GgmlType::Q4K);
    let r = refusal_after(cfg.clone(), llama_entries(&cfg, BF16), |_, en| {
        set(en, q, |t| t.format = k4)
    });
    assert_eq!(
        r,
        Refusal::QuantizedShape {
            tensor: q.into(),
            format: k4.to_string(),
            in_dim: 64,
            block: 256
        }
    );
    // Norms must stay dense.
    let n = "model.layers.0.input_layernorm.weight";
    let q8 = WeightFormat::Gguf(GgmlType::Q8_0);
    let r = refusal_after(cfg.clone(), llama_entries(&cfg, BF16), |_, en| {
        set(en, n, |t| t.format = q8)
    });
    assert_eq!(
        r,
        Refusal::MustBeDense {
            tensor: n.into(),
            format: q8.to_string()
        }
    );
}

#[test]
fn layer_types_length_and_kinds() {
    let cfg = llama_config("llama", 2, true);
    let en = llama_entries(&cfg, BF16);
    let mut ok = cfg.clone();
    ok["layer_types"] = json!(["sliding_attention", "full_attention"]);
    ok["sliding_window"] = json!(16);
    assert_eq!(
        llama(plan(&ok, &en).unwrap()).config.layer_sliding,
        vec![true, false]
    );
    let r = refusal_after(ok.clone(), en.clone(), |c, _| {
        c["layer_types"] = json!(["full_attention"])
    });
    assert_eq!(
        r,
        Refusal::PatternLengthMismatch {
            field: "layer_types".into(),
            expected: 2,
            found: 1
        }
    );
    let r = refusal_after(ok, en, |c, _| {
        c["layer_types"][1] = json!("chunked_attention")
    });
    assert!(
        matches!(r, Refusal::UnknownBlockType { layer: 1, .. }),
        "{r:?}"
    );
}

#[test]
fn every_refusal_message_says_what_to_do() {
    let cfg = llama_config("llama", 2, true);
    let r = refusal_after(cfg.clone(), llama_entries(&cfg, BF16), |_, en| {
        set(en, "model.layers.0.mlp.up_proj.weight", |t| {
            t.shape = vec![64, 64]
        })
    });
    assert_eq!(r.name(), "ShapeMismatch");
    let msg = r.to_string();
    assert!(
        msg.contains("[128, 64]") && msg.contains("[64, 64]") && msg.contains("config"),
        "{msg}"
    );
}
