//! tokenizer_config.json: chat templates, special tokens and tokenization flags.

use super::{parse_object, read_optional, ConfigError, Fields, TOKENIZER_CONFIG_FILE};
use serde_json::{Map, Value};
use std::path::Path;

/// File holding a chat template beside tokenizer_config.json (newer transformers).
pub const CHAT_TEMPLATE_FILE: &str = "chat_template.jinja";

/// Keys this reader types; everything else is kept in [`TokenizerConfig::extra`].
const KNOWN: [&str; 8] = [
    "chat_template",
    "bos_token",
    "eos_token",
    "pad_token",
    "unk_token",
    "add_bos_token",
    "add_eos_token",
    "model_max_length",
];

/// One template of a list-form `chat_template`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedTemplate {
    /// Template name (`default`, `tool_use`, `rag`, ...).
    pub name: String,
    /// Jinja source.
    pub template: String,
}

/// `chat_template`: one template, or a list of named ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatTemplate {
    /// A single template string.
    Single(String),
    /// A list of `{name, template}` objects.
    Named(Vec<NamedTemplate>),
}

impl ChatTemplate {
    /// The template called `name`, or the default one (`Single`, or the one named "default").
    pub fn get(&self, name: Option<&str>) -> Option<&str> {
        match (self, name) {
            (ChatTemplate::Single(t), None | Some("default")) => Some(t),
            (ChatTemplate::Single(_), Some(_)) => None,
            (ChatTemplate::Named(list), name) => {
                let want = name.unwrap_or("default");
                list.iter()
                    .find(|t| t.name == want)
                    .map(|t| t.template.as_str())
            }
        }
    }
}

/// A special token: a plain string, or an AddedToken object `{content, lstrip, ...}`.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecialToken {
    /// The token's text.
    pub content: String,
    /// The AddedToken object's other fields (`lstrip`, `rstrip`, `normalized`, ...); empty for
    /// a plain string.
    pub attributes: Map<String, Value>,
}

/// tokenizer_config.json; every field optional, unknown fields kept in `extra`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TokenizerConfig {
    /// Chat template(s); from chat_template.jinja when the JSON has none.
    pub chat_template: Option<ChatTemplate>,
    /// Beginning-of-sequence token.
    pub bos_token: Option<SpecialToken>,
    /// End-of-sequence token.
    pub eos_token: Option<SpecialToken>,
    /// Padding token.
    pub pad_token: Option<SpecialToken>,
    /// Unknown token.
    pub unk_token: Option<SpecialToken>,
    /// Whether encoding prepends BOS.
    pub add_bos_token: Option<bool>,
    /// Whether encoding appends EOS.
    pub add_eos_token: Option<bool>,
    /// Maximum input length (huge sentinel values saturate to `u64::MAX`).
    pub model_max_length: Option<u64>,
    /// Every other field (added_tokens_decoder, tokenizer_class, ...), unchanged.
    pub extra: Map<String, Value>,
}

impl TokenizerConfig {
    /// Parses tokenizer_config.json bytes; `file` names the source in errors.
    pub fn from_slice(bytes: &[u8], file: &str) -> Result<Self, ConfigError> {
        let f = Fields::new(parse_object(bytes, file)?, file);
        let extra = f
            .map()
            .iter()
            .filter(|(k, _)| !KNOWN.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()));
        Ok(Self {
            chat_template: chat_template(&f)?,
            bos_token: special_token(&f, "bos_token")?,
            eos_token: special_token(&f, "eos_token")?,
            pad_token: special_token(&f, "pad_token")?,
            unk_token: special_token(&f, "unk_token")?,
            add_bos_token: f.bool_field("add_bos_token")?,
            add_eos_token: f.bool_field("add_eos_token")?,
            model_max_length: model_max_length(&f)?,
            extra: extra.collect(),
        })
    }

    /// Reads a tokenizer_config.json file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let bytes = std::fs::read(path).map_err(|source| ConfigError::Io {
            file: path.to_path_buf(),
            source,
        })?;
        Self::from_slice(&bytes, &path.display().to_string())
    }

    /// Reads `dir/tokenizer_config.json` (and `dir/chat_template.jinja` when the JSON has no
    /// template); `Ok(None)` when neither file exists.
    pub fn from_dir(dir: &Path) -> Result<Option<Self>, ConfigError> {
        let path = dir.join(TOKENIZER_CONFIG_FILE);
        let config = read_optional(&path)?
            .map(|b| Self::from_slice(&b, &path.display().to_string()))
            .transpose()?;
        let jinja_path = dir.join(CHAT_TEMPLATE_FILE);
        let jinja = match &config {
            Some(c) if c.chat_template.is_some() => None,
            _ => read_optional(&jinja_path)?,
        };
        let Some(jinja) = jinja else {
            return Ok(config);
        };
        let text = String::from_utf8(jinja).map_err(|e| ConfigError::Json {
            file: jinja_path.display().to_string(),
            reason: format!("not UTF-8: {e}"),
        })?;
        let mut config = config.unwrap_or_default();
        config.chat_template = Some(ChatTemplate::Single(text));
        Ok(Some(config))
    }
}

fn chat_template(f: &Fields) -> Result<Option<ChatTemplate>, ConfigError> {
    let Some(v) = f.get("chat_template") else {
        return Ok(None);
    };
    let expected = "a string or a list of {name, template} objects";
    match v {
        Value::String(s) => Ok(Some(ChatTemplate::Single(s.clone()))),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                let name = item.get("name").and_then(Value::as_str);
                let template = item.get("template").and_then(Value::as_str);
                match (name, template) {
                    (Some(n), Some(t)) => Ok(NamedTemplate {
                        name: n.to_string(),
                        template: t.to_string(),
                    }),
                    _ => Err(f.type_error("chat_template", expected, item)),
                }
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|list| Some(ChatTemplate::Named(list))),
        other => Err(f.type_error("chat_template", expected, other)),
    }
}

fn special_token(f: &Fields, key: &str) -> Result<Option<SpecialToken>, ConfigError> {
    let Some(v) = f.get(key) else { return Ok(None) };
    match v {
        Value::String(s) => Ok(Some(SpecialToken {
            content: s.clone(),
            attributes: Map::new(),
        })),
        Value::Object(o) => match o.get("content") {
            Some(Value::String(content)) => {
                let attributes = o
                    .iter()
                    .filter(|(k, _)| *k != "content")
                    .map(|(k, v)| (k.clone(), v.clone()));
                Ok(Some(SpecialToken {
                    content: content.clone(),
                    attributes: attributes.collect(),
                }))
            }
            _ => Err(f.type_error(
                key,
                "a string or an AddedToken object with a string \"content\"",
                v,
            )),
        },
        other => Err(f.type_error(key, "a string or an AddedToken object", other)),
    }
}

fn model_max_length(f: &Fields) -> Result<Option<u64>, ConfigError> {
    let Some(v) = f.get("model_max_length") else {
        return Ok(None);
    };
    if let Some(n) = v.as_u64() {
        return Ok(Some(n));
    }
    match v.as_f64() {
        Some(x) if x >= 0.0 => Ok(Some(if x >= u64::MAX as f64 {
            u64::MAX
        } else {
            x as u64
        })),
        _ => Err(f.type_error("model_max_length", "a non-negative number", v)),
    }
}
