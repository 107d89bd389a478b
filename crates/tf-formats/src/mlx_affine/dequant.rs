//! Unpacking and the reference dequantizer, bit for bit equal to `mx.dequantize` (CPU).

use super::{MlxError, QuantSpec};
use crate::dtype::DType;
use half::{bf16, f16};

/// Per-group scales or biases: the raw little-endian bytes of one float dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupParams<'a> {
    dtype: DType,
    bytes: &'a [u8],
}

impl<'a> GroupParams<'a> {
    /// Wraps raw bytes of F32, F16 or BF16 values (`what` names them in errors).
    pub fn new(what: &'static str, dtype: DType, bytes: &'a [u8]) -> Result<Self, MlxError> {
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(MlxError::ParamDtype { what, dtype });
        }
        if bytes.len() % dtype.size() != 0 {
            return Err(MlxError::LengthMismatch {
                what,
                expected: bytes.len() / dtype.size() * dtype.size(),
                found: bytes.len(),
            });
        }
        Ok(Self { dtype, bytes })
    }

    /// The element dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.bytes.len() / self.dtype.size()
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Value `i` widened to f32 (exact), or `None` past the end.
    pub fn get(&self, i: usize) -> Option<f32> {
        let n = self.dtype.size();
        let b = self.bytes.get(i * n..i * n + n)?;
        Some(match self.dtype {
            DType::BF16 => bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
            DType::F16 => f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
            _ => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        })
    }

    /// A sub-range of values `[start, start + len)`.
    fn slice(&self, start: usize, len: usize) -> Option<GroupParams<'a>> {
        let n = self.dtype.size();
        let bytes = self.bytes.get(start * n..(start + len) * n)?;
        Some(GroupParams {
            dtype: self.dtype,
            bytes,
        })
    }
}

