//! The safetensors header: an 8-byte little-endian length, a JSON object, then the data bytes.
//! Every check on the layout lives here so that a fuzz target can reach all of them.

use super::SafetensorsError;
use crate::dtype::DType;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::fmt;

/// The largest header accepted (the reference implementation's limit as well).
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// One tensor as the header describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderTensor {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape, outermost dimension first.
    pub shape: Vec<u64>,
    /// Byte range `[begin, end)` relative to the start of the data section.
    pub data_offsets: (u64, u64),
}

impl HeaderTensor {
    /// Byte range of this tensor within the whole file.
    pub fn file_range(&self, data_start: u64) -> std::ops::Range<usize> {
        (data_start + self.data_offsets.0) as usize..(data_start + self.data_offsets.1) as usize
    }
}

/// A parsed and validated safetensors header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The `__metadata__` map (empty when absent).
    pub metadata: BTreeMap<String, String>,
    /// Tensors in file order (by data offset).
    pub tensors: Vec<HeaderTensor>,
    /// Offset of the data section in the file (8 + header length).
    pub data_start: u64,
    /// Length of the data section in bytes.
    pub data_len: u64,
}

/// Parses and validates the header of a whole safetensors file held in `bytes`.
///
/// Checks: the length prefix fits the file, the header is a JSON object with well-formed
/// entries and no duplicate names, every dtype is known, every tensor's byte length equals
/// its element count times the dtype size, offsets lie inside the data section, and tensors
/// tile the data section exactly (no overlap, no gap, no trailing bytes).
pub fn parse_header(bytes: &[u8]) -> Result<Header, SafetensorsError> {
    let file_len = bytes.len() as u64;
    let prefix: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or(SafetensorsError::TooShort { file_len })?;
    let header_len = u64::from_le_bytes(prefix);
    if header_len > MAX_HEADER_LEN {
        return Err(SafetensorsError::HeaderTooLarge {
            header_len,
            limit: MAX_HEADER_LEN,
        });
    }
    let data_start = 8 + header_len;
    if data_start > file_len {
        return Err(SafetensorsError::HeaderLengthPastEnd {
            header_len,
            file_len,
        });
    }
    let json = &bytes[8..data_start as usize];
    let raw: RawHeader =
        serde_json::from_slice(json).map_err(|e| SafetensorsError::HeaderNotJson {
            reason: e.to_string(),
        })?;
    let data_len = file_len - data_start;

    let mut metadata = BTreeMap::new();
    let mut tensors = Vec::with_capacity(raw.0.len());
    let mut seen = HashSet::new();
    for (name, value) in raw.0 {
        if !seen.insert(name.clone()) {
            return Err(SafetensorsError::DuplicateTensor { tensor: name });
        }
        if name == "__metadata__" {
            // mx.save_safetensors writes `null` when it has no metadata.
            if !value.is_null() {
                metadata = parse_metadata(value)?;
            }
        } else {
            tensors.push(parse_entry(name, &value, data_len)?);
        }
    }
    check_tiling(&mut tensors, data_len)?;
    Ok(Header {
        metadata,
        tensors,
        data_start,
        data_len,
    })
}

/// The header's top-level entries in file order, so duplicates can be reported.
struct RawHeader(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for RawHeader {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawHeader;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawHeader, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    entries.push(entry);
                }
                Ok(RawHeader(entries))
            }
        }
        d.deserialize_map(V)
    }
}

fn parse_metadata(value: Value) -> Result<BTreeMap<String, String>, SafetensorsError> {
    let Value::Object(map) = value else {
        return Err(SafetensorsError::InvalidMetadata {
            reason: "not a JSON object".into(),
        });
    };
    map.into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            other => Err(SafetensorsError::InvalidMetadata {
                reason: format!("value of {k:?} is {other}, not a string"),
            }),
        })
        .collect()
}

fn invalid(tensor: &str, reason: impl Into<String>) -> SafetensorsError {
    SafetensorsError::InvalidTensorEntry {
        tensor: tensor.to_string(),
        reason: reason.into(),
    }
}

fn parse_entry(
    name: String,
    value: &Value,
    data_len: u64,
) -> Result<HeaderTensor, SafetensorsError> {
    let obj = value
        .as_object()
        .ok_or_else(|| invalid(&name, "entry is not a JSON object"))?;
    let dtype_name = obj
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(&name, "missing or non-string \"dtype\""))?;
    let dtype =
        DType::from_safetensors_name(dtype_name).ok_or_else(|| SafetensorsError::UnknownDtype {
            tensor: name.clone(),
            dtype: dtype_name.to_string(),
        })?;
    let shape = obj
        .get("shape")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(&name, "missing or non-array \"shape\""))?
        .iter()
        .map(Value::as_u64)
        .collect::<Option<Vec<u64>>>()
        .ok_or_else(|| {
            invalid(
                &name,
                "\"shape\" holds a value that is not a non-negative integer",
            )
        })?;
    let offsets = obj
        .get("data_offsets")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(&name, "missing or non-array \"data_offsets\""))?;
    let (begin, end) = match offsets.as_slice() {
        [b, e] => match (b.as_u64(), e.as_u64()) {
            (Some(b), Some(e)) => (b, e),
            _ => {
                return Err(invalid(
                    &name,
                    "\"data_offsets\" are not non-negative integers",
                ))
            }
        },
        _ => {
            return Err(invalid(
                &name,
                "\"data_offsets\" must hold exactly two integers",
            ))
        }
    };
    if begin > end {
        return Err(SafetensorsError::OffsetsReversed {
            tensor: name,
            begin,
            end,
        });
    }
    if end > data_len {
        return Err(SafetensorsError::OffsetsOutOfRange {
            tensor: name,
            begin,
            end,
            data_len,
        });
    }
    let expected = shape
        .iter()
        .try_fold(dtype.size() as u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| SafetensorsError::ShapeOverflow {
            tensor: name.clone(),
            shape: shape.clone(),
        })?;
    if expected != end - begin {
        return Err(SafetensorsError::DataLengthMismatch {
            tensor: name,
            dtype,
            shape,
            expected,
            found: end - begin,
        });
    }
    Ok(HeaderTensor {
        name,
        dtype,
        shape,
        data_offsets: (begin, end),
    })
}

/// Sorts tensors by offset and checks that they cover `[0, data_len)` exactly once.
fn check_tiling(tensors: &mut [HeaderTensor], data_len: u64) -> Result<(), SafetensorsError> {
    tensors.sort_by(|a, b| {
        a.data_offsets
            .cmp(&b.data_offsets)
            .then_with(|| a.name.cmp(&b.name))
    });
    let mut cursor = 0u64;
    let mut previous: Option<&HeaderTensor> = None;
    for t in tensors.iter() {
        let (begin, end) = t.data_offsets;
        if begin < cursor {
            let first = previous.map(|p| p.name.clone()).unwrap_or_default();
            return Err(SafetensorsError::Overlapping {
                first,
                first_end: cursor,
                second: t.name.clone(),
                second_begin: begin,
            });
        }
        if begin > cursor {
            return Err(SafetensorsError::NonContiguous {
                after: previous.map(|p| p.name.clone()),
                gap_begin: cursor,
                gap_end: begin,
            });
        }
        cursor = end;
        previous = Some(t);
    }
    if cursor != data_len {
        return Err(SafetensorsError::TrailingData {
            used: cursor,
            data_len,
        });
    }
    Ok(())
}
