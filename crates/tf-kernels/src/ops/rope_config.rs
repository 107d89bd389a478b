//! Reading a Hugging Face `rope_scaling` / `rope_parameters` object into a [`RopeScaling`].

use super::error::OpError;
use super::rope::RopeScaling;
use serde_json::Value;

fn num(obj: &Value, key: &'static str) -> Result<Option<f64>, OpError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or(OpError::RopeParam {
            param: key,
            value: f64::NAN,
            why: "must be a number",
        }),
    }
}

fn required(obj: &Value, key: &'static str) -> Result<f64, OpError> {
    num(obj, key)?.ok_or(OpError::RopeParam {
        param: key,
        value: f64::NAN,
        why: "is required for this rope_type",
    })
}

fn positions(v: f64, key: &'static str) -> Result<usize, OpError> {
    if v.is_finite() && v >= 1.0 && v.fract() == 0.0 {
        Ok(v as usize)
    } else {
        Err(OpError::RopeParam {
            param: key,
            value: v,
            why: "must be a positive integer",
        })
    }
}

impl RopeScaling {
    /// Parses config.json's `rope_scaling` (or `rope_parameters`) object; `null`/absent means
    /// `None`. `max_position_embeddings` is the config's top-level value (yarn's fallbacks).
    /// Unknown or unsupported types (`dynamic`, `longrope`, ...) are refused by name.
    pub fn from_hf_json(
        obj: Option<&Value>,
        max_position_embeddings: usize,
    ) -> Result<RopeScaling, OpError> {
        let obj = match obj {
            None | Some(Value::Null) => return Ok(RopeScaling::None),
            Some(o) => o,
        };
        let ty = obj
            .get("rope_type")
            .or_else(|| obj.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("default");
        match ty {
            "default" => Ok(RopeScaling::None),
            "linear" => Ok(RopeScaling::Linear {
                factor: required(obj, "factor")?,
            }),
            "llama3" => Ok(RopeScaling::Llama3 {
                factor: required(obj, "factor")?,
                low_freq_factor: required(obj, "low_freq_factor")?,
                high_freq_factor: required(obj, "high_freq_factor")?,
                original_max_position_embeddings: positions(
                    required(obj, "original_max_position_embeddings")?,
                    "original_max_position_embeddings",
                )?,
            }),
            "yarn" => {
                let orig = match num(obj, "original_max_position_embeddings")? {
                    Some(v) => positions(v, "original_max_position_embeddings")?,
                    None => max_position_embeddings,
                };
                // transformers: an absent factor is max_position_embeddings / original.
                let factor = match num(obj, "factor")? {
                    Some(f) => f,
                    None => max_position_embeddings as f64 / orig as f64,
                };
                let truncate = obj.get("truncate").and_then(Value::as_bool).unwrap_or(true);
                // transformers treats 0 / absent betas as their defaults (`or 32`, `or 1`).
                let beta = |k, d| -> Result<f64, OpError> {
                    Ok(num(obj, k)?.filter(|&b| b != 0.0).unwrap_or(d))
                };
                Ok(RopeScaling::Yarn {
                    factor,
                    beta_fast: beta("beta_fast", 32.0)?,
                    beta_slow: beta("beta_slow", 1.0)?,
                    mscale: num(obj, "mscale")?,
                    mscale_all_dim: num(obj, "mscale_all_dim")?,
                    attention_factor: num(obj, "attention_factor")?,
                    original_max_position_embeddings: orig,
                    truncate,
                })
            }
            other => Err(OpError::UnsupportedRopeType {
                rope_type: other.to_string(),
            }),
        }
    }
}
