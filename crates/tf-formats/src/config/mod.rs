//! config.json, generation_config.json and tokenizer_config.json.
//!
//! Thin readers: each keeps the raw JSON and checks the types of the fields it exposes, so a
//! wrong type is a named error at load time (naming the file and the field). Families parse
//! their own typed configs from [`ModelConfig::raw`] with the `*_field` helpers. A JSON
//! `null` counts as absent.

mod fields;
mod generation;
mod tokenizer;

pub use fields::Fields;
pub use generation::GenerationConfig;
pub use tokenizer::{
    ChatTemplate, NamedTemplate, SpecialToken, TokenizerConfig, CHAT_TEMPLATE_FILE,
};

use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// File name of the model config in a checkpoint directory.
pub const CONFIG_FILE: &str = "config.json";
/// File name of the generation defaults in a checkpoint directory.
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";
/// File name of the tokenizer settings in a checkpoint directory.
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";

/// A config file that cannot be read or does not have the expected shape.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but cannot be read.
    #[error("{file}: {source}")]
    Io {
        file: PathBuf,
        source: std::io::Error,
    },
    /// The bytes are not JSON.
    #[error("{file}: not valid JSON: {reason}")]
    Json { file: String, reason: String },
    /// The top level is not a JSON object.
    #[error("{file}: expected a JSON object at the top level")]
    NotObject { file: String },
    /// A field has the wrong type or an out-of-range value.
    #[error("{file}: field {field:?}: expected {expected}, found {found}")]
    FieldType {
        file: String,
        field: String,
        expected: &'static str,
        found: String,
    },
}

/// Reads a JSON object from bytes; `file` names the source in errors.
pub(crate) fn parse_object(bytes: &[u8], file: &str) -> Result<Map<String, Value>, ConfigError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| ConfigError::Json {
        file: file.to_string(),
        reason: e.to_string(),
    })?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(ConfigError::NotObject {
            file: file.to_string(),
        }),
    }
}

/// Reads a file's bytes, `Ok(None)` when it does not exist.
pub(crate) fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, ConfigError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Io {
            file: path.to_path_buf(),
            source,
        }),
    }
}

/// A model's config.json: the raw JSON plus checked accessors for the common fields.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    fields: Fields,
    model_type: Option<String>,
    architectures: Vec<String>,
}

impl ModelConfig {
    /// Parses config.json bytes; `file` names the source in errors.
    pub fn from_slice(bytes: &[u8], file: &str) -> Result<Self, ConfigError> {
        Self::from_map(parse_object(bytes, file)?, file)
    }

    /// Wraps an already parsed JSON value; `file` names the source in errors.
    pub fn from_value(value: Value, file: &str) -> Result<Self, ConfigError> {
        match value {
            Value::Object(map) => Self::from_map(map, file),
            _ => Err(ConfigError::NotObject {
                file: file.to_string(),
            }),
        }
    }

    fn from_map(map: Map<String, Value>, file: &str) -> Result<Self, ConfigError> {
        let fields = Fields::new(map, file);
        let model_type = fields.str_field("model_type")?.map(str::to_owned);
        let architectures = fields.str_list_field("architectures")?.unwrap_or_default();
        for key in [
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "intermediate_size",
            "max_position_embeddings",
            "head_dim",
        ] {
            fields.u64_field(key)?;
        }
        for key in ["rms_norm_eps", "rope_theta"] {
            fields.f64_field(key)?;
        }
        fields.bool_field("tie_word_embeddings")?;
        fields.str_field("torch_dtype")?;
        fields.str_field("dtype")?;
        Ok(Self {
            fields,
            model_type,
            architectures,
        })
    }

