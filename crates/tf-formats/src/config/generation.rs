//! generation_config.json: the checkpoint's default sampling settings.

use super::{parse_object, read_optional, ConfigError, Fields, GENERATION_CONFIG_FILE};
use serde_json::{Map, Value};
use std::path::Path;

/// Keys this reader types; everything else is kept in [`GenerationConfig::extra`].
const KNOWN: [&str; 12] = [
    "eos_token_id",
    "bos_token_id",
    "pad_token_id",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "max_new_tokens",
    "max_length",
    "do_sample",
    "transformers_version",
];

/// generation_config.json; every field optional.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GenerationConfig {
    /// End-of-sequence ids (one id in the file becomes a list of one).
    pub eos_token_id: Option<Vec<u32>>,
    /// Beginning-of-sequence id.
    pub bos_token_id: Option<u32>,
    /// Padding id (a list in the file keeps its first id).
    pub pad_token_id: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Nucleus sampling mass.
    pub top_p: Option<f64>,
    /// Top-k cutoff.
    pub top_k: Option<u64>,
    /// Min-p cutoff.
    pub min_p: Option<f64>,
    /// Repetition penalty.
    pub repetition_penalty: Option<f64>,
    /// Maximum new tokens.
    pub max_new_tokens: Option<u64>,
    /// Maximum total length (prompt + new tokens).
    pub max_length: Option<u64>,
    /// Whether sampling (rather than greedy decoding) is the default.
    pub do_sample: Option<bool>,
    /// `transformers_version`, informational.
    pub transformers_version: Option<String>,
    /// Every other field, unchanged.
    pub extra: Map<String, Value>,
}

impl GenerationConfig {
    /// Parses generation_config.json bytes; `file` names the source in errors.
    pub fn from_slice(bytes: &[u8], file: &str) -> Result<Self, ConfigError> {
        let f = Fields::new(parse_object(bytes, file)?, file);
        let one_id = |key: &str| -> Result<Option<u32>, ConfigError> {
            Ok(f.token_ids_field(key)?.and_then(|ids| ids.first().copied()))
        };
        let extra = f
            .map()
            .iter()
            .filter(|(k, _)| !KNOWN.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()));
        Ok(Self {
            eos_token_id: f.token_ids_field("eos_token_id")?,
            bos_token_id: one_id("bos_token_id")?,
            pad_token_id: one_id("pad_token_id")?,
            temperature: f.f64_field("temperature")?,
            top_p: f.f64_field("top_p")?,
            top_k: f.u64_field("top_k")?,
            min_p: f.f64_field("min_p")?,
            repetition_penalty: f.f64_field("repetition_penalty")?,
            max_new_tokens: f.u64_field("max_new_tokens")?,
            max_length: f.u64_field("max_length")?,
            do_sample: f.bool_field("do_sample")?,
            transformers_version: f.str_field("transformers_version")?.map(str::to_owned),
            extra: extra.collect(),
        })
    }

    /// Reads a generation_config.json file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let bytes = std::fs::read(path).map_err(|source| ConfigError::Io {
            file: path.to_path_buf(),
            source,
        })?;
        Self::from_slice(&bytes, &path.display().to_string())
    }

    /// Reads `dir/generation_config.json`, `Ok(None)` when the file is absent.
    pub fn from_dir(dir: &Path) -> Result<Option<Self>, ConfigError> {
        let path = dir.join(GENERATION_CONFIG_FILE);
        read_optional(&path)?
            .map(|b| Self::from_slice(&b, &path.display().to_string()))
            .transpose()
    }
}
