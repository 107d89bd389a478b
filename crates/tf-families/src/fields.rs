//! Typed reads of config.json fields that turn absence or a wrong type into named refusals.

use crate::refusal::Refusal;
use serde_json::{Map, Value};

/// A JSON object of config fields, read with refusals instead of panics.
#[derive(Clone, Copy)]
pub(crate) struct Fields<'a> {
    obj: &'a Map<String, Value>,
    /// Prefix for field names in refusals ("text_config.", "block_configs[3].").
    prefix: &'a str,
}

impl<'a> Fields<'a> {
    /// Wraps a JSON object; refuses anything else.
    pub fn new(value: &'a Value, what: &str) -> Result<Fields<'a>, Refusal> {
        match value.as_object() {
            Some(obj) => Ok(Fields { obj, prefix: "" }),
            None => Err(Refusal::bad(what, "is not a JSON object")),
        }
    }

    /// Wraps an object whose fields are named with `prefix` in refusals.
    pub fn with_prefix(obj: &'a Map<String, Value>, prefix: &'a str) -> Fields<'a> {
        Fields { obj, prefix }
    }

    fn name(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// The raw value, treating JSON null as absent.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }

    /// A required non-negative integer.
    pub fn u64(&self, key: &str) -> Result<u64, Refusal> {
        self.opt_u64(key)?.ok_or_else(|| Refusal::MissingField {
            field: self.name(key),
        })
    }

    /// A required positive integer.
    pub fn pos(&self, key: &str) -> Result<u64, Refusal> {
        let v = self.u64(key)?;
        if v == 0 {
            return Err(Refusal::bad(self.name(key), "must be positive, found 0"));
        }
        Ok(v)
    }

    /// An optional non-negative integer (integral floats such as 4.0 are accepted).
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>, Refusal> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        if let Some(n) = v.as_u64() {
            return Ok(Some(n));
        }
        match v.as_f64() {
            Some(f) if f >= 0.0 && f.fract() == 0.0 && f < 9.0e15 => Ok(Some(f as u64)),
            _ => Err(Refusal::bad(
                self.name(key),
                format!("expected a non-negative integer, found {v}"),
            )),
        }
    }

    /// A required number.
    pub fn f64(&self, key: &str) -> Result<f64, Refusal> {
        self.opt_f64(key)?.ok_or_else(|| Refusal::MissingField {
            field: self.name(key),
        })
    }

    /// An optional number.
    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>, Refusal> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        v.as_f64()
            .map(Some)
            .ok_or_else(|| Refusal::bad(self.name(key), format!("expected a number, found {v}")))
    }

    /// An optional finite positive number.
    pub fn opt_pos_f64(&self, key: &str) -> Result<Option<f64>, Refusal> {
        match self.opt_f64(key)? {
            Some(f) if !(f.is_finite() && f > 0.0) => Err(Refusal::bad(
                self.name(key),
                format!("must be a positive number, found {f}"),
            )),
            other => Ok(other),
        }
    }

    /// An optional bool.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, Refusal> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        v.as_bool().map(Some).ok_or_else(|| {
            Refusal::bad(self.name(key), format!("expected true or false, found {v}"))
        })
    }

    /// An optional string.
    pub fn opt_str(&self, key: &str) -> Result<Option<&'a str>, Refusal> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        v.as_str()
            .map(Some)
            .ok_or_else(|| Refusal::bad(self.name(key), format!("expected a string, found {v}")))
    }

    /// A token id or list of token ids (as eos_token_id may be either).
    pub fn token_ids(&self, key: &str) -> Result<Vec<u32>, Refusal> {
        let Some(v) = self.get(key) else {
            return Ok(Vec::new());
        };
        let bad = || {
            Refusal::bad(
                self.name(key),
                format!("expected a token id or a list of them, found {v}"),
            )
        };
        let one = |x: &Value| x.as_u64().and_then(|n| u32::try_from(n).ok());
        match v {
            Value::Array(items) => items.iter().map(|x| one(x).ok_or_else(bad)).collect(),
            _ => one(v).map(|n| vec![n]).ok_or_else(bad),
        }
    }

    /// An optional list of numbers.
    pub fn opt_f64_list(&self, key: &str) -> Result<Option<Vec<f64>>, Refusal> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let bad = || {
            Refusal::bad(
                self.name(key),
                format!("expected a list of numbers, found {v}"),
            )
        };
        let items = v.as_array().ok_or_else(bad)?;
        items
            .iter()
            .map(|x| x.as_f64().ok_or_else(bad))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// An optional list of strings.
    pub fn opt_str_list(&self, key: &str) -> Result<Option<Vec<&'a str>>, Refusal> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let bad = || {
            Refusal::bad(
                self.name(key),
                format!("expected a list of strings, found {v}"),
            )
        };
        let items = v.as_array().ok_or_else(bad)?;
        items
            .iter()
            .map(|x| x.as_str().ok_or_else(bad))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}
