//! One checkpoint, whatever its format: canonical tensor entries, config and data access.
//!
//! [`Checkpoint::open`] takes a `.gguf` file or a safetensors directory (Hugging Face or MLX
//! form, single or sharded). It exposes an HF-style `config.json` value (synthesized from the
//! metadata for GGUF), one [`TensorEntry`] per logical weight under canonical Hugging Face names
//! (GGUF names mapped, shapes reversed to `[out, in]`; MLX `weight/scales/biases` triplets
//! merged), and zero-copy [`TensorData`] views of each entry's bytes.
//!
//! [`Checkpoint::synthetic`] makes a checkpoint of entries without bytes (a config and the tensor
//! list a family expects): its weights are generated where they are used ([`synthetic`]).

pub mod synthetic;

use crate::dtype::DType;
use crate::gguf::{GgmlType, GgufError, GgufFile, MetaValue};
use crate::mlx_affine::{logical_entries, MlxError, QuantizationConfig};
use crate::safetensors::{SafetensorsCheckpoint, SafetensorsError};
use crate::weight::{TensorEntry, WeightFormat};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Why a checkpoint could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The path is neither a GGUF file nor a directory/file of safetensors with a config.json.
    #[error(
        "{path}: not a checkpoint (expected a .gguf file, or a directory with config.json and \
         model.safetensors or model.safetensors.index.json)"
    )]
    NotACheckpoint { path: PathBuf },
    /// config.json is not valid JSON (Python's Infinity/NaN tokens are accepted).
    #[error("{path}: config.json is not valid JSON: {reason}")]
    BadConfig { path: PathBuf, reason: String },
    /// The GGUF file was refused by the reader.
    #[error("GGUF: {0}")]
    Gguf(#[from] GgufError),
    /// The safetensors files were refused by the reader.
    #[error("safetensors: {0}")]
    Safetensors(#[from] SafetensorsError),
    /// The MLX quantization settings or triplets are inconsistent.
    #[error("MLX quantization: {0}")]
    Mlx(#[from] MlxError),
    /// Two GGUF tensors map to the same canonical name.
    #[error("GGUF tensors '{first}' and '{second}' both map to '{canonical}'")]
    DuplicateName {
        canonical: String,
        first: String,
        second: String,
    },
}

/// Which on-disk form a checkpoint has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CheckpointKind {
    /// A single GGUF file.
    Gguf,
    /// safetensors without MLX-quantized weights (Hugging Face form, or unquantized MLX).
    Safetensors,
    /// safetensors with MLX affine-quantized weights.
    MlxQuantized,
}

/// Zero-copy bytes of one logical weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorData<'a> {
    /// Plain little-endian elements.
    Dense { dtype: DType, bytes: &'a [u8] },
    /// GGUF/ggml blocks, in GGUF row order (innermost dimension contiguous).
    Gguf { ty: GgmlType, bytes: &'a [u8] },
    /// MLX affine: packed u32 words, per-group scales and biases.
    MlxAffine {
        weight: &'a [u8],
        scales: &'a [u8],
        biases: &'a [u8],
        bits: u8,
        group_size: u32,
        scales_dtype: DType,
    },
}

enum Source {
    Gguf {
        file: GgufFile,
        /// canonical name -> GGUF tensor name
        names: HashMap<String, String>,
    },
    Safetensors(SafetensorsCheckpoint),
    /// Entries without bytes; values come from [`synthetic`] under this seed.
    Synthetic {
        seed: u64,
    },
}

/// An opened checkpoint: config, canonical entries and data views.
pub struct Checkpoint {
    path: PathBuf,
    kind: CheckpointKind,
    config: Value,
    entries: Vec<TensorEntry>,
    by_name: HashMap<String, usize>,
    source: Source,
    gguf_rope_permuted: bool,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("path", &self.path)
            .field("kind", &self.kind)
            .field("entries", &self.entries.len())
            .field("gguf_rope_permuted", &self.gguf_rope_permuted)
            .finish()
    }
}

impl Checkpoint {
    /// Opens a `.gguf` file or a safetensors checkpoint (directory, or a `.safetensors` /
    /// `.index.json` file with config.json beside it).
    pub fn open(path: &Path) -> Result<Checkpoint, CheckpointError> {
        if path.is_file() && is_gguf(path)? {
            return open_gguf(path);
        }
        let dir = if path.is_dir() {
            Some(path)
        } else {
            path.parent()
        };
        let config_path = dir.map(|d| d.join("config.json"));
        match config_path {
            Some(c) if c.is_file() => open_safetensors(path, &c),
            _ => Err(CheckpointError::NotACheckpoint {
                path: path.to_path_buf(),
            }),
        }
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its on-disk form.
    pub fn kind(&self) -> CheckpointKind {
        self.kind
    }

    /// config.json (for GGUF, an HF-style config synthesized from the metadata).
    pub fn config(&self) -> &Value {
        &self.config
    }

    /// One entry per logical weight, under canonical Hugging Face names.
    pub fn entries(&self) -> &[TensorEntry] {
        &self.entries
    }

    /// The entry of a canonical name.
    pub fn entry(&self, name: &str) -> Option<&TensorEntry> {
        self.by_name.get(name).map(|&i| &self.entries[i])
    }

    /// Whether GGUF Q/K projection rows are stored permuted for llama.cpp's rope (pairs
    /// (2i, 2i+1) after the permutation = HF's (i, i + d/2) before it). Only GGUF `llama`.
    pub fn gguf_rope_permuted(&self) -> bool {
        self.gguf_rope_permuted
    }

    /// The GGUF file, for metadata readers (tokenizer, chat template); `None` for safetensors.
    pub fn gguf(&self) -> Option<&GgufFile> {
        match &self.source {
            Source::Gguf { file, .. } => Some(file),
            Source::Safetensors(_) | Source::Synthetic { .. } => None,
        }
    }

    /// The directory holding a safetensors checkpoint's side files (tokenizer.json, ...).
    pub fn dir(&self) -> Option<&Path> {
        match self.kind {
            _ if self.is_synthetic() => None,
            CheckpointKind::Gguf => None,
            _ if self.path.is_dir() => Some(&self.path),
            _ => self.path.parent(),
        }
    }

    /// Zero-copy bytes of a logical weight by canonical name.
    pub fn data(&self, name: &str) -> Option<TensorData<'_>> {
        let entry = self.entry(name)?;
        match (&self.source, entry.format) {
            (Source::Gguf { file, names }, WeightFormat::Gguf(ty)) => {
                let info = file.tensor(names.get(name)?)?;
                Some(TensorData::Gguf {
                    ty,
                    bytes: file.tensor_data(info),
                })
            }
            (Source::Safetensors(st), WeightFormat::Dense(dtype)) => Some(TensorData::Dense {
                dtype,
                bytes: st.tensor(name)?.data,
            }),
            (
                Source::Safetensors(st),
                WeightFormat::MlxAffine {
                    bits,
                    group_size,
                    scales,
                },
            ) => {
                let module = name.strip_suffix(".weight")?;
                Some(TensorData::MlxAffine {
                    weight: st.tensor(name)?.data,
                    scales: st.tensor(&format!("{module}.scales"))?.data,
                    biases: st.tensor(&format!("{module}.biases"))?.data,
                    bits,
                    group_size,
                    scales_dtype: scales,
                })
            }
            _ => None,
        }
    }
}

/// The path a synthetic checkpoint reports.
pub const SYNTHETIC_PATH: &str = "<synthetic>";

impl Checkpoint {
    /// A synthetic checkpoint: `config` and `entries` (canonical names, shapes, formats) with no
    /// bytes on the host. [`data`](Self::data) returns `None` for every entry; a backend fills
    /// each tensor from [`synthetic`] under `seed`. Its kind is the on-disk form its formats
    /// imitate (MLX-quantized, GGUF or safetensors). Refuses two entries of one name.
    pub fn synthetic(
        config: Value,
        entries: Vec<TensorEntry>,
        seed: u64,
    ) -> Result<Checkpoint, CheckpointError> {
        let by_name = index_entries(&entries);
        if by_name.len() != entries.len() {
            let mut seen = std::collections::HashSet::new();
            if let Some(dup) = entries.iter().find(|e| !seen.insert(e.name.as_str())) {
                return Err(CheckpointError::DuplicateName {
                    canonical: dup.name.clone(),
                    first: dup.name.clone(),
                    second: dup.name.clone(),
                });
            }
        }
        let has = |f: fn(&WeightFormat) -> bool| entries.iter().any(|e| f(&e.format));
        let kind = if has(|f| matches!(f, WeightFormat::MlxAffine { .. })) {
            CheckpointKind::MlxQuantized
        } else if has(|f| matches!(f, WeightFormat::Gguf(_))) {
            CheckpointKind::Gguf
        } else {
            CheckpointKind::Safetensors
        };
        Ok(Checkpoint {
            path: PathBuf::from(SYNTHETIC_PATH),
            kind,
            config,
            by_name,
            entries,
            source: Source::Synthetic { seed },
            gguf_rope_permuted: false,
        })
    }

    /// Whether the checkpoint is synthetic (entries without bytes).
    pub fn is_synthetic(&self) -> bool {
        matches!(self.source, Source::Synthetic { .. })
    }

    /// The seed of a synthetic checkpoint's generator; `None` for a checkpoint with bytes.
    pub fn synthetic_seed(&self) -> Option<u64> {
        match self.source {
            Source::Synthetic { seed } => Some(seed),
            _ => None,
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether a file starts with the GGUF magic.
fn is_gguf(path: &Path) -> Result<bool, CheckpointError> {
    let mut magic = [0u8; 4];
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    match f.read_exact(&mut magic) {
        Ok(()) => Ok(&magic == b"GGUF"),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(io(path)(e)),
    }
}

fn index_entries(entries: &[TensorEntry]) -> HashMap<String, usize> {
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.name.clone(), i))
        .collect()
}

fn open_safetensors(path: &Path, config_path: &Path) -> Result<Checkpoint, CheckpointError> {
    let text = std::fs::read_to_string(config_path).map_err(io(config_path))?;
    let config = parse_config_json(&text).map_err(|reason| CheckpointError::BadConfig {
        path: config_path.to_path_buf(),
        reason,
    })?;
    let st = SafetensorsCheckpoint::open(path)?;
    let qcfg = QuantizationConfig::from_config(&config)?;
    let entries = logical_entries(st.infos(), qcfg.as_ref())?;
    let quantized = entries
        .iter()
        .any(|e| matches!(e.format, WeightFormat::MlxAffine { .. }));
    Ok(Checkpoint {
        path: path.to_path_buf(),
        kind: if quantized {
            CheckpointKind::MlxQuantized
        } else {
            CheckpointKind::Safetensors
        },
        config,
        by_name: index_entries(&entries),
        entries,
        source: Source::Safetensors(st),
        gguf_rope_permuted: false,
    })
}

/// Parses config.json, first turning Python's bare `Infinity`, `-Infinity` and `NaN` (which
/// `json.dumps` writes, e.g. in `time_step_limit`) into ±1e308 and null.
pub fn parse_config_json(text: &str) -> Result<Value, String> {
    let mut out = String::with_capacity(text.len());
    let (mut in_str, mut escaped) = (false, false);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_str {
            in_str = escaped || c != '"';
            escaped = !escaped && c == '\\';
        } else if c == '"' {
            in_str = true;
        } else {
            let swap = [
                ("-Infinity", "-1e308"),
                ("Infinity", "1e308"),
                ("NaN", "null"),
            ]
            .into_iter()
            .find(|(token, _)| rest.starts_with(token));
            if let Some((token, value)) = swap {
                out.push_str(value);
                rest = &rest[token.len()..];
                continue;
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    serde_json::from_str(&out).map_err(|e| e.to_string())
}

fn open_gguf(path: &Path) -> Result<Checkpoint, CheckpointError> {
    let file = GgufFile::open(path)?;
    let arch = file
        .get("general.architecture")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string();
    let mut entries = Vec::with_capacity(file.tensors().len());
    let mut names: HashMap<String, String> = HashMap::new();
    for t in file.tensors() {
        let canonical = gguf_canonical_name(&t.name);
        if let Some(first) = names.insert(canonical.clone(), t.name.clone()) {
            return Err(CheckpointError::DuplicateName {
                canonical,
                first,
                second: t.name.clone(),
            });
        }
        let shape = t.dims.iter().rev().copied().collect();
        entries.push(TensorEntry {
            name: canonical,
            format: WeightFormat::Gguf(t.ty),
            shape,
        });
    }
    let config = gguf_config(&file, &arch, &names);
    Ok(Checkpoint {
        path: path.to_path_buf(),
        kind: CheckpointKind::Gguf,
        config,
        by_name: index_entries(&entries),
        entries,
        source: Source::Gguf { file, names },
        // convert_hf_to_gguf permutes Q/K rows for llama only (qwen2/qwen3 use NEOX rope).
        gguf_rope_permuted: arch == "llama",
    })
}

/// Maps a GGUF (llama.cpp) tensor name to its Hugging Face name; unknown names are kept.
pub fn gguf_canonical_name(name: &str) -> String {
    match name {
        "token_embd.weight" => return "model.embed_tokens.weight".into(),
        "output_norm.weight" => return "model.norm.weight".into(),
        "output.weight" => return "lm_head.weight".into(),
        _ => {}
    }
    let Some(rest) = name.strip_prefix("blk.") else {
        return name.into();
    };
    let Some((layer, tail)) = rest.split_once('.') else {
        return name.into();
    };
    if layer.parse::<u32>().is_err() {
        return name.into();
    }
    let Some((module, param)) = tail.rsplit_once('.') else {
        return name.into();
    };
    let hf = match module {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return name.into(),
    };
    format!("model.layers.{layer}.{hf}.{param}")
}

/// Synthesizes an HF-style config.json from GGUF metadata; absent keys are left out (so the
/// family's planner names what is missing).
fn gguf_config(file: &GgufFile, arch: &str, names: &HashMap<String, String>) -> Value {
    let key = |k: &str| file.get(&format!("{arch}.{k}"));
    let uint = |v: Option<&MetaValue>| v.and_then(|v| v.as_u64()).map(Value::from);
    let float = |v: Option<&MetaValue>| v.and_then(|v| v.as_f64()).map(Value::from);
    let mut c = Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            c.insert(k.into(), v);
        }
    };
    put("model_type", Some(json!(arch)));
    put("hidden_size", uint(key("embedding_length")));
    put("num_hidden_layers", uint(key("block_count")));
    put("intermediate_size", uint(key("feed_forward_length")));
    put("num_attention_heads", uint(key("attention.head_count")));
    put("num_key_value_heads", uint(key("attention.head_count_kv")));
    put("head_dim", uint(key("attention.key_length")));
    put(
        "rms_norm_eps",
        float(key("attention.layer_norm_rms_epsilon")),
    );
    put("rope_theta", float(key("rope.freq_base")));
    put("max_position_embeddings", uint(key("context_length")));
    let vocab = file
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .map(|a| json!(a.len()))
        .or_else(|| uint(key("vocab_size")));
    put("vocab_size", vocab);
    put(
        "tie_word_embeddings",
        Some(json!(!names.contains_key("lm_head.weight"))),
    );
    if arch == "llama" && names.contains_key("model.layers.0.self_attn.q_proj.bias") {
        put("attention_bias", Some(json!(true)));
    }
    put(
        "bos_token_id",
        uint(file.get("tokenizer.ggml.bos_token_id")),
    );
    put(
        "eos_token_id",
        uint(file.get("tokenizer.ggml.eos_token_id")),
    );
    if let Some(kind) = key("rope.scaling.type").and_then(|v| v.as_str()) {
        if kind != "none" {
            let mut s = Map::new();
            s.insert("rope_type".into(), json!(kind));
            if let Some(f) = float(key("rope.scaling.factor")) {
                s.insert("factor".into(), f);
            }
            if let Some(n) = uint(key("rope.scaling.original_context_length")) {
                s.insert("original_max_position_embeddings".into(), n);
            }
            put("rope_scaling", Some(Value::Object(s)));
        }
    }
    Value::Object(c)
}
