//! Each GGUF pre-tokenizer family gives llama.cpp's ids on a vocabulary whose merges cross
//! word boundaries (so a wrong split shows up as different ids).

mod common;

use common::*;
use tf_tokenize::{BpePreTokenizer, Tokenizer, TokenizerError, VocabKind};

#[test]
fn every_family_matches_llama_cpp_ids() {
    let text = std::fs::read_to_string(data("pre_refs.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let texts: Vec<&str> = doc["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let vocabs = doc["vocabularies"].as_object().unwrap();
    assert_eq!(vocabs.len(), 5);
    let mut failures = Vec::new();
    for (pre, v) in vocabs {
        let tok = gguf_tokenizer(&data(v["file"].as_str().unwrap()));
        let expect_kind = BpePreTokenizer::from_gguf_name(Some(pre)).unwrap();
        assert_eq!(tok.kind(), VocabKind::GgufByteLevelBpe(expect_kind));
        for (text, want) in texts.iter().zip(v["ids"].as_array().unwrap()) {
            let want: Vec<u32> = want
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect();
            let got = tok.encode(text, false).unwrap();
            if got != want {
                failures.push(format!("{pre} {text:?}\n  want {want:?}\n  got  {got:?}"));
            }
            assert_eq!(tok.decode(&got, false).unwrap(), *text);
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn planted_control_a_different_split_gives_different_ids() {
    // The same vocabulary read with another family's split must disagree somewhere,
    // or the test above could not tell the families apart.
    let gpt2 = gguf_tokenizer(&data("pre_gpt-2.gguf"));
    let llama3 = gguf_tokenizer(&data("pre_llama-bpe.gguf"));
    let text = "1234567890 3.14159\n\n\nthree newlines";
    assert_ne!(
        gpt2.encode(text, false).unwrap(),
        llama3.encode(text, false).unwrap()
    );
}

#[test]
fn unknown_pre_tokenizer_and_model_are_refused_by_name() {
    use tf_formats::gguf::MetaValue;
    let file = tf_formats::gguf::GgufFile::open(&data("pre_gpt-2.gguf")).unwrap();
    let mut pairs: Vec<(String, MetaValue)> = file.metadata().to_vec();
    let set = |pairs: &mut Vec<(String, MetaValue)>, key: &str, val: &str| {
        for (k, v) in pairs.iter_mut() {
            if k == key {
                *v = MetaValue::String(val.into());
            }
        }
    };
    set(&mut pairs, "tokenizer.ggml.pre", "mystery-bpe");
    let get = |k: &str| pairs.iter().find(|(key, _)| key == k).map(|(_, v)| v);
    match Tokenizer::from_gguf_metadata(get) {
        Err(TokenizerError::UnsupportedPreTokenizer { name }) => assert_eq!(name, "mystery-bpe"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    set(&mut pairs, "tokenizer.ggml.model", "rwkv");
    let get = |k: &str| pairs.iter().find(|(key, _)| key == k).map(|(_, v)| v);
    assert!(matches!(
        Tokenizer::from_gguf_metadata(get),
        Err(TokenizerError::UnsupportedModel { model }) if model == "rwkv"
    ));
}

#[test]
fn mislabeled_end_tokens_are_repaired_as_llama_cpp_repairs_them() {
    let text = std::fs::read_to_string(data("pre_refs.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let texts: Vec<&str> = doc["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let v = &doc["mislabeled"];
    let tok = gguf_tokenizer(&data(v["file"].as_str().unwrap()));
    for (text, want) in texts.iter().zip(v["ids"].as_array().unwrap()) {
        let want: Vec<u32> = want
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(tok.encode(text, false).unwrap(), want, "{text:?}");
    }
    let im_end = tok.token_id("<|im_end|>").unwrap();
    let im_start = tok.token_id("<|im_start|>").unwrap();
    assert!(tok.is_special(im_end) && tok.eos_ids().contains(&im_end));
    // Planted control: a name llama.cpp does not repair stays an ordinary piece.
    assert!(!tok.is_special(im_start));
    assert_ne!(tok.encode("<|im_start|>", false).unwrap(), vec![im_start]);
}
