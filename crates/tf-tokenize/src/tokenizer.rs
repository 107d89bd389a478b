//! One tokenizer type over Hugging Face tokenizer.json files and GGUF vocabularies.

use std::path::Path;

use tf_formats::gguf::MetaValue;

use crate::byte_level::spelling_to_bytes;
use crate::error::{backend, Result, TokenizerError};
use crate::gguf_build::{build_byte_level, build_spm, byte_piece, Built, SPM_SPACE};
use crate::gguf_vocab::GgufVocab;
use crate::hf_files::{HfConfig, NamedTemplate};
use crate::llama_cpp_fixups::repair;
use crate::pre_tokenizer::BpePreTokenizer;

/// Which kind of vocabulary a tokenizer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VocabKind {
    /// GGUF `gpt2`: byte-level BPE with a named pre-tokenizer.
    GgufByteLevelBpe(BpePreTokenizer),
    /// GGUF `llama`: SentencePiece BPE with scores and byte fallback.
    GgufSentencePiece,
    /// A Hugging Face tokenizer.json.
    HfJson,
}

/// How ids turn back into text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DecodeMode {
    /// Each token stands for fixed bytes; the text is their lossy UTF-8 decoding, less one
    /// leading space when the vocabulary prefixes a space on encode.
    Bytes { strip_leading_space: bool },
    /// The backend's decoder (tokenizer.json decoders we do not model byte-wise).
    Backend,
}

/// A tokenizer: encode text to ids, decode ids to text, and the special-token facts.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    kind: VocabKind,
    spellings: Vec<String>,
    bytes: Vec<Vec<u8>>,
    special: Vec<bool>,
    pub(crate) mode: DecodeMode,
    backend_adds_specials: bool,
    bos: Option<u32>,
    eos: Option<u32>,
    eos_ids: Vec<u32>,
    pad: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    templates: Vec<NamedTemplate>,
}

impl Tokenizer {
    /// Loads a Hugging Face tokenizer.json; a tokenizer_config.json and generation_config.json
    /// beside it, when present, supply the special tokens, flags and chat template.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let path = path.as_ref();
        let load_err = |message: String| TokenizerError::Load {
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| load_err(e.to_string()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let config = HfConfig::from_dir(dir)?;
        Tokenizer::from_hf_json_str(&text, &config).map_err(|e| match e {
            TokenizerError::Backend(m) => load_err(m),
            other => other,
        })
    }

    /// Builds from tokenizer.json text plus the facts of the files beside it.
    pub fn from_hf_json_str(json: &str, config: &HfConfig) -> Result<Tokenizer> {
        let value: serde_json::Value = serde_json::from_str(json).map_err(backend)?;
        let inner: tokenizers::Tokenizer = json.parse().map_err(backend)?;
        let mode = crate::hf_files::decode_mode_of(value.get("decoder"));
        let added = inner.get_added_tokens_decoder();
        let n = inner
            .get_vocab_size(true)
            .max(added.keys().map(|&k| k as usize + 1).max().unwrap_or(0));
        let mut spellings = Vec::with_capacity(n);
        let mut bytes = Vec::with_capacity(n);
        let mut special = Vec::with_capacity(n);
        for id in 0..n as u32 {
            let spelling = inner.id_to_token(id).unwrap_or_default();
            let (b, s) = match added.get(&id) {
                Some(tok) => (tok.content.as_bytes().to_vec(), tok.special),
                None => match mode {
                    DecodeMode::Bytes {
                        strip_leading_space: false,
                    } => (spelling_to_bytes(&spelling), false),
                    DecodeMode::Bytes { .. } => (spm_piece_bytes(&spelling), false),
                    DecodeMode::Backend => (spelling.as_bytes().to_vec(), false),
                },
            };
            spellings.push(spelling);
            bytes.push(b);
            special.push(s);
        }
        let id_of = |t: &Option<String>| t.as_deref().and_then(|t| inner.token_to_id(t));
        let bos = id_of(&config.bos_token);
        let eos = id_of(&config.eos_token);
        let pad = id_of(&config.pad_token);
        let probe = inner.encode_fast("", true).map_err(backend)?;
        let add_bos = bos.is_some() && probe.get_ids().first() == bos.as_ref();
        let add_eos = eos.is_some() && probe.get_ids().last() == eos.as_ref();
        let mut eos_ids: Vec<u32> = eos
            .into_iter()
            .chain(config.generation_eos_ids.iter().copied())
            .collect();
        eos_ids.dedup();
        let mut tok = Tokenizer {
            inner,
            kind: VocabKind::HfJson,
            spellings,
            bytes,
            special,
            mode,
            backend_adds_specials: true,
            bos,
            eos,
            eos_ids,
            pad,
            add_bos,
            add_eos,
            templates: config.chat_templates.clone(),
        };
        tok.dedup_eos();
        Ok(tok)
    }

    /// Builds from GGUF metadata, looked up by key through `get` (for example
    /// `|k| gguf.get(k)`).
    pub fn from_gguf_metadata<'a>(
        get: impl Fn(&str) -> Option<&'a MetaValue>,
    ) -> Result<Tokenizer> {
        Tokenizer::from_gguf_vocab(&GgufVocab::from_metadata(get)?)
    }

