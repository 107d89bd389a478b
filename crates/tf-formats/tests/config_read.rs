//! config.json, generation_config.json and tokenizer_config.json readers.

use std::path::{Path, PathBuf};
use tf_formats::config::{
    ChatTemplate, CheckpointConfigs, ConfigError, GenerationConfig, ModelConfig, TokenizerConfig,
};
use tf_formats::mlx_affine::QuantSpec;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/config")
}

#[test]
fn model_config_common_fields() {
    let c = ModelConfig::from_file(&data().join("mlx_config.json")).unwrap();
    assert_eq!(c.model_type(), Some("nemotron_h"));
    assert_eq!(c.architectures(), ["NemotronHForCausalLM"]);
    assert_eq!(c.vocab_size(), Some(131072));
    assert_eq!(c.hidden_size(), Some(2688));
    assert_eq!(c.num_hidden_layers(), Some(52));
    assert_eq!(c.num_key_value_heads(), Some(2));
    assert_eq!(c.head_dim(), Some(128));
    assert_eq!(c.rms_norm_eps(), Some(1e-5));
    assert_eq!(c.rope_theta(), Some(10000.0));
    assert_eq!(c.torch_dtype(), Some("bfloat16"));
    assert_eq!(c.tie_word_embeddings(), Some(false));
    assert_eq!(c.intermediate_size(), None);
    assert_eq!(
        c.fields().str_field("hybrid_override_pattern").unwrap(),
        Some("MEMEM*EMEMEM*")
    );
    let q = c.quantization().unwrap().unwrap();
    assert_eq!(
        q.default,
        QuantSpec {
            bits: 4,
            group_size: 64
        }
    );
    assert_eq!(
        q.spec_for("lm_head"),
        Some(QuantSpec {
            bits: 8,
            group_size: 32
        })
    );
    assert_eq!(q.spec_for("backbone.layers.1.mixer.gate"), None);
    assert_eq!(
        q.spec_for("backbone.layers.0.mixer.in_proj"),
        Some(q.default)
    );
}

