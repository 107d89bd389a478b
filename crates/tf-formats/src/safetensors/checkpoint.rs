//! Opening a safetensors checkpoint: one file, or a directory (sharded or single-file).

use super::header::{parse_header, Header};
use super::SafetensorsError;
use crate::dtype::DType;
use memmap2::Mmap;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Component, Path, PathBuf};

/// File name of the shard index in a checkpoint directory.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// File name of an unsharded checkpoint's weights in a checkpoint directory.
pub const SINGLE_FILE: &str = "model.safetensors";

/// Name, dtype, shape and shard of one stored tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafeTensorInfo {
    /// Tensor name as stored.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape, outermost dimension first.
    pub shape: Vec<u64>,
    /// Index into [`SafetensorsCheckpoint::files`] of the file holding it.
    pub shard: usize,
}

/// A zero-copy view of one tensor's bytes (little-endian, possibly unaligned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorView<'a> {
    /// Element type.
    pub dtype: DType,
    /// Shape, outermost dimension first.
    pub shape: &'a [u64],
    /// Raw little-endian element bytes.
    pub data: &'a [u8],
}

/// One mapped file and its validated header.
#[derive(Debug)]
struct Shard {
    map: Mmap,
    header: Header,
}

/// An opened safetensors checkpoint: one or more memory-mapped files with validated headers.
#[derive(Debug)]
pub struct SafetensorsCheckpoint {
    files: Vec<PathBuf>,
    shards: Vec<Shard>,
    infos: Vec<SafeTensorInfo>,
    /// name -> (index into `infos`, index into the shard header's tensors)
    by_name: HashMap<String, (usize, usize)>,
    index_metadata: Option<Map<String, Value>>,
}

