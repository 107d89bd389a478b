//! Typed access to a JSON object's fields, with errors naming the file and the field.

use super::ConfigError;
use serde_json::{Map, Value};

/// A JSON object and the name of the file it came from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Fields {
    map: Map<String, Value>,
    file: String,
}

/// A short description of a value for error messages.
fn describe(v: &Value) -> String {
    let text = v.to_string();
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    if text.len() > 60 {
        let cut = (0..=60)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        format!("{kind} {}...", &text[..cut])
    } else {
        format!("{kind} {text}")
    }
}

impl Fields {
    /// Wraps an object; `file` names it in errors.
    pub fn new(map: Map<String, Value>, file: &str) -> Self {
        Self {
            map,
            file: file.to_string(),
        }
    }

    /// The whole object.
    pub fn map(&self) -> &Map<String, Value> {
        &self.map
    }

    /// The file name used in errors.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// A field's value; `null` counts as absent.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// The named error for `key` holding `found` where `expected` was wanted.
    pub fn type_error(&self, key: &str, expected: &'static str, found: &Value) -> ConfigError {
        ConfigError::FieldType {
            file: self.file.clone(),
            field: key.to_string(),
            expected,
            found: describe(found),
        }
    }

    /// A string field.
    pub fn str_field(&self, key: &str) -> Result<Option<&str>, ConfigError> {
        self.get(key)
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| self.type_error(key, "a string", v))
            })
            .transpose()
    }

    /// A non-negative integer field.
    pub fn u64_field(&self, key: &str) -> Result<Option<u64>, ConfigError> {
        self.get(key)
            .map(|v| {
                v.as_u64()
                    .ok_or_else(|| self.type_error(key, "a non-negative integer", v))
            })
            .transpose()
    }

    /// A number field (integers accepted).
    pub fn f64_field(&self, key: &str) -> Result<Option<f64>, ConfigError> {
        self.get(key)
            .map(|v| {
                v.as_f64()
                    .ok_or_else(|| self.type_error(key, "a number", v))
            })
            .transpose()
    }

    /// A boolean field.
    pub fn bool_field(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        self.get(key)
            .map(|v| {
                v.as_bool()
                    .ok_or_else(|| self.type_error(key, "a boolean", v))
            })
            .transpose()
    }

    /// A list-of-strings field.
    pub fn str_list_field(&self, key: &str) -> Result<Option<Vec<String>>, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        v.as_array()
            .and_then(|a| {
                a.iter()
                    .map(|x| x.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
            })
            .map(Some)
            .ok_or_else(|| self.type_error(key, "a list of strings", v))
    }

    /// A list-of-integers field.
    pub fn u64_list_field(&self, key: &str) -> Result<Option<Vec<u64>>, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        v.as_array()
            .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<_>>>())
            .map(Some)
            .ok_or_else(|| self.type_error(key, "a list of non-negative integers", v))
    }

    /// A token id field holding one id or a list of ids (normalised to a list).
    pub fn token_ids_field(&self, key: &str) -> Result<Option<Vec<u32>>, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let id = |x: &Value| x.as_u64().and_then(|n| u32::try_from(n).ok());
        let ids = match v {
            Value::Array(a) => a.iter().map(id).collect::<Option<Vec<_>>>(),
            other => id(other).map(|n| vec![n]),
        };
        ids.map(Some)
            .ok_or_else(|| self.type_error(key, "a token id (u32) or a list of token ids", v))
    }
}
