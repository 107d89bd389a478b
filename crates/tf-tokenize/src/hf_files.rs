//! The Hugging Face files beside tokenizer.json: tokenizer_config.json, generation_config.json,
//! chat_template.jinja; and how a tokenizer.json decoder maps to our decode modes.

use std::path::Path;

use serde_json::Value;

use crate::error::{Result, TokenizerError};
use crate::tokenizer::DecodeMode;

/// A chat template with its name (`default` when the source gives none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedTemplate {
    /// The template's name (`default`, `tool_use`, ...).
    pub name: String,
    /// The Jinja source.
    pub source: String,
}

/// The facts a tokenizer takes from the files beside tokenizer.json.
#[derive(Debug, Clone, Default)]
pub struct HfConfig {
    /// `bos_token` spelling.
    pub bos_token: Option<String>,
    /// `eos_token` spelling.
    pub eos_token: Option<String>,
    /// `pad_token` spelling.
    pub pad_token: Option<String>,
    /// Chat templates (a string becomes one named `default`).
    pub chat_templates: Vec<NamedTemplate>,
    /// generation_config.json `eos_token_id` (one or a list).
    pub generation_eos_ids: Vec<u32>,
}

fn token_spelling(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

/// The templates named by a tokenizer_config.json `chat_template` value (a string, or a list
/// of `{name, template}`).
pub fn templates_from_config_value(v: &Value) -> Vec<NamedTemplate> {
    match v {
        Value::String(s) => vec![NamedTemplate {
            name: "default".into(),
            source: s.clone(),
        }],
        Value::Array(items) => items
            .iter()
            .filter_map(|item| {
                Some(NamedTemplate {
                    name: item.get("name")?.as_str()?.to_string(),
                    source: item.get("template")?.as_str()?.to_string(),
                })
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Picks `tool_use` when tools are given and present, else `default`.
pub fn pick_template(templates: &[NamedTemplate], with_tools: bool) -> Option<&str> {
    let by_name = |n: &str| {
        templates
            .iter()
            .find(|t| t.name == n)
            .map(|t| t.source.as_str())
    };
    if with_tools {
        if let Some(t) = by_name("tool_use") {
            return Some(t);
        }
    }
    by_name("default")
}

fn read_json(path: &Path) -> Result<Option<Value>> {
    match std::fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(TokenizerError::Load {
            path: path.to_path_buf(),
            message: e.to_string(),
        }),
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| TokenizerError::Load {
                path: path.to_path_buf(),
                message: e.to_string(),
            }),
    }
}

impl HfConfig {
    /// Reads whichever of tokenizer_config.json, generation_config.json and
    /// chat_template.jinja exist in `dir`.
    pub fn from_dir(dir: &Path) -> Result<HfConfig> {
        let mut cfg = match read_json(&dir.join("tokenizer_config.json"))? {
            Some(v) => HfConfig::from_tokenizer_config(&v),
            None => HfConfig::default(),
        };
        if let Some(gen) = read_json(&dir.join("generation_config.json"))? {
            cfg.generation_eos_ids = match gen.get("eos_token_id") {
                Some(Value::Number(n)) => n
                    .as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .into_iter()
                    .collect(),
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
                    .collect(),
                _ => Vec::new(),
            };
        }
        let jinja = dir.join("chat_template.jinja");
        if let Ok(source) = std::fs::read_to_string(&jinja) {
            cfg.chat_templates.retain(|t| t.name != "default");
            cfg.chat_templates.push(NamedTemplate {
                name: "default".into(),
                source,
            });
        }
        Ok(cfg)
    }

    /// The facts in a parsed tokenizer_config.json.
    pub fn from_tokenizer_config(v: &Value) -> HfConfig {
        HfConfig {
            bos_token: token_spelling(v.get("bos_token")),
            eos_token: token_spelling(v.get("eos_token")),
            pad_token: token_spelling(v.get("pad_token")),
            chat_templates: v
                .get("chat_template")
                .map(templates_from_config_value)
                .unwrap_or_default(),
            generation_eos_ids: Vec::new(),
        }
    }
}

/// The decode mode a tokenizer.json decoder implies: byte-level, SentencePiece-style
/// (`▁` for space, `<0xNN>` bytes), or the backend's decoder for anything else.
pub(crate) fn decode_mode_of(decoder: Option<&Value>) -> DecodeMode {
    let Some(d) = decoder else {
        return DecodeMode::Backend;
    };
    let ty = d.get("type").and_then(Value::as_str).unwrap_or("");
    match ty {
        "ByteLevel" => DecodeMode::Bytes {
            strip_leading_space: false,
        },
        "Metaspace" => {
            let scheme = d.get("prepend_scheme").and_then(Value::as_str);
            let legacy = d.get("add_prefix_space").and_then(Value::as_bool);
            let strip = match scheme {
                Some(s) => s != "never",
                None => legacy.unwrap_or(true),
            };
            DecodeMode::Bytes {
                strip_leading_space: strip,
            }
        }
        "Sequence" => {
            let parts: Vec<&Value> = d
                .get("decoders")
                .and_then(Value::as_array)
                .map(|a| a.iter().collect())
                .unwrap_or_default();
            let has = |t: &str| {
                parts
                    .iter()
                    .any(|p| p.get("type").and_then(Value::as_str) == Some(t))
            };
            if has("ByteLevel") && parts.len() == 1 {
                DecodeMode::Bytes {
                    strip_leading_space: false,
                }
            } else if has("ByteFallback") && has("Replace") {
                let strip = parts.iter().any(|p| {
                    p.get("type").and_then(Value::as_str) == Some("Strip")
                        && p.get("start").and_then(Value::as_u64).unwrap_or(0) >= 1
                });
                DecodeMode::Bytes {
                    strip_leading_space: strip,
                }
            } else {
                DecodeMode::Backend
            }
        }
        _ => DecodeMode::Backend,
    }
}