/// Copies little-endian bytes (e.g. a U32 safetensors view, possibly unaligned) into words.
pub fn words_from_le_bytes(bytes: &[u8]) -> Result<Vec<u32>, MlxError> {
    if bytes.len() % 4 != 0 {
        return Err(MlxError::LengthMismatch {
            what: "packed bytes (multiple of 4)",
            expected: bytes.len() / 4 * 4,
            found: bytes.len(),
        });
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Value `j` of a row's little-endian bit stream of `bits`-bit values, or `None` past the end.
pub fn unpack_value(bits: u8, packed: &[u32], j: usize) -> Option<u8> {
    let start = j.checked_mul(bits as usize)?;
    let (word, shift) = (start / 32, start % 32);
    let lo = (*packed.get(word)? as u64) >> shift;
    let hi = if shift + bits as usize > 32 {
        (*packed.get(word + 1)? as u64) << (32 - shift)
    } else {
        0
    };
    Some(((lo | hi) & ((1u64 << bits) - 1)) as u8)
}

/// All `packed.len() * 32 / bits` values of a row's bit stream.
pub fn unpack(bits: u8, packed: &[u32]) -> Vec<u8> {
    let count = packed.len() * 32 / bits.max(1) as usize;
    (0..count)
        .filter_map(|j| unpack_value(bits, packed, j))
        .collect()
}

/// Rounds an f32 to the nearest value of `dtype` (ties to even), returned widened to f32.
/// F32 (and any non-16-bit dtype) is returned unchanged.
pub fn round_to(dtype: DType, x: f32) -> f32 {
    match dtype {
        DType::BF16 => bf16::from_f32(x).to_f32(),
        DType::F16 => f16::from_f32(x).to_f32(),
        _ => x,
    }
}

/// One dequantized value as `mx.dequantize` computes it: `T(T(q * scale) + bias)`, where
/// `T` is the scales' dtype and each operation is rounded to `T` (ties to even).
///
/// On the CPU, mx.dequantize (0.32.4) casts the unpacked integers to the scales' dtype,
/// multiplies by the scales and adds the biases as two separate element-wise ops in that
/// dtype, then casts to the requested output dtype. So:
/// - BF16 scales: two bf16 roundings, `bf16(bf16(scale*q) + bias)`; a single rounding of an
///   f32 fma differs for a large share of values.
/// - F16 scales: the same with f16 roundings.
/// - F32 scales: `(scale*q) + bias` in f32, two f32 roundings, no fused multiply-add.
///
/// Computing each op in f32 and rounding once to bf16/f16 equals the correctly rounded
/// narrow op (the product of two narrow values is exact in f32, and f32 has at least
/// 2p+2 bits for a narrow format of p bits, so double rounding of the sum is innocuous).
pub fn dequantize_value(q: u8, scale: f32, bias: f32, dtype: DType) -> f32 {
    let scaled = round_to(dtype, scale * q as f32);
    round_to(dtype, scaled + bias)
}

/// Dequantizes one row of `cols` values into `out`; `scales`/`biases` hold this row's groups.
pub fn dequantize_row(
    spec: QuantSpec,
    packed: &[u32],
    scales: GroupParams<'_>,
    biases: GroupParams<'_>,
    out: &mut [f32],
) -> Result<(), MlxError> {
    let cols = out.len();
    let words = spec
        .packed_cols(cols as u64)
        .ok_or(MlxError::LengthMismatch {
            what: "row length (whole u32 words)",
            expected: cols,
            found: cols,
        })? as usize;
    check_len("packed words per row", words, packed.len())?;
    if cols % spec.group_size as usize != 0 {
        return Err(MlxError::LengthMismatch {
            what: "row length (multiple of group size)",
            expected: cols / spec.group_size as usize * spec.group_size as usize,
            found: cols,
        });
    }
    let groups = cols / spec.group_size as usize;
    check_len("scales per row", groups, scales.len())?;
    check_len("biases per row", groups, biases.len())?;
    if scales.dtype() != biases.dtype() {
        return Err(MlxError::ParamDtypeMismatch {
            scales: scales.dtype(),
            biases: biases.dtype(),
        });
    }
    let dtype = scales.dtype();
    for (j, o) in out.iter_mut().enumerate() {
        let g = j / spec.group_size as usize;
        let (Some(q), Some(s), Some(b)) = (
            unpack_value(spec.bits, packed, j),
            scales.get(g),
            biases.get(g),
        ) else {
            return Err(MlxError::LengthMismatch {
                what: "row data",
                expected: cols,
                found: j,
            });
        };
        *o = dequantize_value(q, s, b, dtype);
    }
    Ok(())
}

/// Dequantizes a `[rows, cols]` matrix (rows = `packed.len() / (cols * bits / 32)`), then casts
/// to `out_dtype` like `mx.dequantize(..., dtype=out_dtype)`. Values are returned as f32,
/// each exactly representable in `out_dtype`. See [`dequantize_value`] for the rounding.
pub fn dequantize(
    spec: QuantSpec,
    cols: usize,
    packed: &[u32],
    scales: GroupParams<'_>,
    biases: GroupParams<'_>,
    out_dtype: DType,
) -> Result<Vec<f32>, MlxError> {
    if !out_dtype.is_float() {
        return Err(MlxError::ParamDtype {
            what: "output",
            dtype: out_dtype,
        });
    }
    let words =
        spec.packed_cols(cols as u64)
            .filter(|&w| w > 0)
            .ok_or(MlxError::LengthMismatch {
                what: "columns (whole u32 words)",
                expected: cols,
                found: cols,
            })? as usize;
    if packed.len() % words != 0 {
        return Err(MlxError::LengthMismatch {
            what: "packed words (whole rows)",
            expected: packed.len() / words * words,
            found: packed.len(),
        });
    }
    let rows = packed.len() / words;
    let groups = cols / spec.group_size as usize;
    check_len("scales", rows * groups, scales.len())?;
    check_len("biases", rows * groups, biases.len())?;
    let mut out = vec![0f32; rows * cols];
    for (r, row) in out.chunks_exact_mut(cols).enumerate() {
        let s = scales.slice(r * groups, groups);
        let b = biases.slice(r * groups, groups);
        let (Some(s), Some(b)) = (s, b) else {
            return Err(MlxError::LengthMismatch {
                what: "scales/biases rows",
                expected: rows,
                found: r,
            });
        };
        dequantize_row(spec, &packed[r * words..(r + 1) * words], s, b, row)?;
        for v in row.iter_mut() {
            *v = round_to(out_dtype, *v);
        }
    }
    Ok(out)
}

fn check_len(what: &'static str, expected: usize, found: usize) -> Result<(), MlxError> {
    if expected == found {
        Ok(())
    } else {
        Err(MlxError::LengthMismatch {
            what,
            expected,
            found,
        })
    }
}
