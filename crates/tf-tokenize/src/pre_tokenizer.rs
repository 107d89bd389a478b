//! The pre-tokenizer splits named by GGUF's `tokenizer.ggml.pre`, as llama.cpp applies them.
//!
//! llama.cpp splits text with a list of regexes applied in turn: each one cuts every piece
//! left by the previous ones into matches and the gaps between them. That is `Split` with
//! the `Isolated` behaviour, once per regex, which is how we build it.

use crate::error::{Result, TokenizerError};

/// The GPT-2 split: contractions, optional-space letter runs, digit runs, other runs,
/// and whitespace not followed by non-space.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// Llama 3's split with the case-insensitive contraction group spelled out per letter
/// (llama.cpp's form; `(?i:...)` would also fold characters like U+017F to `s`).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen 2's split: Llama 3's, but digits one at a time.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A byte-level BPE pre-tokenizer family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BpePreTokenizer {
    /// llama.cpp's fallback (`default` or no name): punctuation runs, GPT-2, digit runs,
    /// then runs of three ASCII digits.
    Default,
    /// GPT-2's regex alone (`gpt-2`, `gpt2`, `phi-2`, `mpt`, `olmo`).
    Gpt2,
    /// Every digit alone, then GPT-2's regex (`smollm`, `starcoder`, `refact`, `codeshell`).
    Smollm,
    /// Llama 3 (`llama3`, `llama-bpe`, `llama-v3`, `dbrx`, `smaug-bpe`): whole-word vocabulary
    /// hits skip the merges.
    Llama3,
    /// Qwen 2 (`qwen2`, `deepseek-r1-qwen`, `stablelm2`).
    Qwen2,
}

impl BpePreTokenizer {
    /// The family for a `tokenizer.ggml.pre` value; unknown names are refused.
    pub fn from_gguf_name(name: Option<&str>) -> Result<BpePreTokenizer> {
        Ok(match name {
            None | Some("default") => BpePreTokenizer::Default,
            Some("gpt-2" | "gpt2" | "phi-2" | "mpt" | "olmo") => BpePreTokenizer::Gpt2,
            Some("smollm" | "starcoder" | "refact" | "codeshell") => BpePreTokenizer::Smollm,
            Some("llama3" | "llama-bpe" | "llama-v3" | "dbrx" | "smaug-bpe") => {
                BpePreTokenizer::Llama3
            }
            Some("qwen2" | "deepseek-r1-qwen" | "stablelm2") => BpePreTokenizer::Qwen2,
            Some(other) => {
                return Err(TokenizerError::UnsupportedPreTokenizer {
                    name: other.to_string(),
                })
            }
        })
    }

    /// The regexes, applied in order, each splitting the pieces the previous one left.
    pub fn regexes(self) -> &'static [&'static str] {
        match self {
            BpePreTokenizer::Default => {
                &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"]
            }
            BpePreTokenizer::Gpt2 => &[GPT2],
            BpePreTokenizer::Smollm => &[r"\p{N}", GPT2],
            BpePreTokenizer::Llama3 => &[LLAMA3],
            BpePreTokenizer::Qwen2 => &[QWEN2],
        }
    }

    /// Whether a pre-tokenized word that is itself a vocabulary entry is taken whole.
    pub fn ignore_merges(self) -> bool {
        matches!(self, BpePreTokenizer::Llama3)
    }

    /// llama.cpp's default for "add BOS" when the file does not say.
    pub fn default_add_bos(self) -> bool {
        matches!(self, BpePreTokenizer::Llama3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_and_unknown_is_refused() {
        assert_eq!(
            BpePreTokenizer::from_gguf_name(Some("smollm")).unwrap(),
            BpePreTokenizer::Smollm
        );
        assert_eq!(
            BpePreTokenizer::from_gguf_name(None).unwrap(),
            BpePreTokenizer::Default
        );
        let err = BpePreTokenizer::from_gguf_name(Some("klingon")).unwrap_err();
        assert!(
            matches!(err, TokenizerError::UnsupportedPreTokenizer { ref name } if name == "klingon")
        );
    }

    #[test]
    fn every_regex_compiles_in_the_backend() {
        for pre in [
            BpePreTokenizer::Default,
            BpePreTokenizer::Gpt2,
            BpePreTokenizer::Smollm,
            BpePreTokenizer::Llama3,
            BpePreTokenizer::Qwen2,
        ] {
            for re in pre.regexes() {
                tokenizers::pre_tokenizers::split::Split::new(
                    tokenizers::pre_tokenizers::split::SplitPattern::Regex(re.to_string()),
                    tokenizers::SplitDelimiterBehavior::Isolated,
                    false,
                )
                .unwrap();
            }
        }
    }
}