    /// Reads a config.json file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let bytes = std::fs::read(path).map_err(|source| ConfigError::Io {
            file: path.to_path_buf(),
            source,
        })?;
        Self::from_slice(&bytes, &path.display().to_string())
    }

    /// Reads `dir/config.json`, `Ok(None)` when the file is absent.
    pub fn from_dir(dir: &Path) -> Result<Option<Self>, ConfigError> {
        let path = dir.join(CONFIG_FILE);
        read_optional(&path)?
            .map(|b| Self::from_slice(&b, &path.display().to_string()))
            .transpose()
    }

    /// The whole config as JSON (an object).
    pub fn raw(&self) -> &Map<String, Value> {
        self.fields.map()
    }

    /// Typed field access with named errors, for families' own fields.
    pub fn fields(&self) -> &Fields {
        &self.fields
    }

    /// `model_type`.
    pub fn model_type(&self) -> Option<&str> {
        self.model_type.as_deref()
    }

    /// `architectures` (empty when absent).
    pub fn architectures(&self) -> &[String] {
        &self.architectures
    }

    /// `vocab_size`.
    pub fn vocab_size(&self) -> Option<u64> {
        self.checked_u64("vocab_size")
    }

    /// `hidden_size`.
    pub fn hidden_size(&self) -> Option<u64> {
        self.checked_u64("hidden_size")
    }

    /// `num_hidden_layers`.
    pub fn num_hidden_layers(&self) -> Option<u64> {
        self.checked_u64("num_hidden_layers")
    }

    /// `num_attention_heads`.
    pub fn num_attention_heads(&self) -> Option<u64> {
        self.checked_u64("num_attention_heads")
    }

    /// `num_key_value_heads`.
    pub fn num_key_value_heads(&self) -> Option<u64> {
        self.checked_u64("num_key_value_heads")
    }

    /// `intermediate_size`.
    pub fn intermediate_size(&self) -> Option<u64> {
        self.checked_u64("intermediate_size")
    }

    /// `max_position_embeddings`.
    pub fn max_position_embeddings(&self) -> Option<u64> {
        self.checked_u64("max_position_embeddings")
    }

    /// `head_dim`.
    pub fn head_dim(&self) -> Option<u64> {
        self.checked_u64("head_dim")
    }

    /// `rms_norm_eps`.
    pub fn rms_norm_eps(&self) -> Option<f64> {
        self.fields.f64_field("rms_norm_eps").ok().flatten()
    }

    /// `rope_theta`.
    pub fn rope_theta(&self) -> Option<f64> {
        self.fields.f64_field("rope_theta").ok().flatten()
    }

    /// `torch_dtype` (or the newer `dtype` key), e.g. "bfloat16".
    pub fn torch_dtype(&self) -> Option<&str> {
        let get = |k| self.fields.str_field(k).ok().flatten();
        get("torch_dtype").or_else(|| get("dtype"))
    }

    /// `tie_word_embeddings`.
    pub fn tie_word_embeddings(&self) -> Option<bool> {
        self.fields.bool_field("tie_word_embeddings").ok().flatten()
    }

    /// MLX quantization settings (`quantization` or `quantization_config`), if any.
    pub fn quantization(
        &self,
    ) -> Result<Option<crate::mlx_affine::QuantizationConfig>, crate::mlx_affine::MlxError> {
        crate::mlx_affine::QuantizationConfig::from_config_map(self.raw())
    }

    /// A field validated at load time (its type error would have been reported then).
    fn checked_u64(&self, key: &str) -> Option<u64> {
        self.fields.u64_field(key).ok().flatten()
    }
}

/// The optional JSON files of a checkpoint directory, each `None` when absent.
#[derive(Debug, Clone, Default)]
pub struct CheckpointConfigs {
    /// config.json.
    pub model: Option<ModelConfig>,
    /// generation_config.json.
    pub generation: Option<GenerationConfig>,
    /// tokenizer_config.json.
    pub tokenizer: Option<TokenizerConfig>,
}

impl CheckpointConfigs {
    /// Reads whichever of the three files `dir` holds.
    pub fn from_dir(dir: &Path) -> Result<Self, ConfigError> {
        Ok(Self {
            model: ModelConfig::from_dir(dir)?,
            generation: GenerationConfig::from_dir(dir)?,
            tokenizer: TokenizerConfig::from_dir(dir)?,
        })
    }
}
