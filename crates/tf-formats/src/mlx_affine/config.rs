//! Quantization settings from config.json: the default spec and per-module overrides.

use super::MlxError;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Bit widths this reader supports.
pub const SUPPORTED_BITS: [u8; 6] = [2, 3, 4, 5, 6, 8];
/// Group sizes this reader supports.
pub const SUPPORTED_GROUP_SIZES: [u32; 3] = [32, 64, 128];

/// mx.quantize's default group size, used when config.json omits it.
const DEFAULT_GROUP_SIZE: u64 = 64;
/// mx.quantize's default bit width, used when config.json omits it.
const DEFAULT_BITS: u64 = 4;

/// Bit width and group size of one quantized module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuantSpec {
    /// Bits per value: 2, 3, 4, 5, 6 or 8.
    pub bits: u8,
    /// Values per scale/bias pair: 32, 64 or 128.
    pub group_size: u32,
}

impl QuantSpec {
    /// A validated spec.
    pub fn new(bits: u64, group_size: u64) -> Result<Self, MlxError> {
        let bits = u8::try_from(bits)
            .ok()
            .filter(|b| SUPPORTED_BITS.contains(b))
            .ok_or(MlxError::UnsupportedBits { bits })?;
        let group_size = u32::try_from(group_size)
            .ok()
            .filter(|g| SUPPORTED_GROUP_SIZES.contains(g))
            .ok_or(MlxError::UnsupportedGroupSize { group_size })?;
        Ok(Self { bits, group_size })
    }

    /// Packed u32 words holding `cols` values, when that is a whole number.
    pub fn packed_cols(self, cols: u64) -> Option<u64> {
        let bits_total = cols.checked_mul(self.bits as u64)?;
        (bits_total % 32 == 0).then_some(bits_total / 32)
    }

    /// Logical columns held by `packed_cols` u32 words, when that is a whole number.
    pub fn logical_cols(self, packed_cols: u64) -> Option<u64> {
        let bits_total = packed_cols.checked_mul(32)?;
        (bits_total % self.bits as u64 == 0).then_some(bits_total / self.bits as u64)
    }
}

/// MLX quantization settings from config.json: a default spec and per-module overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantizationConfig {
    /// The spec of any quantized module without an override.
    pub default: QuantSpec,
    /// Module path -> its own spec, or `None` where the override is `false` (left dense).
    pub overrides: BTreeMap<String, Option<QuantSpec>>,
}

impl QuantizationConfig {
    /// Reads `quantization` (or else `quantization_config`) from a config.json value.
    ///
    /// Returns `Ok(None)` when neither key is present. Missing `bits`/`group_size` take
    /// mx.quantize's defaults (4 and 64). A `quantization_config` naming a `quant_method`
    /// (gptq, awq, fp8, ...) and any mode other than "affine" are refused by name.
    pub fn from_config(config_json: &Value) -> Result<Option<Self>, MlxError> {
        match config_json {
            Value::Object(map) => Self::from_config_map(map),
            _ => Ok(None),
        }
    }

    /// [`Self::from_config`] on the config's top-level object.
    pub fn from_config_map(config: &Map<String, Value>) -> Result<Option<Self>, MlxError> {
        let (key, q) = match (
            config.get("quantization"),
            config.get("quantization_config"),
        ) {
            (Some(q), _) => ("quantization", q),
            (None, Some(q)) => ("quantization_config", q),
            (None, None) => return Ok(None),
        };
        let obj = q
            .as_object()
            .ok_or_else(|| MlxError::InvalidQuantizationConfig {
                key: key.to_string(),
                reason: "not a JSON object".into(),
            })?;
        if let Some(method) = obj.get("quant_method") {
            let method = method.as_str().unwrap_or("<non-string>").to_string();
            return Err(MlxError::UnsupportedQuantMethod { method });
        }
        let default = parse_spec(key, obj)?;
        let mut overrides = BTreeMap::new();
        for (module, value) in obj {
            if matches!(module.as_str(), "group_size" | "bits" | "mode") {
                continue;
            }
            let spec = match value {
                Value::Bool(false) => None,
                Value::Object(o) => Some(parse_spec(module, o)?),
                other => {
                    return Err(MlxError::InvalidQuantizationConfig {
                        key: module.clone(),
                        reason: format!("override must be an object or false, found {other}"),
                    })
                }
            };
            overrides.insert(module.clone(), spec);
        }
        Ok(Some(Self { default, overrides }))
    }

    /// The spec for a module path (e.g. `model.layers.0.mlp.down_proj`, without `.weight`):
    /// its override, or the default; `None` when the override is `false`.
    pub fn spec_for(&self, module_path: &str) -> Option<QuantSpec> {
        match self.overrides.get(module_path) {
            Some(spec) => *spec,
            None => Some(self.default),
        }
    }
}

fn parse_spec(key: &str, obj: &Map<String, Value>) -> Result<QuantSpec, MlxError> {
    let field = |name: &str, default: u64| -> Result<u64, MlxError> {
        match obj.get(name) {
            None => Ok(default),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| MlxError::InvalidQuantizationConfig {
                    key: format!("{key}.{name}"),
                    reason: format!("expected a non-negative integer, found {v}"),
                }),
        }
    };
    if let Some(mode) = obj.get("mode") {
        match mode.as_str() {
            Some("affine") => {}
            Some(other) => {
                return Err(MlxError::UnsupportedMode {
                    mode: other.to_string(),
                })
            }
            None => {
                return Err(MlxError::InvalidQuantizationConfig {
                    key: format!("{key}.mode"),
                    reason: format!("expected a string, found {mode}"),
                })
            }
        }
    }
    QuantSpec::new(
        field("bits", DEFAULT_BITS)?,
        field("group_size", DEFAULT_GROUP_SIZE)?,
    )
}
