//! A model's tokenizer and chat template, from a GGUF's metadata or a directory's files.

use std::path::Path;
use tf_tokenize::{ChatMessage, ChatRequest, ChatTemplate, Tokenizer};

/// Why the text side of a model could not be loaded or a prompt rendered.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// The tokenizer files or metadata are unreadable.
    #[error(transparent)]
    Tokenizer(#[from] tf_tokenize::TokenizerError),
    /// The GGUF file could not be read.
    #[error("reading {path}: {message}")]
    Gguf { path: String, message: String },
    /// The model has no chat template.
    #[error("this model has no chat template: send plain text (run --raw, or /v1/completions)")]
    NoTemplate,
    /// The chat template failed.
    #[error(transparent)]
    Template(#[from] tf_tokenize::TemplateError),
}

/// The text side of a model.
pub struct ModelText {
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// The chat template source, when the model has one.
    pub template: Option<String>,
    compiled: Option<ChatTemplate>,
}

impl ModelText {
    /// Loads the tokenizer (and template) of the model at `path`.
    pub fn load(path: &Path) -> Result<ModelText, TextError> {
        if path.is_dir() {
            let tokenizer = Tokenizer::from_file(path.join("tokenizer.json"))?;
            let cfg = tf_tokenize::HfConfig::from_dir(path)?;
            let template = tf_tokenize::pick_template(&cfg.chat_templates, false).map(String::from);
            return ModelText::new(tokenizer, template);
        }
        let gguf = tf_formats::gguf::GgufFile::open(path).map_err(|e| TextError::Gguf {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let tokenizer = Tokenizer::from_gguf_metadata(|k| gguf.get(k))?;
        let template = gguf
            .get("tokenizer.chat_template")
            .and_then(|v| v.as_str())
            .map(String::from);
        ModelText::new(tokenizer, template)
    }

    /// Wraps a tokenizer and template source (compiling the template once).
    pub fn new(tokenizer: Tokenizer, template: Option<String>) -> Result<ModelText, TextError> {
        let compiled = template.as_deref().map(ChatTemplate::new).transpose()?;
        Ok(ModelText {
            tokenizer,
            template,
            compiled,
        })
    }

    /// The conversation rendered with the chat template, as text.
    pub fn render_text(&self, request: &ChatRequest) -> Result<String, TextError> {
        let template = self.compiled.as_ref().ok_or(TextError::NoTemplate)?;
        Ok(template.render(
            request,
            self.tokenizer.bos_token(),
            self.tokenizer.eos_token(),
        )?)
    }

    /// Token ids of a conversation rendered with the chat template (ending with the opening
    /// of the assistant's turn when the request asks for it).
    pub fn render(&self, request: &ChatRequest) -> Result<Vec<u32>, TextError> {
        let text = self.render_text(request)?;
        Ok(self.tokenizer.encode(&text, false)?)
    }

    /// Token ids of a one-message chat prompt.
    pub fn chat_prompt(&self, user: &str) -> Result<Vec<u32>, TextError> {
        self.render(&ChatRequest {
            messages: vec![ChatMessage::text("user", user)],
            add_generation_prompt: true,
            ..Default::default()
        })
    }

    /// Whether the chat template has think blocks (`<think>`), so replies split reasoning.
    pub fn has_think_blocks(&self) -> bool {
        self.template
            .as_deref()
            .is_some_and(|t| t.contains("<think>"))
    }
}
