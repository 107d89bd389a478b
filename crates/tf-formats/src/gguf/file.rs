//! The GGUF container: header, metadata, tensor infos, and zero-copy tensor data views.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use super::dequant::dequantize;
use super::error::GgufError;
use super::reader::Cursor;
use super::types::{GgmlType, MetaValue};

/// `GGUF` as the first four bytes.
const MAGIC: [u8; 4] = *b"GGUF";
/// Data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The metadata key that overrides the alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// Most dimensions a ggml tensor may have.
pub const MAX_DIMS: u32 = 4;

/// One tensor's entry in the GGUF tensor-info table, validated against the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensorInfo {
    /// The tensor name.
    pub name: String,
    /// Its storage type.
    pub ty: GgmlType,
    /// Dimensions in GGUF order: `dims[0]` (ne[0]) is the innermost, contiguous one.
    pub dims: Vec<u64>,
    /// Absolute byte offset of its data in the file (data section start + stored offset).
    pub offset: u64,
    /// Bytes of data: `n_elements / block_size * type_size`.
    pub n_bytes: u64,
}

impl GgufTensorInfo {
    /// Number of elements (product of `dims`; 1 for a zero-dimensional tensor).
    pub fn n_elements(&self) -> u64 {
        // Validated at parse time not to overflow.
        self.dims.iter().product()
    }
}

/// The bytes behind a [`GgufFile`]: a read-only memory map or an owned buffer.
enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// A parsed, validated GGUF v2/v3 file whose tensor data are views into its bytes.
pub struct GgufFile {
    backing: Backing,
    version: u32,
    metadata: Vec<(String, MetaValue)>,
    meta_index: HashMap<String, usize>,
    alignment: u64,
    data_start: u64,
    tensors: Vec<GgufTensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("len", &self.backing.bytes().len())
            .field("metadata_keys", &self.metadata.len())
            .field("alignment", &self.alignment)
            .field("data_start", &self.data_start)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Memory-maps and parses the file at `path`.
    ///
    /// The map is read-only; as with any memory map, the file must not be truncated or
    /// rewritten by another process while this value lives.
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        if len < 16 {
            // Too small to map usefully (and empty maps are platform-dependent).
            return Self::from_bytes(std::fs::read(path)?);
        }
        // SAFETY: the map is read-only and private to this value; the documented contract
        // is that the file is not modified while it is mapped.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Self::from_backing(Backing::Mmap(map))
    }

    /// Parses a GGUF file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        Self::from_backing(Backing::Owned(bytes))
    }

    fn from_backing(backing: Backing) -> Result<GgufFile, GgufError> {
        let parsed = parse(backing.bytes())?;
        Ok(GgufFile {
            backing,
            version: parsed.version,
            metadata: parsed.metadata,
            meta_index: parsed.meta_index,
            alignment: parsed.alignment,
            data_start: parsed.data_start,
            tensors: parsed.tensors,
            tensor_index: parsed.tensor_index,
        })
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// All metadata key/value pairs in file order.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    /// The metadata value for `key`, if present.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// The data alignment: `general.alignment`, or 32 when absent.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute offset of the (aligned) start of the tensor data section.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    /// All tensor infos in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// The tensor info named `name`, if present.
    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of a tensor's data (zero-copy): `info.offset .. info.offset + info.n_bytes`.
    ///
    /// Infos from [`GgufFile::tensors`] always lie in the file; for a range outside it (an
    /// info from another file) this returns an empty slice rather than panicking.
    pub fn tensor_data(&self, info: &GgufTensorInfo) -> &[u8] {
        let range = usize::try_from(info.offset)
            .ok()
            .zip(usize::try_from(info.n_bytes).ok())
            .and_then(|(start, len)| Some(start..start.checked_add(len)?));
        range
            .and_then(|r| self.backing.bytes().get(r))
            .unwrap_or(&[])
    }

    /// A whole tensor dequantized to f32 by the reference dequantizer (see [`dequantize`]).
    pub fn dequantize_tensor(&self, info: &GgufTensorInfo) -> Result<Vec<f32>, GgufError> {
        let n = usize::try_from(info.n_elements()).map_err(|_| GgufError::ShapeOverflow {
            tensor: info.name.clone(),
            dims: info.dims.clone(),
        })?;
        dequantize(info.ty, self.tensor_data(info), n)
    }

    /// The whole file's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.backing.bytes()
    }
}