    /// Builds from a parsed GGUF vocabulary. Token types are first repaired by name as
    /// llama.cpp repairs them (see `llama_cpp_fixups`), so both match the same text whole.
    pub fn from_gguf_vocab(vocab: &GgufVocab) -> Result<Tokenizer> {
        let n = vocab.tokens.len();
        let in_range = |id: u32| ((id as usize) < n).then_some(id);
        // llama.cpp's defaults when the file names no BOS/EOS.
        let (bos_default, eos_default) = if vocab.model == "llama" {
            (1, 2)
        } else {
            (11, 11)
        };
        let bos = vocab.bos.or_else(|| in_range(bos_default));
        let eos = vocab.eos.or_else(|| in_range(eos_default));
        let repaired = repair(vocab, eos);
        let mut fixed = vocab.clone();
        fixed.token_types = repaired.token_types;
        let (built, kind, add_bos_default, strip) = match vocab.model.as_str() {
            "gpt2" => {
                let pre = BpePreTokenizer::from_gguf_name(vocab.pre.as_deref())?;
                let built = build_byte_level(&fixed, pre)?;
                (
                    built,
                    VocabKind::GgufByteLevelBpe(pre),
                    pre.default_add_bos(),
                    false,
                )
            }
            "llama" => {
                let prefix = vocab.add_space_prefix.unwrap_or(true);
                (
                    build_spm(&fixed, prefix)?,
                    VocabKind::GgufSentencePiece,
                    true,
                    prefix,
                )
            }
            other => {
                return Err(TokenizerError::UnsupportedModel {
                    model: other.to_string(),
                })
            }
        };
        let Built {
            inner,
            bytes,
            special,
        } = built;
        let templates = vocab
            .chat_template
            .iter()
            .map(|s| NamedTemplate {
                name: "default".into(),
                source: s.clone(),
            })
            .collect();
        Ok(Tokenizer {
            inner,
            kind,
            spellings: vocab.tokens.clone(),
            bytes,
            special,
            mode: DecodeMode::Bytes {
                strip_leading_space: strip,
            },
            backend_adds_specials: false,
            bos,
            eos,
            eos_ids: repaired.eog,
            pad: vocab.pad,
            add_bos: vocab.add_bos.unwrap_or(add_bos_default) && bos.is_some(),
            add_eos: vocab.add_eos.unwrap_or(false) && eos.is_some(),
            templates,
        })
    }

    fn dedup_eos(&mut self) {
        let mut seen = std::collections::HashSet::new();
        self.eos_ids.retain(|id| seen.insert(*id));
    }

