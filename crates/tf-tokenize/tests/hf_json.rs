//! Loading Hugging Face tokenizer.json files (with their config files): ids equal the
//! Python `tokenizers` package's, decode and streaming agree, templates are picked by name.

mod common;

use common::*;
use tf_tokenize::{StreamDecoder, Tokenizer, VocabKind};

fn refs() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(data("hf_refs.json")).unwrap()).unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn stream_all(tok: &Tokenizer, ids: &[u32]) -> String {
    let mut d = StreamDecoder::new(tok, false);
    let mut out: String = ids.iter().map(|&id| d.push(id).unwrap()).collect();
    out += &d.finish().unwrap();
    out
}

#[test]
fn byte_level_tokenizer_json_matches_python_tokenizers() {
    let tok = Tokenizer::from_file(data("hf_bytelevel").join("tokenizer.json")).unwrap();
    assert_eq!(tok.kind(), VocabKind::HfJson);
    let r = refs();
    for (text, want) in r["texts"]
        .as_array()
        .unwrap()
        .iter()
        .zip(r["hf_bytelevel"].as_array().unwrap())
    {
        let text = text.as_str().unwrap();
        let got = tok.encode(text, false).unwrap();
        assert_eq!(got, ids(want), "{text:?}");
        assert_eq!(tok.decode(&got, false).unwrap(), text);
        assert_eq!(stream_all(&tok, &got), text);
    }
    // Config files: bos/eos spellings, generation_config's eos list, named templates.
    assert_eq!(tok.bos_token(), "<|im_start|>");
    assert_eq!(tok.eos_token(), "<|im_end|>");
    assert_eq!(tok.eos_ids(), &[2, 0]);
    assert!(!tok.add_bos());
    let default = tok.chat_template(false).unwrap();
    let tool_use = tok.chat_template(true).unwrap();
    assert!(!default.contains("tools") && tool_use.starts_with("{{ tools | tojson }}"));
}

#[test]
fn sentencepiece_tokenizer_json_matches_python_tokenizers() {
    let tok = Tokenizer::from_file(data("hf_spm").join("tokenizer.json")).unwrap();
    let r = refs();
    let texts = r["spm_texts"].as_array().unwrap();
    let decoded = r["hf_spm_decoded"].as_array().unwrap();
    for ((text, want), dec) in texts
        .iter()
        .zip(r["hf_spm"].as_array().unwrap())
        .zip(decoded)
    {
        let text = text.as_str().unwrap();
        let got = tok.encode(text, false).unwrap();
        assert_eq!(got, ids(want), "{text:?}");
        assert_eq!(
            tok.decode(&got, false).unwrap(),
            dec.as_str().unwrap(),
            "decode of {text:?}"
        );
        assert_eq!(
            stream_all(&tok, &got),
            dec.as_str().unwrap(),
            "stream of {text:?}"
        );
    }
    // The post-processor's BOS, and the flag read back from it.
    assert_eq!(
        tok.encode("Hello world", true).unwrap(),
        ids(&r["hf_spm_with_specials"])
    );
    assert_eq!(tok.add_bos(), ids(&r["hf_spm_with_specials"])[0] == 1);
    assert_eq!(tok.bos_id(), Some(1));
}

#[test]
fn missing_file_is_a_named_load_error() {
    let err = Tokenizer::from_file(data("no_such_dir").join("tokenizer.json")).unwrap_err();
    assert!(
        matches!(err, tf_tokenize::TokenizerError::Load { .. }),
        "{err:?}"
    );
}

#[test]
fn backend_decoder_mode_streams_by_prefix_and_holds_back_partial_characters() {
    // A decoder chain we do not model byte-wise makes decode and streaming use the backend.
    let text = std::fs::read_to_string(data("hf_bytelevel").join("tokenizer.json")).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["decoder"] = serde_json::json!({"type": "Sequence", "decoders": [
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        {"type": "Fuse"}
    ]});
    let tok =
        Tokenizer::from_hf_json_str(&json.to_string(), &tf_tokenize::HfConfig::default()).unwrap();
    let r = refs();
    let mut held_back = false;
    for text in r["texts"].as_array().unwrap() {
        let text = text.as_str().unwrap();
        let ids = tok.encode(text, false).unwrap();
        assert_eq!(tok.decode(&ids, false).unwrap(), text);
        let mut d = StreamDecoder::new(&tok, false);
        let mut out = String::new();
        for &id in &ids {
            let delta = d.push(id).unwrap();
            assert!(!delta.contains('\u{FFFD}'), "{text:?}");
            held_back |= delta.is_empty();
            out += &delta;
        }
        out += &d.finish().unwrap();
        assert_eq!(out, text);
    }
    assert!(held_back);
}