/// Everything parsed out of the bytes, before it is tied to its backing.
struct Parsed {
    version: u32,
    metadata: Vec<(String, MetaValue)>,
    meta_index: HashMap<String, usize>,
    alignment: u64,
    data_start: u64,
    tensors: Vec<GgufTensorInfo>,
    tensor_index: HashMap<String, usize>,
}

/// A tensor-info record as stored, before validation.
struct RawTensorInfo {
    name: String,
    dims: Vec<u64>,
    type_id: u32,
    rel_offset: u64,
}

fn parse(bytes: &[u8]) -> Result<Parsed, GgufError> {
    let mut cur = Cursor::new(bytes);
    if bytes.len() < 4 || bytes[..4] != MAGIC {
        return Err(GgufError::BadMagic {
            found: bytes[..bytes.len().min(4)].to_vec(),
        });
    }
    cur.take(4, || "magic".into())?;
    let version = cur.u32(|| "version".into())?;
    match version {
        2 | 3 => {}
        v if v & 0xffff == 0 && matches!(v.swap_bytes(), 1..=3) => {
            return Err(GgufError::BigEndian {
                version: v.swap_bytes(),
            })
        }
        v => return Err(GgufError::UnsupportedVersion { version: v }),
    }
    let tensor_count = cur.u64(|| "tensor count".into())?;
    let kv_count = cur.u64(|| "metadata key/value count".into())?;

    // A key/value pair needs at least 8 (key length) + 4 (type) + 1 bytes.
    let kv_count = checked_count(kv_count, 13, &cur, "metadata key/value count")?;
    let mut metadata = Vec::with_capacity(kv_count);
    let mut meta_index = HashMap::with_capacity(kv_count);
    for i in 0..kv_count {
        let key = cur.string(|| format!("metadata key #{i}"))?;
        let type_id = cur.u32(|| format!("value type of metadata key {key:?}"))?;
        let value = cur.meta_value(type_id, &key, 0)?;
        if meta_index.insert(key.clone(), metadata.len()).is_some() {
            return Err(GgufError::DuplicateKey { key });
        }
        metadata.push((key, value));
    }
    let alignment = match meta_index.get(ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some(&i) => alignment_value(&metadata[i].1)?,
    };

    // A tensor info needs at least 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset).
    let tensor_count = checked_count(tensor_count, 24, &cur, "tensor count")?;
    let mut raw = Vec::with_capacity(tensor_count);
    for i in 0..tensor_count {
        raw.push(read_tensor_info(&mut cur, i)?);
    }

    let file_len = bytes.len() as u64;
    let end_of_infos = cur.pos() as u64;
    // alignment <= 2^31 and end_of_infos <= file length, so this cannot overflow.
    let data_start = end_of_infos.div_ceil(alignment) * alignment;
    let tensors = validate_tensors(raw, alignment, data_start, file_len)?;
    let mut tensor_index = HashMap::with_capacity(tensors.len());
    for (i, t) in tensors.iter().enumerate() {
        if tensor_index.insert(t.name.clone(), i).is_some() {
            return Err(GgufError::DuplicateTensor {
                name: t.name.clone(),
            });
        }
    }
    check_overlaps(&tensors)?;
    Ok(Parsed {
        version,
        metadata,
        meta_index,
        alignment,
        data_start,
        tensors,
        tensor_index,
    })
}

/// A count of records each at least `min_size` bytes long, refused if they cannot fit.
fn checked_count(
    count: u64,
    min_size: usize,
    cur: &Cursor<'_>,
    what: &str,
) -> Result<usize, GgufError> {
    usize::try_from(count)
        .ok()
        .filter(|&c| c <= cur.remaining() / min_size)
        .ok_or_else(|| GgufError::Truncated {
            what: format!("{what} {count}"),
            offset: cur.pos() as u64,
        })
}

