//! The token-type repairs llama.cpp applies to GGUF vocabularies by token name, and its
//! end-of-generation set. A GGUF converted with a tokenizer that forgot to mark, say,
//! `<end_of_turn>` as control still gets it matched whole in text and treated as an end of
//! turn by llama.cpp; we do the same so our ids agree with it.

use crate::gguf_vocab::{GgufVocab, TokenType};

/// Names llama.cpp takes as the end-of-turn token when the file names none.
const END_OF_TURN: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "<\u{FF5C}end\u{2581}of\u{2581}sentence\u{FF5C}>",
    "<end_of_utterance>",
];

/// Names of end-of-message tokens.
const END_OF_MESSAGE: &[&str] = &["<|eom_id|>"];

/// Fill-in-the-middle prefix, suffix and middle markers (made control, not end tokens).
const FIM_MARKERS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<\u{FF5C}fim\u{2581}begin\u{FF5C}>",
    "<PRE>",
    "\u{2581}<PRE>",
    "<|code_prefix|>",
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<\u{FF5C}fim\u{2581}hole\u{FF5C}>",
    "<SUF>",
    "\u{2581}<SUF>",
    "<|code_suffix|>",
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<\u{FF5C}fim\u{2581}end\u{FF5C}>",
    "<MID>",
    "\u{2581}<MID>",
    "<|code_middle|>",
];

/// Fill-in-the-middle pad, repository and file-separator markers (control and end tokens).
const FIM_ENDING: &[&str] = &[
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<PAD>",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
];

/// Tokens that end generation by name.
const END_OF_GENERATION: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
];

/// Harmony-format markers that are always rendered (user-defined, never control).
const ALWAYS_RENDERED: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// The repaired token types and the end-of-generation ids (EOS first, then EOT, EOM, then the
/// rest by id).
pub(crate) struct Repaired {
    pub token_types: Vec<TokenType>,
    pub eog: Vec<u32>,
}

/// Applies llama.cpp's name-based repairs to `vocab` (whose `eos` is `eos`).
pub(crate) fn repair(vocab: &GgufVocab, eos: Option<u32>) -> Repaired {
    let mut types = vocab.token_types.clone();
    let id_of = |name: &str| {
        vocab
            .tokens
            .iter()
            .position(|t| t == name)
            .map(|i| i as u32)
    };
    let first_of = |names: &[&str]| {
        vocab
            .tokens
            .iter()
            .position(|t| names.contains(&t.as_str()))
            .map(|i| i as u32)
    };
    // Only tokens found by name are re-typed; ids the file names keep their type.
    let eot_named = if vocab.eot.is_none() {
        first_of(END_OF_TURN)
    } else {
        None
    };
    let eom_named = if vocab.eom.is_none() {
        first_of(END_OF_MESSAGE)
    } else {
        None
    };
    let eot = vocab.eot.or(eot_named);
    let eom = vocab.eom.or(eom_named);
    let promote = |id: u32, types: &mut Vec<TokenType>| types[id as usize] = TokenType::Control;
    for id in [eot_named, eom_named].into_iter().flatten() {
        promote(id, &mut types);
    }
    let mut rest: Vec<u32> = Vec::new();
    for (i, t) in vocab.tokens.iter().enumerate() {
        let id = i as u32;
        if FIM_MARKERS.contains(&t.as_str()) {
            promote(id, &mut types);
        }
        if FIM_ENDING.contains(&t.as_str()) || END_OF_GENERATION.contains(&t.as_str()) {
            promote(id, &mut types);
            rest.push(id);
        }
    }
    for name in ALWAYS_RENDERED {
        if let Some(id) = id_of(name) {
            types[id as usize] = TokenType::UserDefined;
        }
    }
    let mut eog: Vec<u32> = Vec::new();
    for id in [eos, eot, eom].into_iter().flatten().chain(rest) {
        if !eog.contains(&id) {
            eog.push(id);
        }
    }
    // Harmony vocabularies end on <|return|> and <|call|>; there <|end|> only closes a message.
    let has = |name: &str| eog.iter().any(|&id| vocab.tokens[id as usize] == name);
    if has("<|return|>") && has("<|call|>") {
        if let Some(end) = id_of("<|end|>") {
            eog.retain(|&id| id != end);
            types[end as usize] = TokenType::UserDefined;
        }
    }
    Repaired {
        token_types: types,
        eog,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(tokens: &[&str]) -> GgufVocab {
        GgufVocab {
            model: "gpt2".into(),
            tokens: tokens.iter().map(|s| s.to_string()).collect(),
            token_types: vec![TokenType::Normal; tokens.len()],
            ..GgufVocab::default()
        }
    }

    #[test]
    fn mislabeled_end_tokens_become_control_and_end_generation() {
        let v = vocab(&[
            "a",
            "<end_of_turn>",
            "<|im_start|>",
            "<|fim_prefix|>",
            "<|file_sep|>",
        ]);
        let r = repair(&v, Some(0));
        assert_eq!(r.eog, vec![0, 1, 4]);
        assert_eq!(r.token_types[1], TokenType::Control);
        assert_eq!(
            r.token_types[2],
            TokenType::Normal,
            "not a name llama.cpp repairs"
        );
        assert_eq!(r.token_types[3], TokenType::Control);
        assert_eq!(r.token_types[4], TokenType::Control);
    }

    #[test]
    fn harmony_end_is_not_an_end_when_return_and_call_exist() {
        let v = vocab(&["<|return|>", "<|call|>", "<|end|>", "<|channel|>"]);
        let r = repair(&v, None);
        assert_eq!(r.eog, vec![0, 1]);
        assert_eq!(r.token_types[2], TokenType::UserDefined);
        assert_eq!(r.token_types[3], TokenType::UserDefined);
    }
}
