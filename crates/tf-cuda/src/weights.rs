//! Weight matrices on the device, uploaded in their packed (quantized) layouts unchanged.

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use cudarc::driver::CudaSlice;
use tf_formats::gguf::GgmlType;
use tf_kernels::matmul::{FloatType, PackedMatrix, WeightData};

/// A weight storage format with GPU kernels (the numbering matches `FMT_*` in common.cuh).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuFormat {
    /// Dense f32.
    F32 = 0,
    /// Dense IEEE half.
    F16 = 1,
    /// Dense bfloat16.
    Bf16 = 2,
    /// GGUF Q4_0 blocks (18 bytes per 32 weights).
    Q4_0 = 3,
    /// GGUF Q4_1 blocks (20 bytes per 32 weights).
    Q4_1 = 4,
    /// GGUF Q8_0 blocks (34 bytes per 32 weights).
    Q8_0 = 5,
}

impl GpuFormat {
    /// The format of a packed CPU matrix, or `UnsupportedFormat`.
    pub fn of(m: &PackedMatrix) -> Result<GpuFormat> {
        match *m.data() {
            WeightData::Dense { ty, .. } => Ok(match ty {
                FloatType::F32 => GpuFormat::F32,
                FloatType::F16 => GpuFormat::F16,
                FloatType::BF16 => GpuFormat::Bf16,
            }),
            WeightData::Gguf { ty, .. } => match ty {
                GgmlType::Q4_0 => Ok(GpuFormat::Q4_0),
                GgmlType::Q4_1 => Ok(GpuFormat::Q4_1),
                GgmlType::Q8_0 => Ok(GpuFormat::Q8_0),
                other => Err(CudaError::UnsupportedFormat {
                    format: format!("GGUF {other:?}"),
                }),
            },
            WeightData::MlxAffine { bits, .. } => Err(CudaError::UnsupportedFormat {
                format: format!("MLX affine {bits}-bit"),
            }),
        }
    }

    /// The matmul kernel's name.
    pub fn matmul_kernel(self) -> &'static str {
        match self {
            GpuFormat::F32 => "tf_matmul_f32",
            GpuFormat::F16 => "tf_matmul_f16",
            GpuFormat::Bf16 => "tf_matmul_bf16",
            GpuFormat::Q4_0 => "tf_matmul_q4_0",
            GpuFormat::Q4_1 => "tf_matmul_q4_1",
            GpuFormat::Q8_0 => "tf_matmul_q8_0",
        }
    }

    /// The format's name in kernel names (`q4_1`, `bf16`, ...).
    pub fn kernel_tag(self) -> &'static str {
        match self {
            GpuFormat::F32 => "f32",
            GpuFormat::F16 => "f16",
            GpuFormat::Bf16 => "bf16",
            GpuFormat::Q4_0 => "q4_0",
            GpuFormat::Q4_1 => "q4_1",
            GpuFormat::Q8_0 => "q8_0",
        }
    }

    /// Bytes of one stored row of `cols` elements.
    pub fn row_bytes(self, cols: usize) -> usize {
        match self {
            GpuFormat::F32 => cols * 4,
            GpuFormat::F16 | GpuFormat::Bf16 => cols * 2,
            GpuFormat::Q4_0 => cols / 32 * 18,
            GpuFormat::Q4_1 => cols / 32 * 20,
            GpuFormat::Q8_0 => cols / 32 * 34,
        }
    }

    /// The embedding kernel's name.
    pub fn embed_kernel(self) -> &'static str {
        match self {
            GpuFormat::F32 => "tf_embed_f32",
            GpuFormat::F16 => "tf_embed_f16",
            GpuFormat::Bf16 => "tf_embed_bf16",
            GpuFormat::Q4_0 => "tf_embed_q4_0",
            GpuFormat::Q4_1 => "tf_embed_q4_1",
            GpuFormat::Q8_0 => "tf_embed_q8_0",
        }
    }
}

/// A `[rows, cols]` weight matrix in device memory, in the checkpoint's own bytes.
pub struct GpuMatrix {
    rows: usize,
    cols: usize,
    format: GpuFormat,
    bytes: CudaSlice<u8>,
}

impl GpuMatrix {
    /// Uploads a packed CPU matrix unchanged (no dequantization).
    pub fn upload(gpu: &Gpu, m: &PackedMatrix) -> Result<GpuMatrix> {
        let format = GpuFormat::of(m)?;
        let host: &[u8] = match *m.data() {
            WeightData::Dense { bytes, .. } | WeightData::Gguf { bytes, .. } => bytes,
            WeightData::MlxAffine { bits, .. } => {
                return Err(CudaError::UnsupportedFormat {
                    format: format!("MLX affine {bits}-bit"),
                })
            }
        };
        if m.rows() > i32::MAX as usize || m.cols() > i32::MAX as usize {
            return Err(CudaError::Shape {
                op: "weight upload",
                detail: format!("shape [{}, {}] exceeds i32 indexing", m.rows(), m.cols()),
            });
        }
        Ok(GpuMatrix {
            rows: m.rows(),
            cols: m.cols(),
            format,
            bytes: gpu.upload(host)?,
        })
    }

    /// Uploads several matrices with the same format and width as one matrix whose rows are
    /// theirs in order (a fused [q | k | v] or [gate | up] projection: each output row keeps its
    /// own bytes, so its arithmetic is unchanged).
    pub fn concat(gpu: &Gpu, parts: &[PackedMatrix]) -> Result<GpuMatrix> {
        let first = parts.first().ok_or_else(|| CudaError::Shape {
            op: "weight concat",
            detail: "no matrices".into(),
        })?;
        let format = GpuFormat::of(first)?;
        let cols = first.cols();
        let mut host = Vec::new();
        let mut rows = 0;
        for m in parts {
            if GpuFormat::of(m)? != format || m.cols() != cols {
                return Err(CudaError::Shape {
                    op: "weight concat",
                    detail: format!(
                        "{:?} [{}, {}] after {format:?} with {cols} columns",
                        GpuFormat::of(m)?,
                        m.rows(),
                        m.cols()
                    ),
                });
            }
            match *m.data() {
                WeightData::Dense { bytes, .. } | WeightData::Gguf { bytes, .. } => {
                    host.extend_from_slice(bytes)
                }
                WeightData::MlxAffine { bits, .. } => {
                    return Err(CudaError::UnsupportedFormat {
                        format: format!("MLX affine {bits}-bit"),
                    })
                }
            }
            rows += m.rows();
        }
        if rows > i32::MAX as usize || cols > i32::MAX as usize {
            return Err(CudaError::Shape {
                op: "weight concat",
                detail: format!("shape [{rows}, {cols}] exceeds i32 indexing"),
            });
        }
        Ok(GpuMatrix {
            rows,
            cols,
            format,
            bytes: gpu.upload(&host)?,
        })
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The storage format.
    pub fn format(&self) -> GpuFormat {
        self.format
    }

    /// Bytes held on the device (what one pass over the weight reads).
    pub fn storage_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The device bytes.
    pub fn bytes(&self) -> &CudaSlice<u8> {
        &self.bytes
    }
}