/// `general.alignment` as a power of two in 1..=2^31.
fn alignment_value(v: &MetaValue) -> Result<u64, GgufError> {
    let integer = !matches!(
        v,
        MetaValue::F32(_) | MetaValue::F64(_) | MetaValue::Bool(_)
    );
    match v.as_u64() {
        Some(a) if integer && a.is_power_of_two() && a <= 1 << 31 => Ok(a),
        _ => Err(GgufError::BadAlignment {
            value: format!("{v:?}"),
        }),
    }
}

fn read_tensor_info(cur: &mut Cursor<'_>, i: usize) -> Result<RawTensorInfo, GgufError> {
    let name = cur.string(|| format!("name of tensor #{i}"))?;
    let n_dims = cur.u32(|| format!("dimension count of tensor {name:?}"))?;
    if n_dims > MAX_DIMS {
        return Err(GgufError::TooManyDims {
            tensor: name,
            n_dims,
            max: MAX_DIMS,
        });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for d in 0..n_dims {
        dims.push(cur.u64(|| format!("dimension {d} of tensor {name:?}"))?);
    }
    let type_id = cur.u32(|| format!("type of tensor {name:?}"))?;
    let rel_offset = cur.u64(|| format!("data offset of tensor {name:?}"))?;
    Ok(RawTensorInfo {
        name,
        dims,
        type_id,
        rel_offset,
    })
}

fn validate_tensors(
    raw: Vec<RawTensorInfo>,
    alignment: u64,
    data_start: u64,
    file_len: u64,
) -> Result<Vec<GgufTensorInfo>, GgufError> {
    let mut out = Vec::with_capacity(raw.len());
    for r in raw {
        let ty = GgmlType::from_id(r.type_id).ok_or_else(|| GgufError::UnknownTensorType {
            tensor: r.name.clone(),
            type_id: r.type_id,
        })?;
        let n_elements = r.dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        let block = ty.block_size() as u64;
        let ne0 = r.dims.first().copied().unwrap_or(1);
        if ne0 % block != 0 {
            return Err(GgufError::ShapeNotBlockMultiple {
                tensor: r.name,
                ty,
                ne0,
                block_size: block,
            });
        }
        let n_bytes = n_elements.and_then(|n| (n / block).checked_mul(ty.type_size() as u64));
        let Some(n_bytes) = n_bytes else {
            return Err(GgufError::ShapeOverflow {
                tensor: r.name,
                dims: r.dims,
            });
        };
        if r.rel_offset % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                tensor: r.name,
                offset: r.rel_offset,
                alignment,
            });
        }
        let offset = data_start.saturating_add(r.rel_offset);
        if offset.checked_add(n_bytes).is_none_or(|end| end > file_len) {
            return Err(GgufError::TensorOutOfRange {
                tensor: r.name,
                offset,
                size: n_bytes,
                file_len,
            });
        }
        out.push(GgufTensorInfo {
            name: r.name,
            ty,
            dims: r.dims,
            offset,
            n_bytes,
        });
    }
    Ok(out)
}

/// Refuses tensors whose data ranges share a byte.
fn check_overlaps(tensors: &[GgufTensorInfo]) -> Result<(), GgufError> {
    let mut order: Vec<&GgufTensorInfo> = tensors.iter().filter(|t| t.n_bytes > 0).collect();
    order.sort_by_key(|t| (t.offset, t.n_bytes));
    // The tensor reaching furthest so far: any later start before its end overlaps it.
    let mut furthest: Option<&GgufTensorInfo> = None;
    for t in order {
        if let Some(f) = furthest {
            let f_end = f.offset + f.n_bytes;
            if t.offset < f_end {
                return Err(GgufError::OverlappingTensors {
                    a: f.name.clone(),
                    b: t.name.clone(),
                });
            }
        }
        if furthest.is_none_or(|f| t.offset + t.n_bytes > f.offset + f.n_bytes) {
            furthest = Some(t);
        }
    }
    Ok(())
}
