//! The packed weight matrix: a zero-copy view of a `[rows, cols]` weight in its stored form.

use tf_formats::gguf::GgmlType;
use tf_formats::DType;

/// Errors from building a [`PackedMatrix`] or calling [`crate::matmul::matmul`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatmulError {
    /// The weight's storage format has no kernel here.
    #[error("matmul: unsupported weight format {format}")]
    UnsupportedFormat { format: String },
    /// A byte buffer has the wrong length for the declared shape.
    #[error("matmul: {what} holds {got} bytes, the shape [{rows}, {cols}] needs {want}")]
    BadLength {
        what: &'static str,
        rows: usize,
        cols: usize,
        want: usize,
        got: usize,
    },
    /// The column count is not a whole number of quantization blocks/groups.
    #[error("matmul: {cols} columns is not a multiple of the block/group size {block}")]
    RaggedColumns { cols: usize, block: usize },
    /// An activation or output buffer does not match `n` and the weight shape.
    #[error("matmul: {what} has {got} elements, expected {want}")]
    BadBuffer {
        what: &'static str,
        want: usize,
        got: usize,
    },
    /// A row index past the end of the matrix.
    #[error("matmul: row {row} out of range for a matrix of {rows} rows")]
    RowOutOfRange { row: usize, rows: usize },
    /// The bf16-activation variant needs AVX-512 with AVX512_BF16.
    #[error("matmul: the bf16-activation variant needs AVX512_BF16, which this CPU lacks")]
    Bf16Unsupported,
    /// The requested SIMD level cannot run on this CPU.
    #[error("matmul: SIMD level {0:?} is not supported by this CPU")]
    LevelUnsupported(crate::matmul::SimdLevel),
}

/// Element type of a dense weight or of MLX scales/biases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FloatType {
    /// IEEE binary32, little-endian.
    F32,
    /// IEEE binary16, little-endian.
    F16,
    /// bfloat16, little-endian.
    BF16,
}

impl FloatType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            FloatType::F32 => 4,
            FloatType::F16 | FloatType::BF16 => 2,
        }
    }

    /// Maps a checkpoint dtype; `None` for non-float or f64 types.
    pub fn from_dtype(d: DType) -> Option<FloatType> {
        match d {
            DType::F32 => Some(FloatType::F32),
            DType::F16 => Some(FloatType::F16),
            DType::BF16 => Some(FloatType::BF16),
            _ => None,
        }
    }

    /// Reads element `i` of a little-endian buffer as f32 (exact widening). Panics if out of
    /// range: callers index within validated buffers.
    #[inline(always)]
    pub fn read(self, bytes: &[u8], i: usize) -> f32 {
        match self {
            FloatType::F32 => f32::from_le_bytes([
                bytes[4 * i],
                bytes[4 * i + 1],
                bytes[4 * i + 2],
                bytes[4 * i + 3],
            ]),
            FloatType::F16 => f16_to_f32(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])),
            FloatType::BF16 => bf16_to_f32(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])),
        }
    }
}