    /// Encodes text; control and user-defined tokens written in the text are matched whole.
    /// `add_special` adds BOS/EOS where the vocabulary asks for them.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let backend_specials = add_special && self.backend_adds_specials;
        let enc = self
            .inner
            .encode_fast(text, backend_specials)
            .map_err(backend)?;
        let mut ids = Vec::with_capacity(enc.get_ids().len() + 2);
        if add_special && !self.backend_adds_specials && self.add_bos {
            ids.extend(self.bos);
        }
        ids.extend_from_slice(enc.get_ids());
        if add_special && !self.backend_adds_specials && self.add_eos {
            ids.extend(self.eos);
        }
        Ok(ids)
    }

    /// Decodes ids to text; `skip_special` drops control tokens. Bytes that are not valid
    /// UTF-8 become U+FFFD, as `String::from_utf8_lossy` does.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        match self.mode {
            DecodeMode::Backend => {
                self.check_ids(ids)?;
                self.inner.decode(ids, skip_special).map_err(backend)
            }
            DecodeMode::Bytes {
                strip_leading_space,
            } => {
                let mut out = Vec::new();
                for &id in ids {
                    out.extend_from_slice(self.decode_bytes(id, skip_special)?);
                }
                if strip_leading_space && out.first() == Some(&b' ') {
                    out.remove(0);
                }
                Ok(String::from_utf8_lossy(&out).into_owned())
            }
        }
    }

    /// Decodes with the backend's own decoder (for cross-checks against `decode`).
    pub fn decode_with_backend(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.check_ids(ids)?;
        self.inner.decode(ids, skip_special).map_err(backend)
    }

    fn check_ids(&self, ids: &[u32]) -> Result<()> {
        match ids.iter().find(|&&id| id as usize >= self.bytes.len()) {
            Some(&id) => Err(TokenizerError::UnknownId {
                id,
                vocab_size: self.vocab_size(),
            }),
            None => Ok(()),
        }
    }

    /// The bytes id stands for when decoding (empty for a skipped special token).
    pub(crate) fn decode_bytes(&self, id: u32, skip_special: bool) -> Result<&[u8]> {
        let i = id as usize;
        let b = self.bytes.get(i).ok_or(TokenizerError::UnknownId {
            id,
            vocab_size: self.vocab_size(),
        })?;
        if skip_special && self.special[i] {
            Ok(&[])
        } else {
            Ok(b)
        }
    }

    /// The text one token decodes to on its own (lossy where it is part of a UTF-8 sequence),
    /// as llama.cpp's `token_to_piece`; `None` for an id outside the vocabulary.
    pub fn token_to_piece(&self, id: u32) -> Option<String> {
        match self.mode {
            DecodeMode::Bytes { .. } => self
                .bytes
                .get(id as usize)
                .map(|b| String::from_utf8_lossy(b).into_owned()),
            DecodeMode::Backend => self.inner.decode(&[id], false).ok(),
        }
    }

    /// The raw bytes one token stands for; `None` for an id outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.bytes.get(id as usize).map(Vec::as_slice)
    }

    /// The token's spelling in the vocabulary (e.g. `Ġthe`, `▁the`, `<|im_end|>`).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.spellings.get(id as usize).map(String::as_str)
    }

    /// The id of a vocabulary spelling (e.g. `"<|im_end|>"`).
    pub fn token_id(&self, spelling: &str) -> Option<u32> {
        self.inner.token_to_id(spelling)
    }

    /// Whether id is a special (control) token.
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    /// Number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.bytes.len()
    }

    /// Where this vocabulary came from.
    pub fn kind(&self) -> VocabKind {
        self.kind
    }

    /// The beginning-of-sequence id, if any.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence id, if any.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Every id that ends generation: EOS first, then end-of-turn tokens.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// The padding id, if any.
    pub fn pad_id(&self) -> Option<u32> {
        self.pad
    }

    /// Whether `encode(_, true)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(_, true)` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// The BOS token's spelling ("" when there is none), for chat templates.
    pub fn bos_token(&self) -> &str {
        self.bos.and_then(|id| self.token_text(id)).unwrap_or("")
    }

    /// The EOS token's spelling ("" when there is none), for chat templates.
    pub fn eos_token(&self) -> &str {
        self.eos.and_then(|id| self.token_text(id)).unwrap_or("")
    }

    /// The chat template to use: `tool_use` when tools are given and the vocabulary names one,
    /// else `default`.
    pub fn chat_template(&self, with_tools: bool) -> Option<&str> {
        crate::hf_files::pick_template(&self.templates, with_tools)
    }
}

fn spm_piece_bytes(spelling: &str) -> Vec<u8> {
    match byte_piece(spelling) {
        Some(b) => vec![b],
        None => spelling.replace(SPM_SPACE, " ").into_bytes(),
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind)
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.bos)
            .field("eos_ids", &self.eos_ids)
            .field("add_bos", &self.add_bos)
            .finish()
    }
}
