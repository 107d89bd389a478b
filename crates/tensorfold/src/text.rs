//! A model's tokenizer and chat template, from a GGUF's metadata or a directory's files.

use anyhow::Context;
use std::path::Path;
use tf_tokenize::{ChatMessage, ChatRequest, ChatTemplate, Tokenizer};

/// The text side of a model.
pub struct ModelText {
    pub tokenizer: Tokenizer,
    /// The chat template source, when the model has one.
    pub template: Option<String>,
}

impl ModelText {
    /// Loads the tokenizer (and template) of the model at `path`.
    pub fn load(path: &Path) -> anyhow::Result<ModelText> {
        if path.is_dir() {
            let tokenizer = Tokenizer::from_file(path.join("tokenizer.json"))?;
            let cfg = tf_tokenize::HfConfig::from_dir(path)?;
            let template = tf_tokenize::pick_template(&cfg.chat_templates, false).map(String::from);
            return Ok(ModelText {
                tokenizer,
                template,
            });
        }
        let gguf = tf_formats::gguf::GgufFile::open(path)
            .with_context(|| format!("reading {}", path.display()))?;
        let tokenizer = Tokenizer::from_gguf_metadata(|k| gguf.get(k))?;
        let template = gguf
            .get("tokenizer.chat_template")
            .and_then(|v| v.as_str())
            .map(String::from);
        Ok(ModelText {
            tokenizer,
            template,
        })
    }

    /// Token ids of a conversation rendered with the chat template (ending with the opening
    /// of the assistant's turn when the request asks for it).
    pub fn render(&self, request: &ChatRequest) -> anyhow::Result<Vec<u32>> {
        let source = self
            .template
            .as_deref()
            .context("this model has no chat template: use --raw to send plain text")?;
        let template = ChatTemplate::new(source)?;
        let text = template.render(
            request,
            self.tokenizer.bos_token(),
            self.tokenizer.eos_token(),
        )?;
        Ok(self.tokenizer.encode(&text, false)?)
    }

    /// Token ids of a one-message chat prompt.
    pub fn chat_prompt(&self, user: &str) -> anyhow::Result<Vec<u32>> {
        self.render(&ChatRequest {
            messages: vec![ChatMessage::text("user", user)],
            add_generation_prompt: true,
            ..Default::default()
        })
    }
}
