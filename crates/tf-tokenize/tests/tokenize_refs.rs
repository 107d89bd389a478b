//! Our ids equal the committed reference ids (llama.cpp's algorithm / sentencepiece), and
//! decode round-trips.

mod common;

use common::*;

/// Every case's ids equal ours; byte-level BPE is lossless, so decode gives back the text
/// (specials included), and our byte-wise decode equals the backend's decoder.
fn check_byte_level_refs(tok: &tf_tokenize::Tokenizer, refs: &str, min_cases: usize) {
    let cases = ref_cases(refs);
    assert!(cases.len() >= min_cases);
    let mut failures = Vec::new();
    for (text, want) in &cases {
        let got = tok.encode(text, false).unwrap();
        if &got != want {
            failures.push(format!("{text:?}\n  want {want:?}\n  got  {got:?}"));
            continue;
        }
        assert_eq!(&tok.decode(&got, false).unwrap(), text);
        assert_eq!(
            tok.decode(&got, false).unwrap(),
            tok.decode_with_backend(&got, false).unwrap()
        );
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn smollm2_matches_reference_ids_and_round_trips() {
    let Some(tok) = real_tokenizer() else { return };
    check_byte_level_refs(&tok, "smollm2_refs.json", 25);
}

#[test]
fn smollm2_matches_llama_cpp_on_seeded_random_strings() {
    let Some(tok) = real_tokenizer() else { return };
    check_byte_level_refs(&tok, "smollm2_fuzz_refs.json", 300);
}

#[test]
fn smollm2_facts() {
    let Some(tok) = real_tokenizer() else { return };
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_id(), Some(2));
    assert!(!tok.add_bos());
    assert_eq!(
        tok.eos_ids(),
        &[2, 0, 4],
        "eos, <|endoftext|>, <reponame> (a FIM repo marker)"
    );
    assert_eq!(tok.token_id("<|im_start|>"), Some(1));
    assert_eq!(tok.token_id("Ġcapital"), Some(3575));
    assert_eq!(tok.token_to_piece(3575).as_deref(), Some(" capital"));
    assert_eq!(tok.token_text(3575), Some("Ġcapital"));
    assert!(tok.is_special(1) && !tok.is_special(3575));
    assert_eq!(tok.bos_token(), "<|im_start|>");
    assert_eq!(tok.eos_token(), "<|im_end|>");
    // add_bos_token is false, so add_special adds nothing.
    assert_eq!(
        tok.encode("The capital of France is", true).unwrap(),
        [504, 3575, 282, 4649, 314]
    );
    // skip_special drops control tokens only.
    let ids = tok.encode("<|im_start|>user\nhi<|im_end|>", false).unwrap();
    assert_eq!(ids.first(), Some(&1));
    assert_eq!(ids.last(), Some(&2));
    assert_eq!(tok.decode(&ids, true).unwrap(), "user\nhi");
    assert!(tok.chat_template(false).unwrap().contains("<|im_start|>"));
    // Planted control: a wrong id list must not decode to the text.
    assert_ne!(
        tok.decode(&[504, 3575, 282, 4649], false).unwrap(),
        "The capital of France is"
    );
    assert!(tok.decode(&[49152], false).is_err());
}

fn has_marker_or_special(tok: &tf_tokenize::Tokenizer, text: &str, ids: &[u32]) -> bool {
    text.contains('\u{2581}')
        || ids
            .iter()
            .any(|&id| tok.is_special(id) || tok.token_text(id) == Some("<|user|>"))
}

#[test]
fn spm_fixture_matches_sentencepiece_and_round_trips() {
    let tok = spm_tokenizer();
    let cases = ref_cases("spm_tiny_refs.json");
    assert!(cases.len() >= 30);
    let mut failures = Vec::new();
    for (text, want) in &cases {
        let got = tok.encode(text, false).unwrap();
        if &got != want {
            failures.push(format!("{text:?}\n  want {want:?}\n  got  {got:?}"));
            continue;
        }
        if !has_marker_or_special(&tok, text, &got) {
            // Lossless apart from the dummy prefix, which decode removes again.
            assert_eq!(
                &tok.decode(&got, false).unwrap(),
                text,
                "round trip of {text:?}"
            );
            assert_eq!(
                tok.decode(&got, false).unwrap(),
                tok.decode_with_backend(&got, false).unwrap()
            );
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
fn spm_fixture_facts() {
    let tok = spm_tokenizer();
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_id(), Some(2));
    assert!(tok.add_bos());
    let plain = tok.encode("Hello world", false).unwrap();
    let with = tok.encode("Hello world", true).unwrap();
    assert_eq!(with[0], 1);
    assert_eq!(&with[1..], &plain[..]);
    // Byte fallback: a character outside the vocabulary becomes its UTF-8 bytes.
    let ids = tok.encode("ꙮ", false).unwrap();
    let bytes: Vec<u8> = ids
        .iter()
        .flat_map(|&id| tok.token_bytes(id).unwrap().to_vec())
        .collect();
    assert_eq!(bytes, " ꙮ".as_bytes());
    assert_eq!(tok.decode(&ids, false).unwrap(), "ꙮ");
    assert!(ids
        .iter()
        .any(|&id| tok.token_text(id).is_some_and(|t| t.starts_with("<0x"))));
}
