//! The tokenizer part of GGUF metadata (`tokenizer.ggml.*`, `tokenizer.chat_template`).

use tf_formats::gguf::MetaValue;

use crate::error::{Result, TokenizerError};

/// A GGUF token type (`tokenizer.ggml.token_type`), numbered as llama.cpp numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenType {
    /// A type number this crate does not know (treated like `Normal`).
    Undefined,
    /// An ordinary vocabulary piece.
    Normal,
    /// The unknown-token placeholder.
    Unknown,
    /// A control token (`<|im_start|>`, `<s>`): matched whole in text, skipped when decoding
    /// with `skip_special`.
    Control,
    /// A user-defined token: matched whole in text, always decoded.
    UserDefined,
    /// A reserved, unused slot.
    Unused,
    /// A byte-fallback token `<0xNN>`.
    Byte,
}

impl TokenType {
    /// Maps the on-disk number.
    pub fn from_id(id: i64) -> TokenType {
        match id {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// Everything a GGUF file says about its tokenizer.
#[derive(Debug, Clone, Default)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: `gpt2` (byte-level BPE) or `llama` (SentencePiece BPE).
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer name (byte-level BPE only).
    pub pre: Option<String>,
    /// The token spellings, by id.
    pub tokens: Vec<String>,
    /// The token types, by id (all `Normal` when the file has none).
    pub token_types: Vec<TokenType>,
    /// The SentencePiece scores, by id (empty when the file has none).
    pub scores: Vec<f32>,
    /// The BPE merges, `"left right"`, best first (byte-level BPE).
    pub merges: Vec<String>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// `tokenizer.ggml.eot_token_id` (end of turn).
    pub eot: Option<u32>,
    /// `tokenizer.ggml.eom_token_id` (end of message).
    pub eom: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`, when present.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`, when present.
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`, when present.
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.chat_template`, when present.
    pub chat_template: Option<String>,
}

fn string_array<'a>(
    get: &impl Fn(&str) -> Option<&'a MetaValue>,
    key: &'static str,
) -> Result<Option<Vec<String>>> {
    let Some(v) = get(key) else { return Ok(None) };
    let arr = v.as_array().ok_or(TokenizerError::WrongType {
        key: key.to_string(),
        expected: "an array of strings",
    })?;
    arr.iter()
        .enumerate()
        .map(|(i, e)| {
            e.as_str()
                .map(str::to_owned)
                .ok_or_else(|| TokenizerError::WrongType {
                    key: format!("{key}[{i}]"),
                    expected: "a string",
                })
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

fn opt_id<'a>(
    get: &impl Fn(&str) -> Option<&'a MetaValue>,
    key: &'static str,
) -> Result<Option<u32>> {
    match get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .map(Some)
            .ok_or(TokenizerError::WrongType {
                key: key.to_string(),
                expected: "a non-negative 32-bit integer",
            }),
    }
}

fn opt_bool<'a>(
    get: &impl Fn(&str) -> Option<&'a MetaValue>,
    key: &'static str,
) -> Result<Option<bool>> {
    match get(key) {
        None => Ok(None),
        Some(v) => v.as_bool().map(Some).ok_or(TokenizerError::WrongType {
            key: key.to_string(),
            expected: "a bool",
        }),
    }
}

impl GgufVocab {
    /// Reads the tokenizer keys through `get` (a metadata lookup by key).
    pub fn from_metadata<'a>(get: impl Fn(&str) -> Option<&'a MetaValue>) -> Result<GgufVocab> {
        let model = get("tokenizer.ggml.model")
            .ok_or(TokenizerError::MissingKey {
                key: "tokenizer.ggml.model",
            })?
            .as_str()
            .ok_or(TokenizerError::WrongType {
                key: "tokenizer.ggml.model".into(),
                expected: "a string",
            })?
            .to_string();
        let tokens =
            string_array(&get, "tokenizer.ggml.tokens")?.ok_or(TokenizerError::MissingKey {
                key: "tokenizer.ggml.tokens",
            })?;
        let n = tokens.len();
        let token_types = match get("tokenizer.ggml.token_type") {
            None => vec![TokenType::Normal; n],
            Some(v) => {
                let arr = v.as_array().ok_or(TokenizerError::WrongType {
                    key: "tokenizer.ggml.token_type".into(),
                    expected: "an array of integers",
                })?;
                let types = arr
                    .iter()
                    .enumerate()
                    .map(|(i, e)| match e {
                        MetaValue::I32(x) => Ok(TokenType::from_id(i64::from(*x))),
                        other => other
                            .as_u64()
                            .map(|x| TokenType::from_id(x as i64))
                            .ok_or_else(|| TokenizerError::WrongType {
                                key: format!("tokenizer.ggml.token_type[{i}]"),
                                expected: "an integer",
                            }),
                    })
                    .collect::<Result<Vec<_>>>()?;
                check_len("tokenizer.ggml.token_type", types.len(), n)?;
                types
            }
        };
        let scores = match get("tokenizer.ggml.scores") {
            None => Vec::new(),
            Some(v) => {
                let arr = v.as_array().ok_or(TokenizerError::WrongType {
                    key: "tokenizer.ggml.scores".into(),
                    expected: "an array of floats",
                })?;
                let scores = arr
                    .iter()
                    .enumerate()
                    .map(|(i, e)| {
                        e.as_f64()
                            .map(|x| x as f32)
                            .ok_or_else(|| TokenizerError::WrongType {
                                key: format!("tokenizer.ggml.scores[{i}]"),
                                expected: "a number",
                            })
                    })
                    .collect::<Result<Vec<_>>>()?;
                check_len("tokenizer.ggml.scores", scores.len(), n)?;
                scores
            }
        };
        let merges = string_array(&get, "tokenizer.ggml.merges")?.unwrap_or_default();
        let pre = match get("tokenizer.ggml.pre") {
            None => None,
            Some(v) => Some(
                v.as_str()
                    .ok_or(TokenizerError::WrongType {
                        key: "tokenizer.ggml.pre".into(),
                        expected: "a string",
                    })?
                    .to_string(),
            ),
        };
        let chat_template = get("tokenizer.chat_template")
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        let vocab = GgufVocab {
            model,
            pre,
            tokens,
            token_types,
            scores,
            merges,
            bos: opt_id(&get, "tokenizer.ggml.bos_token_id")?,
            eos: opt_id(&get, "tokenizer.ggml.eos_token_id")?,
            eot: opt_id(&get, "tokenizer.ggml.eot_token_id")?,
            eom: opt_id(&get, "tokenizer.ggml.eom_token_id")?,
            unk: opt_id(&get, "tokenizer.ggml.unknown_token_id")?,
            pad: opt_id(&get, "tokenizer.ggml.padding_token_id")?,
            add_bos: opt_bool(&get, "tokenizer.ggml.add_bos_token")?,
            add_eos: opt_bool(&get, "tokenizer.ggml.add_eos_token")?,
            add_space_prefix: opt_bool(&get, "tokenizer.ggml.add_space_prefix")?,
            chat_template,
        };
        for (role, id) in [
            ("bos", vocab.bos),
            ("eos", vocab.eos),
            ("eot", vocab.eot),
            ("eom", vocab.eom),
            ("unknown", vocab.unk),
            ("padding", vocab.pad),
        ] {
            if let Some(id) = id {
                if id as usize >= n {
                    return Err(TokenizerError::SpecialIdOutOfRange {
                        role,
                        id: u64::from(id),
                        vocab_size: n,
                    });
                }
            }
        }
        Ok(vocab)
    }

    /// Reads the tokenizer keys from a list of `(key, value)` metadata pairs.
    pub fn from_metadata_pairs(pairs: &[(String, MetaValue)]) -> Result<GgufVocab> {
        GgufVocab::from_metadata(|key| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v))
    }
}

fn check_len(key: &'static str, found: usize, tokens: usize) -> Result<()> {
    if found == tokens {
        Ok(())
    } else {
        Err(TokenizerError::LengthMismatch { key, found, tokens })
    }
}
