//! Tokenizers (Hugging Face tokenizer.json and GGUF vocabularies, as one type) and chat templates.
//!
//! - [`Tokenizer`]: `from_file` (tokenizer.json, plus tokenizer_config.json /
//!   generation_config.json / chat_template.jinja beside it) or `from_gguf_metadata` (GGUF
//!   `gpt2` byte-level BPE with llama.cpp's pre-tokenizers, or `llama` SentencePiece BPE with
//!   byte fallback). Ids equal llama.cpp's on the same GGUF (see tests/ and
//!   scripts/gen_tokenizer_refs.py).
//! - [`StreamDecoder`]: ids in one at a time, text out, never a broken character.
//! - [`ChatTemplate`]: Jinja chat templates rendered as transformers renders them.
//!
//! ```
//! use tf_formats::gguf::GgufFile;
//! use tf_tokenize::{ChatMessage, ChatRequest, ChatTemplate, StreamDecoder, Tokenizer};
//!
//! let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/spm_tiny.gguf");
//! let gguf = GgufFile::open(std::path::Path::new(path)).unwrap();
//! let tok = Tokenizer::from_gguf_metadata(|key| gguf.get(key)).unwrap();
//! let ids = tok.encode("Hello world", true).unwrap(); // BOS added: this vocabulary asks for it
//! assert_eq!(ids[0], tok.bos_id().unwrap());
//! assert_eq!(tok.decode(&ids, true).unwrap(), "Hello world");
//!
//! let mut stream = StreamDecoder::new(&tok, true);
//! let mut text = String::new();
//! for &id in &ids {
//!     text += &stream.push(id).unwrap();
//! }
//! text += &stream.finish().unwrap();
//! assert_eq!(text, "Hello world");
//!
//! let template = ChatTemplate::new(
//!     "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}\
//!      {% if add_generation_prompt %}<|assistant|>{% endif %}",
//! )
//! .unwrap();
//! let request = ChatRequest {
//!     messages: vec![ChatMessage::text("user", "Hi")],
//!     add_generation_prompt: true,
//!     ..ChatRequest::default()
//! };
//! let prompt = template.render(&request, tok.bos_token(), tok.eos_token()).unwrap();
//! assert_eq!(prompt, "<|user|>Hi<|assistant|>");
//! ```

mod byte_level;
mod error;
mod gguf_build;
mod gguf_vocab;
mod hf_files;
mod llama_cpp_fixups;
mod message_marker;
mod pre_tokenizer;
mod stream;
pub mod template;
mod tokenizer;

pub use error::{Result, TokenizerError};
pub use gguf_vocab::{GgufVocab, TokenType};
pub use hf_files::{pick_template, templates_from_config_value, HfConfig, NamedTemplate};
pub use message_marker::{marker_text, message_end_token, message_marker};
pub use pre_tokenizer::BpePreTokenizer;
pub use stream::StreamDecoder;
pub use template::{ChatMessage, ChatRequest, ChatTemplate, MessageContent, TemplateError};
pub use tokenizer::{Tokenizer, VocabKind};
