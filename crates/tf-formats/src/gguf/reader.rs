//! A bounds-checked little-endian cursor and the GGUF metadata value reader.
//!
//! Every length or count is checked against the bytes that remain before anything is
//! allocated from it, so a hostile header can cost at most the file's own size in memory.

use super::error::GgufError;
use super::types::MetaValue;

/// Deepest nesting of metadata arrays accepted (arrays of arrays of ...).
pub const MAX_ARRAY_DEPTH: usize = 8;

/// GGUF metadata value type ids.
mod vt {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// The fewest bytes one value of a metadata type can occupy; `None` for unknown ids.
fn min_encoded_size(type_id: u32) -> Option<usize> {
    Some(match type_id {
        vt::U8 | vt::I8 | vt::BOOL => 1,
        vt::U16 | vt::I16 => 2,
        vt::U32 | vt::I32 | vt::F32 => 4,
        vt::U64 | vt::I64 | vt::F64 => 8,
        // a string is a u64 length then bytes
        vt::STRING => 8,
        // an array is a u32 element type then a u64 count
        vt::ARRAY => 12,
        _ => return None,
    })
}

/// A read position in a byte slice; every read is bounds-checked.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// The current offset.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left after the current offset.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Takes `n` bytes, or fails with `Truncated` naming `what()`.
    pub(crate) fn take(
        &mut self,
        n: usize,
        what: impl FnOnce() -> String,
    ) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.pos as u64,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Takes exactly `N` bytes as an array.
    fn array<const N: usize>(
        &mut self,
        what: impl FnOnce() -> String,
    ) -> Result<[u8; N], GgufError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// Reads a little-endian u32.
    pub(crate) fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    /// Reads a little-endian u64.
    pub(crate) fn u64(&mut self, what: impl FnOnce() -> String) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Reads a GGUF string (u64 length, UTF-8 bytes), checking the length first.
    pub(crate) fn string(&mut self, what: impl Fn() -> String) -> Result<String, GgufError> {
        let start = self.pos as u64;
        let len = self.u64(|| format!("length of {}", what()))?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= self.remaining())
            .ok_or_else(|| GgufError::Truncated {
                what: format!("{} ({len} bytes)", what()),
                offset: start,
            })?;
        let bytes_at = self.pos as u64;
        let bytes = self.take(len, &what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::InvalidUtf8 {
                what: what(),
                offset: bytes_at,
            }),
        }
    }

    /// Reads one metadata value of type `type_id` for `key`, arrays at nesting `depth`.
    pub(crate) fn meta_value(
        &mut self,
        type_id: u32,
        key: &str,
        depth: usize,
    ) -> Result<MetaValue, GgufError> {
        let what = || format!("value of metadata key {key:?}");
        Ok(match type_id {
            vt::U8 => MetaValue::U8(self.array::<1>(what)?[0]),
            vt::I8 => MetaValue::I8(i8::from_le_bytes(self.array(what)?)),
            vt::U16 => MetaValue::U16(u16::from_le_bytes(self.array(what)?)),
            vt::I16 => MetaValue::I16(i16::from_le_bytes(self.array(what)?)),
            vt::U32 => MetaValue::U32(u32::from_le_bytes(self.array(what)?)),
            vt::I32 => MetaValue::I32(i32::from_le_bytes(self.array(what)?)),
            vt::F32 => MetaValue::F32(f32::from_le_bytes(self.array(what)?)),
            vt::U64 => MetaValue::U64(u64::from_le_bytes(self.array(what)?)),
            vt::I64 => MetaValue::I64(i64::from_le_bytes(self.array(what)?)),
            vt::F64 => MetaValue::F64(f64::from_le_bytes(self.array(what)?)),
            vt::BOOL => match self.array::<1>(what)?[0] {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                value => {
                    return Err(GgufError::InvalidBool {
                        key: key.to_owned(),
                        value,
                    })
                }
            },
            vt::STRING => MetaValue::String(self.string(what)?),
            vt::ARRAY => self.meta_array(key, depth)?,
            _ => {
                return Err(GgufError::UnknownValueType {
                    key: key.to_owned(),
                    type_id,
                })
            }
        })
    }

    /// Reads an array body (element type, count, elements) for `key`.
    fn meta_array(&mut self, key: &str, depth: usize) -> Result<MetaValue, GgufError> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(GgufError::NestingTooDeep {
                key: key.to_owned(),
                max_depth: MAX_ARRAY_DEPTH,
            });
        }
        let elem_type = self.u32(|| format!("array element type of metadata key {key:?}"))?;
        let min_size = min_encoded_size(elem_type).ok_or_else(|| GgufError::UnknownValueType {
            key: key.to_owned(),
            type_id: elem_type,
        })?;
        let count_at = self.pos as u64;
        let count = self.u64(|| format!("array length of metadata key {key:?}"))?;
        // Each element needs at least `min_size` bytes: a count that cannot fit is refused
        // before anything is allocated from it.
        let count = usize::try_from(count)
            .ok()
            .filter(|&c| c <= self.remaining() / min_size)
            .ok_or_else(|| GgufError::Truncated {
                what: format!(
                    "array of {count} elements (type {elem_type}) of metadata key {key:?}"
                ),
                offset: count_at,
            })?;
        let mut items = Vec::with_capacity(count);
        for _ in 0..count {
            items.push(self.meta_value(elem_type, key, depth + 1)?);
        }
        Ok(MetaValue::Array(items))
    }
}
