//! StreamDecoder: deltas concatenate to decode(all ids), partial UTF-8 is held back.

mod common;

use common::*;
use tf_tokenize::{StreamDecoder, Tokenizer};

/// Feeds ids one at a time; returns the deltas (the last one from `finish`).
fn stream(tok: &Tokenizer, ids: &[u32], skip_special: bool) -> (Vec<String>, bool) {
    let mut d = StreamDecoder::new(tok, skip_special);
    let mut deltas = Vec::new();
    let mut held_back = false;
    for &id in ids {
        deltas.push(d.push(id).unwrap());
        held_back |= d.has_pending();
    }
    deltas.push(d.finish().unwrap());
    (deltas, held_back)
}

fn check_all_refs(tok: &Tokenizer, refs: &str) -> bool {
    let mut any_held = false;
    for (text, _) in ref_cases(refs) {
        let ids = tok.encode(&text, false).unwrap();
        for skip in [false, true] {
            let (deltas, held) = stream(tok, &ids, skip);
            any_held |= held;
            assert_eq!(
                deltas.concat(),
                tok.decode(&ids, skip).unwrap(),
                "{text:?} skip={skip}"
            );
            if !text.contains('\u{FFFD}') {
                assert!(
                    deltas.iter().all(|d| !d.contains('\u{FFFD}')),
                    "{text:?} emitted a broken char"
                );
            }
        }
    }
    any_held
}

#[test]
fn smollm2_stream_equals_decode_for_every_reference_text() {
    let Some(tok) = real_tokenizer() else { return };
    assert!(
        check_all_refs(&tok, "smollm2_refs.json"),
        "no text split a character across tokens"
    );
}

#[test]
fn spm_stream_equals_decode_for_every_reference_text() {
    let tok = spm_tokenizer();
    assert!(
        check_all_refs(&tok, "spm_tiny_refs.json"),
        "no text split a character across tokens"
    );
}

#[test]
fn emoji_split_across_byte_level_tokens_is_held_back() {
    let Some(tok) = real_tokenizer() else { return };
    let text = "hi 👨‍👩‍👧‍👦!";
    let ids = tok.encode(text, false).unwrap();
    // Some token must carry an incomplete UTF-8 sequence, or this test proves nothing.
    assert!(ids
        .iter()
        .any(|&id| std::str::from_utf8(tok.token_bytes(id).unwrap()).is_err()));
    let mut d = StreamDecoder::new(&tok, false);
    let mut out = String::new();
    for &id in &ids {
        let delta = d.push(id).unwrap();
        assert!(!delta.contains('\u{FFFD}'));
        out.push_str(&delta);
    }
    assert!(!d.has_pending());
    assert_eq!(out, text);
    // Planted control: decoding the same tokens one by one, without holding back, breaks.
    let naive: String = ids
        .iter()
        .map(|&id| tok.token_to_piece(id).unwrap())
        .collect();
    assert!(naive.contains('\u{FFFD}'));
}

#[test]
fn spm_byte_fallback_split_and_invalid_bytes_match_lossy_decode() {
    let tok = spm_tokenizer();
    let byte = |b: u8| tok.token_id(&format!("<0x{b:02X}>")).unwrap();
    let a = tok.encode("a", false).unwrap();
    // "é" as two byte tokens, then an orphan continuation byte, then a truncated 4-byte lead.
    let mut ids = vec![byte(0xC3), byte(0xA9)];
    ids.extend(&a);
    ids.push(byte(0x80));
    ids.extend(&a);
    ids.extend([byte(0xF0), byte(0x9F)]);
    let (deltas, held) = stream(&tok, &ids, false);
    assert!(held);
    assert_eq!(deltas[0], "", "half of é must be held back");
    assert_eq!(deltas[1], "é");
    let expect = tok.decode(&ids, false).unwrap();
    assert_eq!(deltas.concat(), expect);
    assert_eq!(expect, "é a\u{FFFD} a\u{FFFD}");
    assert_eq!(
        deltas.last().unwrap(),
        "\u{FFFD}",
        "finish flushes the truncated tail"
    );
}

#[test]
fn continuation_keeps_the_leading_space_of_spm_text() {
    let tok = spm_tokenizer();
    let ids = tok.encode("Hello world", false).unwrap();
    let mut fresh = StreamDecoder::new(&tok, false);
    let mut cont = StreamDecoder::continuation(&tok, false);
    let (mut a, mut b) = (String::new(), String::new());
    for &id in &ids {
        a += &fresh.push(id).unwrap();
        b += &cont.push(id).unwrap();
    }
    assert_eq!(a, "Hello world");
    assert_eq!(b, " Hello world");
}

/// Deterministic pseudo-random id sequences (splitmix64), any bytes at all.
fn random_ids(seed: u64, n: usize, vocab: usize) -> Vec<u32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) % vocab as u64) as u32
        })
        .collect()
}

#[test]
fn random_id_streams_equal_decode() {
    let mut toks = vec![spm_tokenizer()];
    toks.extend(real_tokenizer());
    for tok in &toks {
        for seed in 0..200 {
            let ids = random_ids(seed, 1 + (seed as usize % 17), tok.vocab_size());
            for skip in [false, true] {
                let (deltas, _) = stream(tok, &ids, skip);
                assert_eq!(
                    deltas.concat(),
                    tok.decode(&ids, skip).unwrap(),
                    "seed {seed}"
                );
            }
        }
    }
}
