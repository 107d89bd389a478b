//! Tokenizers (Hugging Face tokenizer.json and GGUF vocabularies, as one type) and chat templates.

mod byte_level;
mod error;
mod gguf_build;
mod gguf_vocab;
mod hf_files;
mod llama_cpp_fixups;
mod pre_tokenizer;
mod stream;
pub mod template;
mod tokenizer;

pub use error::{Result, TokenizerError};
pub use gguf_vocab::{GgufVocab, TokenType};
pub use hf_files::{pick_template, templates_from_config_value, HfConfig, NamedTemplate};
pub use pre_tokenizer::BpePreTokenizer;
pub use stream::StreamDecoder;
pub use template::{ChatMessage, ChatRequest, ChatTemplate, MessageContent, TemplateError};
pub use tokenizer::{Tokenizer, VocabKind};
