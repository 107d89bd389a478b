//! The error type of this crate's tokenizer half.

use std::path::PathBuf;

/// Why a tokenizer could not be built, or could not encode or decode.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A tokenizer file could not be read or parsed.
    #[error("cannot load tokenizer from {path}: {message}")]
    Load {
        /// The file that failed.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A required GGUF metadata key is absent.
    #[error("GGUF metadata has no `{key}`; the file carries no usable tokenizer")]
    MissingKey {
        /// The missing key.
        key: &'static str,
    },
    /// A GGUF metadata key holds a value of the wrong type.
    #[error("GGUF metadata `{key}` is not {expected}")]
    WrongType {
        /// The key (with the array index, where it is an array element).
        key: String,
        /// What the key should hold.
        expected: &'static str,
    },
    /// `tokenizer.ggml.model` names a vocabulary kind we do not implement.
    #[error("GGUF tokenizer model `{model}` is not supported (supported: gpt2, llama)")]
    UnsupportedModel {
        /// The value of `tokenizer.ggml.model`.
        model: String,
    },
    /// `tokenizer.ggml.pre` names a pre-tokenizer we do not implement; encoding with a
    /// different split would silently produce different ids, so we refuse.
    #[error(
        "GGUF pre-tokenizer `{name}` is not supported (supported: default, gpt-2/gpt2, \
         smollm/starcoder/refact/codeshell, llama3/llama-bpe/llama-v3/dbrx/smaug-bpe, \
         qwen2/deepseek-r1-qwen/stablelm2)"
    )]
    UnsupportedPreTokenizer {
        /// The value of `tokenizer.ggml.pre`.
        name: String,
    },
    /// A per-token array does not have one entry per token.
    #[error("GGUF `{key}` has {found} entries but the vocabulary has {tokens} tokens")]
    LengthMismatch {
        /// The per-token array key.
        key: &'static str,
        /// Its length.
        found: usize,
        /// The number of tokens.
        tokens: usize,
    },
    /// A merge rule is malformed or names a piece that is not in the vocabulary.
    #[error("merge #{index} `{merge}` is malformed or names a piece not in the vocabulary")]
    BadMerge {
        /// Position of the merge in the merges array.
        index: usize,
        /// The merge text.
        merge: String,
    },
    /// A special-token id points outside the vocabulary.
    #[error("{role} token id {id} is outside the vocabulary of {vocab_size} tokens")]
    SpecialIdOutOfRange {
        /// Which special token (bos, eos, ...).
        role: &'static str,
        /// The id given.
        id: u64,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// A token id given to decode is outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    UnknownId {
        /// The id given.
        id: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// The `tokenizers` backend reported an error.
    #[error("tokenizer backend: {0}")]
    Backend(String),
}

/// Shorthand for results of this crate's tokenizer functions.
pub type Result<T> = std::result::Result<T, TokenizerError>;

pub(crate) fn backend(e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Backend(e.to_string())
}
