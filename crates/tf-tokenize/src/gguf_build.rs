//! Builds a `tokenizers` pipeline from a GGUF vocabulary, the way llama.cpp tokenizes it.

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior,
};

use crate::byte_level::spelling_to_bytes;
use crate::error::{backend, Result, TokenizerError};
use crate::gguf_vocab::{GgufVocab, TokenType};
use crate::pre_tokenizer::BpePreTokenizer;

/// The space marker SentencePiece writes in place of ' '.
pub(crate) const SPM_SPACE: char = '\u{2581}';

/// A built backend plus what the wrapper needs to decode.
pub(crate) struct Built {
    pub inner: tokenizers::Tokenizer,
    pub bytes: Vec<Vec<u8>>,
    pub special: Vec<bool>,
}

fn vocab_map(tokens: &[String]) -> Vocab {
    let mut map = Vocab::default();
    for (id, t) in tokens.iter().enumerate() {
        // llama.cpp keeps the last id for a duplicated spelling; so do we.
        map.insert(t.clone(), id as u32);
    }
    map
}

/// Control and unknown tokens become special added tokens, user-defined ones plain added
/// tokens; both are matched whole in text before any splitting (llama.cpp's partition).
fn added_tokens(vocab: &GgufVocab) -> (Vec<AddedToken>, Vec<AddedToken>) {
    let mut special = Vec::new();
    let mut user = Vec::new();
    for (t, ty) in vocab.tokens.iter().zip(&vocab.token_types) {
        match ty {
            TokenType::Control | TokenType::Unknown => {
                special.push(AddedToken::from(t.clone(), true).normalized(false))
            }
            TokenType::UserDefined => {
                user.push(AddedToken::from(t.clone(), false).normalized(false))
            }
            _ => {}
        }
    }
    (special, user)
}

fn is_special_type(ty: TokenType) -> bool {
    matches!(ty, TokenType::Control | TokenType::Unknown)
}

fn finish(mut inner: tokenizers::Tokenizer, vocab: &GgufVocab, bytes: Vec<Vec<u8>>) -> Built {
    let (special_tokens, user_tokens) = added_tokens(vocab);
    inner.add_special_tokens(&special_tokens);
    inner.add_tokens(&user_tokens);
    let special = vocab
        .token_types
        .iter()
        .map(|&t| is_special_type(t))
        .collect();
    Built {
        inner,
        bytes,
        special,
    }
}

/// Byte-level BPE (`tokenizer.ggml.model = gpt2`).
pub(crate) fn build_byte_level(vocab: &GgufVocab, pre: BpePreTokenizer) -> Result<Built> {
    let map = vocab_map(&vocab.tokens);
    let mut merges = Vec::with_capacity(vocab.merges.len());
    for (index, m) in vocab.merges.iter().enumerate() {
        // Split at the first space after the first character (a piece may start with ' ').
        let split = m
            .char_indices()
            .skip(1)
            .find(|&(_, c)| c == ' ')
            .map(|(i, _)| i);
        let bad = || TokenizerError::BadMerge {
            index,
            merge: m.clone(),
        };
        let i = split.ok_or_else(bad)?;
        let (l, r) = (&m[..i], &m[i + 1..]);
        if !map.contains_key(l) || !map.contains_key(r) || !map.contains_key(&format!("{l}{r}")) {
            return Err(bad());
        }
        merges.push((l.to_string(), r.to_string()));
    }
    let bpe = BPE::builder()
        .vocab_and_merges(map, merges)
        .ignore_merges(pre.ignore_merges())
        .build()
        .map_err(backend)?;
    let mut inner = tokenizers::Tokenizer::new(bpe);
    let mut steps: Vec<PreTokenizerWrapper> = Vec::new();
    for re in pre.regexes() {
        let split = Split::new(
            SplitPattern::Regex((*re).to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(backend)?;
        steps.push(split.into());
    }
    steps.push(ByteLevel::new(false, false, false).into());
    inner.with_pre_tokenizer(Some(PreSequence::new(steps)));
    inner.with_decoder(Some(ByteLevelDecoder::new(false, false, false)));
    let bytes = vocab
        .tokens
        .iter()
        .zip(&vocab.token_types)
        .map(|(t, ty)| match ty {
            TokenType::Control | TokenType::UserDefined | TokenType::Unknown => {
                t.as_bytes().to_vec()
            }
            _ => spelling_to_bytes(t),
        })
        .collect();
    Ok(finish(inner, vocab, bytes))
}

/// The byte a `<0xNN>` piece stands for.
pub(crate) fn byte_piece(t: &str) -> Option<u8> {
    let hex = t.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// SentencePiece BPE merges implied by the scores: a pair merges when the joined piece is in
/// the vocabulary, and higher-scoring results merge first (llama.cpp's bigram queue).
fn spm_merges(vocab: &GgufVocab, map: &Vocab) -> Vec<(String, String)> {
    let score = |id: usize| vocab.scores.get(id).copied().unwrap_or(0.0);
    let mut found: Vec<(f32, u32, u32, String, String)> = Vec::new();
    for (id, t) in vocab.tokens.iter().enumerate() {
        if vocab.token_types[id] == TokenType::Byte {
            continue;
        }
        for (i, _) in t.char_indices().skip(1) {
            let (l, r) = (&t[..i], &t[i..]);
            if let (Some(&lid), Some(_)) = (map.get(l), map.get(r)) {
                found.push((score(id), id as u32, lid, l.to_string(), r.to_string()));
            }
        }
    }
    found.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    found.into_iter().map(|(_, _, _, l, r)| (l, r)).collect()
}

/// SentencePiece BPE with byte fallback (`tokenizer.ggml.model = llama`).
pub(crate) fn build_spm(vocab: &GgufVocab, add_space_prefix: bool) -> Result<Built> {
    let map = vocab_map(&vocab.tokens);
    let merges = spm_merges(vocab, &map);
    let mut builder = BPE::builder()
        .vocab_and_merges(map, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = vocab.unk {
        builder = builder.unk_token(vocab.tokens[unk as usize].clone());
    }
    let bpe = builder.build().map_err(backend)?;
    let mut inner = tokenizers::Tokenizer::new(bpe);
    let replace: NormalizerWrapper = Replace::new(" ", SPM_SPACE.to_string())
        .map_err(backend)?
        .into();
    let normalizer = if add_space_prefix {
        NormalizerSequence::new(vec![Prepend::new(SPM_SPACE.to_string()).into(), replace])
    } else {
        NormalizerSequence::new(vec![replace])
    };
    inner.with_normalizer(Some(normalizer));
    let mut decoders: Vec<DecoderWrapper> = vec![
        DecoderWrapper::Replace(Replace::new(SPM_SPACE.to_string(), " ").map_err(backend)?),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if add_space_prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    inner.with_decoder(Some(DecoderSequence::new(decoders)));
    let bytes = vocab
        .tokens
        .iter()
        .zip(&vocab.token_types)
        .map(|(t, ty)| match ty {
            TokenType::Byte => byte_piece(t)
                .map(|b| vec![b])
                .unwrap_or_else(|| t.as_bytes().to_vec()),
            TokenType::Control | TokenType::UserDefined | TokenType::Unknown => {
                t.as_bytes().to_vec()
            }
            _ => t.replace(SPM_SPACE, " ").into_bytes(),
        })
        .collect();
    Ok(finish(inner, vocab, bytes))
}