/// IEEE half bits to f32 (exact).
#[inline(always)]
pub fn f16_to_f32(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// bfloat16 bits to f32 (exact).
#[inline(always)]
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// The stored bytes of a weight matrix, borrowed (typically from a memory map).
#[derive(Debug, Clone, Copy)]
pub enum WeightData<'a> {
    /// Plain floats, row-major `[rows, cols]`.
    Dense { ty: FloatType, bytes: &'a [u8] },
    /// A ggml block format, rows of `cols / block_size` blocks. Supported: Q4_0, Q4_1, Q8_0,
    /// Q4_K, Q6_K (GGUF F32/F16/BF16 are turned into `Dense` by [`PackedMatrix::gguf`]).
    Gguf { ty: GgmlType, bytes: &'a [u8] },
    /// MLX affine quantization: `words` is the u32 array `[rows, cols * bits / 32]`, `scales`
    /// and `biases` are `[rows, cols / group_size]` of `scale_ty`.
    MlxAffine {
        bits: u8,
        group_size: usize,
        scale_ty: FloatType,
        words: &'a [u8],
        scales: &'a [u8],
        biases: &'a [u8],
    },
}

/// A `[rows, cols]` weight matrix (`rows` = output features, `cols` = input features) in its
/// packed form; `y = x · Wᵀ`.
#[derive(Debug, Clone, Copy)]
pub struct PackedMatrix<'a> {
    rows: usize,
    cols: usize,
    data: WeightData<'a>,
}

fn check_len(
    what: &'static str,
    rows: usize,
    cols: usize,
    want: usize,
    got: usize,
) -> Result<(), MatmulError> {
    if want != got {
        return Err(MatmulError::BadLength {
            what,
            rows,
            cols,
            want,
            got,
        });
    }
    Ok(())
}

impl<'a> PackedMatrix<'a> {
    /// Validates the buffers against the shape and wraps them (no copy).
    pub fn new(rows: usize, cols: usize, data: WeightData<'a>) -> Result<Self, MatmulError> {
        match data {
            WeightData::Dense { ty, bytes } => check_len(
                "dense weight",
                rows,
                cols,
                rows * cols * ty.size(),
                bytes.len(),
            )?,
            WeightData::Gguf { ty, bytes } => {
                if !matches!(
                    ty,
                    GgmlType::Q4_0
                        | GgmlType::Q4_1
                        | GgmlType::Q8_0
                        | GgmlType::Q4K
                        | GgmlType::Q6K
                ) {
                    return Err(MatmulError::UnsupportedFormat {
                        format: format!("GGUF {ty:?}"),
                    });
                }
                let bs = ty.block_size();
                if !cols.is_multiple_of(bs) {
                    return Err(MatmulError::RaggedColumns { cols, block: bs });
                }
                check_len(
                    "GGUF blocks",
                    rows,
                    cols,
                    rows * (cols / bs) * ty.type_size(),
                    bytes.len(),
                )?
            }
            WeightData::MlxAffine {
                bits,
                group_size,
                scale_ty,
                words,
                scales,
                biases,
            } => {
                if !(2..=8).contains(&bits) || bits == 7 {
                    return Err(MatmulError::UnsupportedFormat {
                        format: format!("MLX affine {bits}-bit"),
                    });
                }
                if group_size == 0
                    || !cols.is_multiple_of(group_size)
                    || !(cols * bits as usize).is_multiple_of(32)
                {
                    return Err(MatmulError::RaggedColumns {
                        cols,
                        block: group_size.max(1),
                    });
                }
                check_len(
                    "MLX words",
                    rows,
                    cols,
                    rows * cols * bits as usize / 8,
                    words.len(),
                )?;
                let sl = rows * (cols / group_size) * scale_ty.size();
                check_len("MLX scales", rows, cols, sl, scales.len())?;
                check_len("MLX biases", rows, cols, sl, biases.len())?;
            }
        }
        Ok(PackedMatrix { rows, cols, data })
    }

    /// A GGUF tensor of ggml type `ty`, shape `[rows, cols]` (GGUF lists it as `[cols, rows]`).
    pub fn gguf(
        ty: GgmlType,
        rows: usize,
        cols: usize,
        bytes: &'a [u8],
    ) -> Result<Self, MatmulError> {
        let data = match ty {
            GgmlType::F32 => WeightData::Dense {
                ty: FloatType::F32,
                bytes,
            },
            GgmlType::F16 => WeightData::Dense {
                ty: FloatType::F16,
                bytes,
            },
            GgmlType::BF16 => WeightData::Dense {
                ty: FloatType::BF16,
                bytes,
            },
            _ => WeightData::Gguf { ty, bytes },
        };
        Self::new(rows, cols, data)
    }

    /// A dense safetensors weight of dtype `dtype`.
    pub fn dense(
        dtype: DType,
        rows: usize,
        cols: usize,
        bytes: &'a [u8],
    ) -> Result<Self, MatmulError> {
        let ty = FloatType::from_dtype(dtype).ok_or_else(|| MatmulError::UnsupportedFormat {
            format: format!("dense {dtype}"),
        })?;
        Self::new(rows, cols, WeightData::Dense { ty, bytes })
    }

    /// Output features (weight rows).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features (weight columns).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The stored data.
    pub fn data(&self) -> &WeightData<'a> {
        &self.data
    }

    /// Bytes of packed storage (what one pass over the weight reads).
    pub fn storage_bytes(&self) -> usize {
        match self.data {
            WeightData::Dense { bytes, .. } | WeightData::Gguf { bytes, .. } => bytes.len(),
            WeightData::MlxAffine {
                words,
                scales,
                biases,
                ..
            } => words.len() + scales.len() + biases.len(),
        }
    }
}