impl SafetensorsCheckpoint {
    /// Opens a `.safetensors` file, or a directory holding `model.safetensors.index.json`
    /// (sharded) or `model.safetensors`.
    pub fn open(path: &Path) -> Result<Self, SafetensorsError> {
        if path.is_dir() {
            let index = path.join(INDEX_FILE);
            if index.is_file() {
                return Self::open_index(&index);
            }
            let single = path.join(SINGLE_FILE);
            if single.is_file() {
                return Self::open_files(vec![single], None);
            }
            return Err(SafetensorsError::NoSafetensors {
                dir: path.to_path_buf(),
            });
        }
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".index.json"))
        {
            return Self::open_index(path);
        }
        Self::open_files(vec![path.to_path_buf()], None)
    }

    /// Opens a sharded checkpoint from its index file; every shard and mapping is checked.
    fn open_index(index_path: &Path) -> Result<Self, SafetensorsError> {
        let io = |source| SafetensorsError::Io {
            path: index_path.to_path_buf(),
            source,
        };
        let bad = |reason: String| SafetensorsError::InvalidIndex {
            path: index_path.to_path_buf(),
            reason,
        };
        let text = std::fs::read(index_path).map_err(io)?;
        let value: Value = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
        let weight_map = value
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("missing \"weight_map\" object".into()))?;
        let mut expected: BTreeMap<String, String> = BTreeMap::new(); // tensor -> shard
        let mut shard_names: Vec<String> = Vec::new();
        for (tensor, shard) in weight_map {
            let shard = shard
                .as_str()
                .ok_or_else(|| bad(format!("weight_map value for {tensor:?} is not a string")))?;
            if !is_plain_relative(shard) {
                return Err(SafetensorsError::InvalidShardName {
                    tensor: tensor.clone(),
                    shard: shard.to_string(),
                });
            }
            if !shard_names.iter().any(|s| s == shard) {
                shard_names.push(shard.to_string());
            }
            expected.insert(tensor.clone(), shard.to_string());
        }
        shard_names.sort();
        let dir = index_path.parent().unwrap_or_else(|| Path::new("."));
        let mut files = Vec::with_capacity(shard_names.len());
        for shard in &shard_names {
            let path = dir.join(shard);
            if !path.is_file() {
                return Err(SafetensorsError::MissingShard {
                    shard: shard.clone(),
                    path,
                });
            }
            files.push(path);
        }
        let index_metadata = value.get("metadata").and_then(Value::as_object).cloned();
        let ckpt = Self::open_files(files, index_metadata)?;
        // Every shard tensor must be mapped to that shard, and every mapping must be present.
        for info in &ckpt.infos {
            let shard = &shard_names[info.shard];
            if expected.get(&info.name) != Some(shard) {
                return Err(SafetensorsError::UnindexedTensor {
                    tensor: info.name.clone(),
                    shard: shard.clone(),
                });
            }
        }
        for (tensor, shard) in &expected {
            if !ckpt.by_name.contains_key(tensor) {
                return Err(SafetensorsError::TensorMissingFromShard {
                    tensor: tensor.clone(),
                    shard: shard.clone(),
                });
            }
        }
        Ok(ckpt)
    }

    /// Maps and validates each file; tensor names must be unique across files.
    fn open_files(
        files: Vec<PathBuf>,
        index_metadata: Option<Map<String, Value>>,
    ) -> Result<Self, SafetensorsError> {
        let mut shards = Vec::with_capacity(files.len());
        let mut infos = Vec::new();
        let mut by_name = HashMap::new();
        for (shard_idx, path) in files.iter().enumerate() {
            let shard = map_file(path)?;
            for (i, t) in shard.header.tensors.iter().enumerate() {
                if by_name.insert(t.name.clone(), (infos.len(), i)).is_some() {
                    return Err(SafetensorsError::DuplicateTensor {
                        tensor: t.name.clone(),
                    });
                }
                infos.push(SafeTensorInfo {
                    name: t.name.clone(),
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                    shard: shard_idx,
                });
            }
            shards.push(shard);
        }
        Ok(Self {
            files,
            shards,
            infos,
            by_name,
            index_metadata,
        })
    }

    /// The files this checkpoint reads, in shard order.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// All tensors: shards in file-name order, tensors in data-offset order within a shard.
    pub fn tensors(&self) -> impl Iterator<Item = &SafeTensorInfo> + '_ {
        self.infos.iter()
    }

    /// All tensors as a slice, in the order of [`Self::tensors`].
    pub fn infos(&self) -> &[SafeTensorInfo] {
        &self.infos
    }

    /// All tensor names, in the order of [`Self::tensors`].
    pub fn tensor_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.infos.iter().map(|i| i.name.as_str())
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.infos.len()
    }

    /// Whether the checkpoint holds no tensors.
    pub fn is_empty(&self) -> bool {
        self.infos.is_empty()
    }

    /// Metadata about a tensor by name.
    pub fn info(&self, name: &str) -> Option<&SafeTensorInfo> {
        self.by_name.get(name).map(|&(i, _)| &self.infos[i])
    }

    /// A zero-copy view of a tensor's bytes.
    pub fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        let &(info_idx, header_idx) = self.by_name.get(name)?;
        let shard = &self.shards[self.infos[info_idx].shard];
        let t = &shard.header.tensors[header_idx];
        let data = shard.map.get(t.file_range(shard.header.data_start))?;
        Some(TensorView {
            dtype: t.dtype,
            shape: &t.shape,
            data,
        })
    }

    /// The `__metadata__` map of the first file (each shard may carry its own).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.shards.first().map_or(&EMPTY, |s| &s.header.metadata)
    }

    /// The `__metadata__` map of one shard.
    pub fn shard_metadata(&self, shard: usize) -> Option<&BTreeMap<String, String>> {
        self.shards.get(shard).map(|s| &s.header.metadata)
    }

    /// The `metadata` object of the shard index (e.g. `total_size`), when sharded.
    pub fn index_metadata(&self) -> Option<&Map<String, Value>> {
        self.index_metadata.as_ref()
    }
}

/// Whether a shard name is a relative path with no `..`, root or prefix components.
fn is_plain_relative(name: &str) -> bool {
    !name.is_empty()
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

fn map_file(path: &Path) -> Result<Shard, SafetensorsError> {
    let io = |source| SafetensorsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    if len < 8 {
        return Err(SafetensorsError::InFile {
            path: path.to_path_buf(),
            source: Box::new(SafetensorsError::TooShort { file_len: len }),
        });
    }
    // SAFETY: the map is read-only; as with any memory map, the file must not be truncated or
    // modified by another process while the checkpoint is open.
    let map = unsafe { Mmap::map(&file) }.map_err(io)?;
    let header = parse_header(&map).map_err(|e| SafetensorsError::InFile {
        path: path.to_path_buf(),
        source: Box::new(e),
    })?;
    Ok(Shard { map, header })
}