#[test]
fn newer_dtype_key_and_nulls() {
    let c =
        ModelConfig::from_slice(br#"{"dtype":"float32","head_dim":null}"#, "config.json").unwrap();
    assert_eq!(c.torch_dtype(), Some("float32"));
    assert_eq!(c.head_dim(), None);
    assert_eq!(c.model_type(), None);
    assert!(c.architectures().is_empty());
}

#[test]
fn wrong_field_type_names_file_and_field() {
    let cases: [(&[u8], &str); 5] = [
        (br#"{"hidden_size":"big"}"#, "hidden_size"),
        (br#"{"vocab_size":-5}"#, "vocab_size"),
        (br#"{"model_type":3}"#, "model_type"),
        (br#"{"architectures":"Llama"}"#, "architectures"),
        (br#"{"tie_word_embeddings":"yes"}"#, "tie_word_embeddings"),
    ];
    for (bytes, field) in cases {
        let e = ModelConfig::from_slice(bytes, "dir/config.json").unwrap_err();
        assert!(
            matches!(&e, ConfigError::FieldType { file, field: f, .. } if file == "dir/config.json" && f == field),
            "{e}"
        );
        assert!(e.to_string().contains(field) && e.to_string().contains("dir/config.json"));
    }
    // Control: the same fields with the right types load.
    ModelConfig::from_slice(br#"{"hidden_size":8,"vocab_size":5,"model_type":"llama","architectures":["A"],"tie_word_embeddings":true}"#, "c").unwrap();
}

#[test]
fn malformed_json_names_the_file() {
    let e = ModelConfig::from_slice(b"{\"a\": ", "x/config.json").unwrap_err();
    assert!(
        matches!(&e, ConfigError::Json { file, .. } if file == "x/config.json"),
        "{e}"
    );
    let e = GenerationConfig::from_slice(b"[1]", "generation_config.json").unwrap_err();
    assert!(matches!(e, ConfigError::NotObject { .. }));
    let e = TokenizerConfig::from_slice(b"\xff", "tokenizer_config.json").unwrap_err();
    assert!(matches!(e, ConfigError::Json { .. }));
}

#[test]
fn generation_config_fields() {
    let g = GenerationConfig::from_file(&data().join("generation_config.json")).unwrap();
    assert_eq!(g.eos_token_id, Some(vec![2, 11]));
    assert_eq!(g.bos_token_id, Some(1));
    assert_eq!(g.pad_token_id, Some(0));
    assert_eq!(g.temperature, Some(0.6));
    assert_eq!(g.top_p, Some(0.95));
    assert_eq!(g.top_k, Some(20));
    assert_eq!(g.repetition_penalty, Some(1.0));
    assert_eq!(g.max_new_tokens, Some(512));
    assert_eq!(g.do_sample, Some(true));
    assert_eq!(g.extra["_from_model_config"], true);
    let g = GenerationConfig::from_slice(br#"{"eos_token_id": 7}"#, "g").unwrap();
    assert_eq!(g.eos_token_id, Some(vec![7]));
    assert_eq!(g.temperature, None);
    for (bytes, field) in [
        (&br#"{"eos_token_id": "x"}"#[..], "eos_token_id"),
        (br#"{"eos_token_id": [1, -2]}"#, "eos_token_id"),
        (br#"{"eos_token_id": 4294967296}"#, "eos_token_id"),
        (br#"{"top_k": 0.5}"#, "top_k"),
        (br#"{"temperature": "hot"}"#, "temperature"),
    ] {
        let e = GenerationConfig::from_slice(bytes, "g.json").unwrap_err();
        assert!(
            matches!(&e, ConfigError::FieldType { field: f, .. } if f == field),
            "{e}"
        );
    }
}

#[test]
fn tokenizer_config_fields() {
    let t = TokenizerConfig::from_file(&data().join("tokenizer_config.json")).unwrap();
    assert_eq!(t.bos_token.as_ref().unwrap().content, "<s>");
    assert_eq!(t.bos_token.as_ref().unwrap().attributes["normalized"], true);
    assert_eq!(t.eos_token.as_ref().unwrap().content, "</s>");
    assert!(t.eos_token.as_ref().unwrap().attributes.is_empty());
    assert_eq!(t.unk_token.as_ref().unwrap().content, "<unk>");
    assert!(t.pad_token.is_none());
    assert_eq!(t.add_bos_token, Some(true));
    assert_eq!(t.add_eos_token, Some(false));
    assert_eq!(t.model_max_length, Some(u64::MAX));
    assert_eq!(t.extra["tokenizer_class"], "LlamaTokenizer");
    assert!(t.extra.contains_key("added_tokens_decoder"));
    let ct = t.chat_template.as_ref().unwrap();
    assert!(matches!(ct, ChatTemplate::Named(l) if l.len() == 2));
    assert_eq!(ct.get(Some("tool_use")), Some("{{ tools }}"));
    assert!(ct.get(None).unwrap().starts_with("{% for m"));
    assert_eq!(ct.get(Some("rag")), None);
    let t = TokenizerConfig::from_slice(br#"{"chat_template":"T","model_max_length":2048}"#, "t")
        .unwrap();
    assert_eq!(t.chat_template, Some(ChatTemplate::Single("T".into())));
    assert_eq!(t.chat_template.unwrap().get(None), Some("T"));
    assert_eq!(t.model_max_length, Some(2048));
    for (bytes, field) in [
        (&br#"{"chat_template": 5}"#[..], "chat_template"),
        (br#"{"chat_template": [{"name": "a"}]}"#, "chat_template"),
        (br#"{"bos_token": {"lstrip": true}}"#, "bos_token"),
        (br#"{"eos_token": 2}"#, "eos_token"),
        (br#"{"add_bos_token": "true"}"#, "add_bos_token"),
        (br#"{"model_max_length": -1}"#, "model_max_length"),
    ] {
        let e = TokenizerConfig::from_slice(bytes, "tokenizer_config.json").unwrap_err();
        assert!(
            matches!(&e, ConfigError::FieldType { field: f, .. } if f == field),
            "{e}"
        );
    }
}

#[test]
fn directory_with_missing_optional_files() {
    let dir = tempfile::tempdir().unwrap();
    let all = CheckpointConfigs::from_dir(dir.path()).unwrap();
    assert!(all.model.is_none() && all.generation.is_none() && all.tokenizer.is_none());
    std::fs::write(dir.path().join("config.json"), br#"{"model_type":"llama"}"#).unwrap();
    std::fs::write(dir.path().join("chat_template.jinja"), "{{ x }}").unwrap();
    let all = CheckpointConfigs::from_dir(dir.path()).unwrap();
    assert_eq!(all.model.unwrap().model_type(), Some("llama"));
    assert!(all.generation.is_none());
    // chat_template.jinja alone still yields a template.
    assert_eq!(
        all.tokenizer.unwrap().chat_template,
        Some(ChatTemplate::Single("{{ x }}".into()))
    );
    // A JSON template wins over the .jinja file.
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        br#"{"chat_template":"J"}"#,
    )
    .unwrap();
    let t = TokenizerConfig::from_dir(dir.path()).unwrap().unwrap();
    assert_eq!(t.chat_template, Some(ChatTemplate::Single("J".into())));
    // A present but broken file is an error naming it, not None.
    std::fs::write(dir.path().join("generation_config.json"), b"{oops").unwrap();
    let e = GenerationConfig::from_dir(dir.path()).unwrap_err();
    assert!(e.to_string().contains("generation_config.json"), "{e}");
}
