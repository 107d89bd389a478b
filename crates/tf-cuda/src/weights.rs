//! Weight matrices on the device, uploaded in their packed (quantized) layouts unchanged, except
//! MLX affine, whose three arrays are re-laid into one buffer of rows without changing a value
//! (see [`crate::quant`]).

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use cudarc::driver::CudaSlice;
use std::borrow::Cow;
use std::ops::Range;
use tf_formats::gguf::GgmlType;
use tf_kernels::matmul::{FloatType, PackedMatrix, WeightData};

/// Weight rows of a matmul launch from which `tf_mmq` (4 threads a row) is used at one
/// activation row.
pub const MMQ_MIN_ROWS: usize = 20480;

/// The entry of matmul kernel `kernel` for `threads_per_row` threads a weight row: `kernel` for
/// 16 (`tf_mmv`), its twin `kernel_mmq` for 4 (`tf_mmq`; [`crate::device::mmq_kernels`]). Two
/// entries, so that each geometry gets its own register count.
pub fn geometry_kernel(kernel: &str, threads_per_row: usize) -> String {
    if threads_per_row == 4 {
        format!("{kernel}_mmq")
    } else {
        kernel.to_string()
    }
}

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
    /// GGUF Q4_K super-blocks (144 bytes per 256 weights).
    Q4K = 6,
    /// GGUF Q6_K super-blocks (210 bytes per 256 weights).
    Q6K = 7,
    /// MLX affine 2-bit, re-laid (see [`crate::quant`]): 16 bytes per 32 weights.
    Mlx2 = 8,
    /// MLX affine 3-bit, re-laid: 20 bytes per 32 weights.
    Mlx3 = 9,
    /// MLX affine 4-bit, re-laid: 24 bytes per 32 weights.
    Mlx4 = 10,
    /// MLX affine 5-bit, re-laid: 28 bytes per 32 weights.
    Mlx5 = 11,
    /// MLX affine 6-bit, re-laid: 32 bytes per 32 weights.
    Mlx6 = 12,
    /// MLX affine 8-bit, re-laid: 40 bytes per 32 weights.
    Mlx8 = 13,
}

impl GpuFormat {
    /// Every format, in `FMT_*` order.
    pub const ALL: [GpuFormat; 14] = [
        GpuFormat::F32,
        GpuFormat::F16,
        GpuFormat::Bf16,
        GpuFormat::Q4_0,
        GpuFormat::Q4_1,
        GpuFormat::Q8_0,
        GpuFormat::Q4K,
        GpuFormat::Q6K,
        GpuFormat::Mlx2,
        GpuFormat::Mlx3,
        GpuFormat::Mlx4,
        GpuFormat::Mlx5,
        GpuFormat::Mlx6,
        GpuFormat::Mlx8,
    ];

    /// The MLX affine format of `bits` per weight, if it has kernels.
    pub fn mlx(bits: u8) -> Option<GpuFormat> {
        Some(match bits {
            2 => GpuFormat::Mlx2,
            3 => GpuFormat::Mlx3,
            4 => GpuFormat::Mlx4,
            5 => GpuFormat::Mlx5,
            6 => GpuFormat::Mlx6,
            8 => GpuFormat::Mlx8,
            _ => return None,
        })
    }

    /// Bits per weight of an MLX format (`None` for the others).
    pub fn mlx_bits(self) -> Option<u8> {
        Some(match self {
            GpuFormat::Mlx2 => 2,
            GpuFormat::Mlx3 => 3,
            GpuFormat::Mlx4 => 4,
            GpuFormat::Mlx5 => 5,
            GpuFormat::Mlx6 => 6,
            GpuFormat::Mlx8 => 8,
            _ => return None,
        })
    }

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
                GgmlType::Q4K => Ok(GpuFormat::Q4K),
                GgmlType::Q6K => Ok(GpuFormat::Q6K),
                other => Err(CudaError::UnsupportedFormat {
                    format: format!("GGUF {other:?}"),
                }),
            },
            WeightData::MlxAffine {
                bits, group_size, ..
            } => match GpuFormat::mlx(bits) {
                Some(f) if group_size > 0 && group_size.is_multiple_of(32) => Ok(f),
                _ => Err(CudaError::UnsupportedFormat {
                    format: format!("MLX affine {bits}-bit with group size {group_size} (the GPU takes 2, 3, 4, 5, 6 or 8 bits and a group size that is a multiple of 32)"),
                }),
            },
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
            GpuFormat::Q4K => "tf_matmul_q4_k",
            GpuFormat::Q6K => "tf_matmul_q6_k",
            GpuFormat::Mlx2 => "tf_matmul_mlx2",
            GpuFormat::Mlx3 => "tf_matmul_mlx3",
            GpuFormat::Mlx4 => "tf_matmul_mlx4",
            GpuFormat::Mlx5 => "tf_matmul_mlx5",
            GpuFormat::Mlx6 => "tf_matmul_mlx6",
            GpuFormat::Mlx8 => "tf_matmul_mlx8",
        }
    }

    /// Threads a matmul launch gives each weight row when it covers `rows` weight rows (all
    /// expert groups of a grouped launch) and each weight row meets at most `n` activation rows:
    /// 4 (kernels/matmul.cu's `tf_mmq`, each thread owning 4 of a row's 16 lanes) for its
    /// formats at one activation row on matrices of at least [`MMQ_MIN_ROWS`] rows, else 16
    /// (`tf_mmv`, one lane a thread: more threads where rows are few, fewer registers where
    /// several activation rows share a weight row). Both give the same bits; each geometry has
    /// its own entry ([`geometry_kernel`]).
    pub fn matmul_threads_per_row(self, rows: usize, n: usize) -> usize {
        if self.has_mmq() && n <= 1 && rows >= MMQ_MIN_ROWS {
            4
        } else {
            16
        }
    }

    /// Whether the format has `tf_mmq` (4 threads a weight row) beside `tf_mmv`.
    pub fn has_mmq(self) -> bool {
        !matches!(
            self,
            GpuFormat::F32 | GpuFormat::F16 | GpuFormat::Bf16 | GpuFormat::Q4K | GpuFormat::Q6K
        )
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
            GpuFormat::Q4K => "q4_k",
            GpuFormat::Q6K => "q6_k",
            GpuFormat::Mlx2 => "mlx2",
            GpuFormat::Mlx3 => "mlx3",
            GpuFormat::Mlx4 => "mlx4",
            GpuFormat::Mlx5 => "mlx5",
            GpuFormat::Mlx6 => "mlx6",
            GpuFormat::Mlx8 => "mlx8",
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
            GpuFormat::Q4K => cols / 256 * 144,
            GpuFormat::Q6K => cols / 256 * 210,
            GpuFormat::Mlx2
            | GpuFormat::Mlx3
            | GpuFormat::Mlx4
            | GpuFormat::Mlx5
            | GpuFormat::Mlx6
            | GpuFormat::Mlx8 => {
                cols / 32 * crate::quant::mlx_unit_bytes(self.mlx_bits().unwrap_or(0))
            }
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
            GpuFormat::Q4K => "tf_embed_q4_k",
            GpuFormat::Q6K => "tf_embed_q6_k",
            GpuFormat::Mlx2 => "tf_embed_mlx2",
            GpuFormat::Mlx3 => "tf_embed_mlx3",
            GpuFormat::Mlx4 => "tf_embed_mlx4",
            GpuFormat::Mlx5 => "tf_embed_mlx5",
            GpuFormat::Mlx6 => "tf_embed_mlx6",
            GpuFormat::Mlx8 => "tf_embed_mlx8",
        }
    }
}

/// The bytes a packed matrix has on the device: its own bytes, or for MLX affine the re-laid
/// rows of [`crate::quant::mlx_device_bytes`].
pub fn device_bytes<'a>(m: &PackedMatrix<'a>) -> Result<Cow<'a, [u8]>> {
    match *m.data() {
        WeightData::Dense { bytes, .. } | WeightData::Gguf { bytes, .. } => {
            Ok(Cow::Borrowed(bytes))
        }
        WeightData::MlxAffine { .. } => Ok(Cow::Owned(crate::quant::mlx_device_bytes(m)?)),
    }
}

/// Refuses a shape the kernels cannot index (rows and columns are i32 there).
fn fits_i32(op: &'static str, rows: usize, cols: usize) -> Result<()> {
    if rows > i32::MAX as usize || cols > i32::MAX as usize {
        return Err(CudaError::Shape {
            op,
            detail: format!("shape [{rows}, {cols}] exceeds i32 indexing"),
        });
    }
    Ok(())
}

/// How a matrix's bytes are laid out on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `rows` rows of `format.row_bytes(cols)` bytes: what every kernel but `tf_mma_mlx4` reads.
    Rows,
    /// MLX 4-bit in the tensor cores' tiles ([`crate::mma`]): only `tf_mma_mlx4` reads it.
    MmaTiles,
    /// The same tiles with each scale and bias as the checkpoint's bf16 ([`crate::mma`]: where
    /// every one is a bf16), read by the tiles' `_b16` entries.
    MmaTilesB16,
}

impl Layout {
    /// Whether the tensor cores' tiles, either form.
    pub fn is_mma(self) -> bool {
        matches!(self, Layout::MmaTiles | Layout::MmaTilesB16)
    }
}

/// The byte ranges that hold rows `rows` of a `[rows, cols]` matrix in `layout` (rows of
/// `row_bytes`): one in the rows layout; in the tiles, those of their whole 16-row tiles, the
/// codes' range, then the scale pairs'.
pub fn row_spans(
    layout: Layout,
    row_bytes: usize,
    n_rows: usize,
    cols: usize,
    rows: Range<usize>,
) -> Vec<Range<usize>> {
    let end = rows.end.min(n_rows);
    let start = rows.start.min(end);
    match layout {
        Layout::Rows => {
            let span = start * row_bytes..end * row_bytes;
            vec![span]
        }
        Layout::MmaTiles | Layout::MmaTilesB16 => {
            let compact = layout == Layout::MmaTilesB16;
            crate::mma::tile_spans(n_rows, cols, compact, start, end).to_vec()
        }
    }
}

/// A `[rows, cols]` weight matrix in device memory, in the checkpoint's own bytes (MLX re-laid).
pub struct GpuMatrix {
    rows: usize,
    cols: usize,
    format: GpuFormat,
    layout: Layout,
    bytes: CudaSlice<u8>,
}

impl GpuMatrix {
    /// Uploads a packed CPU matrix unchanged (no dequantization).
    pub fn upload(gpu: &Gpu, m: &PackedMatrix) -> Result<GpuMatrix> {
        let format = GpuFormat::of(m)?;
        let host = device_bytes(m)?;
        Self::from_device_layout(gpu, format, m.rows(), m.cols(), &host)
    }

    /// Uploads bytes already in the device layout of `format` (`rows` rows of
    /// `format.row_bytes(cols)` bytes). For the suite's planted controls and tests; loaders use
    /// [`GpuMatrix::upload`].
    pub fn from_device_layout(
        gpu: &Gpu,
        format: GpuFormat,
        rows: usize,
        cols: usize,
        host: &[u8],
    ) -> Result<GpuMatrix> {
        fits_i32("weight upload", rows, cols)?;
        if host.len() != rows * format.row_bytes(cols) {
            return Err(CudaError::Shape {
                op: "weight upload",
                detail: format!(
                    "{} bytes for [{rows}, {cols}] {format:?} (rows of {} bytes)",
                    host.len(),
                    format.row_bytes(cols)
                ),
            });
        }
        Ok(GpuMatrix::in_layout(
            rows,
            cols,
            format,
            Layout::Rows,
            gpu.upload(host)?,
        ))
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
            host.extend_from_slice(&device_bytes(m)?);
            rows += m.rows();
        }
        fits_i32("weight concat", rows, cols)?;
        Ok(GpuMatrix::in_layout(
            rows,
            cols,
            format,
            Layout::Rows,
            gpu.upload(&host)?,
        ))
    }

    /// A matrix of zero bytes in the device layout of `format`, allocated on the device with
    /// no host copy (for weights generated there, src/synthetic.rs).
    pub fn zeroed(gpu: &Gpu, format: GpuFormat, rows: usize, cols: usize) -> Result<GpuMatrix> {
        fits_i32("weight allocation", rows, cols)?;
        let bytes = gpu.zeros(rows * format.row_bytes(cols))?;
        Ok(GpuMatrix::in_layout(
            rows,
            cols,
            format,
            Layout::Rows,
            bytes,
        ))
    }

    /// A matrix of `bytes` already in `layout`.
    pub(crate) fn in_layout(
        rows: usize,
        cols: usize,
        format: GpuFormat,
        layout: Layout,
        bytes: CudaSlice<u8>,
    ) -> GpuMatrix {
        GpuMatrix {
            rows,
            cols,
            format,
            layout,
            bytes,
        }
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

    /// How the bytes are laid out.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Refuses a matrix not in the rows layout (`op`'s kernels read only that).
    pub fn need_rows(&self, op: &'static str) -> Result<()> {
        if self.layout != Layout::Rows {
            return Err(CudaError::Shape {
                op,
                detail: format!(
                    "a {:?} matrix in {:?}, not in rows",
                    self.format, self.layout
                ),
            });
        }
        Ok(())
    }

    /// Bytes held on the device (what one pass over the weight reads).
    pub fn storage_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The byte ranges of the device bytes that hold rows `rows` ([`row_spans`]).
    pub fn row_spans(&self, rows: Range<usize>) -> Vec<Range<usize>> {
        let row_bytes = self.format.row_bytes(self.cols);
        row_spans(self.layout, row_bytes, self.rows, self.cols, rows)
    }

    /// The device bytes.
    pub fn bytes(&self) -> &CudaSlice<u8> {
        &self.bytes
    }

    /// The device bytes, to be written (the device-made layouts).
    pub(crate) fn bytes_mut(&mut self) -> &mut CudaSlice<u8> {
        &mut self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{all_kernel_names, fused_kernel_name, FUSED_VARIANTS};

    /// Bolt's Mamba in_proj: 18,560 rows of 4,096, z the first 8,192.
    const IN_PROJ: (usize, usize, usize) = (18_560, 4_096, 8_192);

    #[test]
    fn row_spans_of_the_tiles_split_the_storage_at_a_tile() {
        let (rows, cols, z) = IN_PROJ;
        for (layout, compact) in [(Layout::MmaTiles, false), (Layout::MmaTilesB16, true)] {
            let whole = crate::mma::tile_bytes(rows, cols, compact);
            let all = row_spans(layout, 0, rows, cols, 0..rows);
            assert_eq!(
                all.iter().map(|r| r.len()).sum::<usize>(),
                whole,
                "{layout:?}"
            );
            assert_eq!((all[0].start, all[1].end), (0, whole), "{layout:?}");
            let (a, b) = (
                row_spans(layout, 0, rows, cols, 0..z),
                row_spans(layout, 0, rows, cols, z..rows),
            );
            // z's tiles and the rest's meet, codes and pairs alike, at tile z / 16.
            assert_eq!((a[0].end, a[1].end), (b[0].start, b[1].start), "{layout:?}");
            assert_eq!(b[0].start, z / 16 * (cols / 64) * 512, "{layout:?}");
            assert_eq!(
                a[1].start, all[0].end,
                "{layout:?}: the pairs follow every code"
            );
            // A partial tile is taken whole; a range past the end is clipped.
            assert_eq!(row_spans(layout, 0, rows, cols, 1..2)[0].len(), 64 * 512);
            assert!(row_spans(layout, 0, rows, cols, rows..rows + 9)[0].is_empty());
        }
        let rb = GpuFormat::Mlx4.row_bytes(cols);
        let span = z * rb..rows * rb;
        assert_eq!(row_spans(Layout::Rows, rb, rows, cols, z..rows), vec![span]);
    }

    #[test]
    fn every_format_has_its_kernels_and_a_distinct_id() {
        let names = all_kernel_names();
        for (i, f) in GpuFormat::ALL.iter().enumerate() {
            assert_eq!(*f as usize, i, "{f:?} out of FMT_* order");
            assert!(names.iter().any(|n| n == f.matmul_kernel()), "{f:?} matmul");
            assert!(names.iter().any(|n| n == f.embed_kernel()), "{f:?} embed");
            // The launchers ask for these by name; one missing here refuses at run time.
            for (x, e) in FUSED_VARIANTS.into_iter().chain([("norm", "rope")]) {
                let k = fused_kernel_name(f.kernel_tag(), x, e);
                assert!(names.contains(&k), "{k}");
            }
        }
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "duplicate kernel names");
    }

    #[test]
    fn k_quant_row_bytes_match_the_gguf_block_sizes() {
        for (f, ty) in [
            (GpuFormat::Q4K, GgmlType::Q4K),
            (GpuFormat::Q6K, GgmlType::Q6K),
        ] {
            for cols in [256usize, 1536, 4096] {
                assert_eq!(f.row_bytes(cols), cols / 256 * ty.type_size(), "{f:?}");
            }
        }
        // The fused kernels copy MMF_ROWS (8) rows with 16-byte loads: 8 rows must be whole
        // 16-byte vectors, and rows must keep the decoders' 2- and 4-byte reads aligned.
        for f in GpuFormat::ALL {
            let cols = 1536;
            assert_eq!((8 * f.row_bytes(cols)) % 16, 0, "{f:?}");
        }
        for bits in crate::quant::MLX_BITS {
            let f = GpuFormat::mlx(bits).expect("an MLX width with kernels");
            assert_eq!(f.mlx_bits(), Some(bits));
            assert_eq!(f.row_bytes(64), 2 * (4 * bits as usize + 8));
            assert_eq!(f.row_bytes(64) % 4, 0);
        }
        assert_eq!(GpuFormat::mlx(7), None);
        assert_eq!(GpuFormat::Q4K.mlx_bits(), None);
    }

    #[test]
    fn formats_of_k_quant_and_mlx_matrices() {
        let q4k = vec![0u8; 2 * 144];
        let m = PackedMatrix::gguf(GgmlType::Q4K, 2, 256, &q4k).expect("q4_k");
        assert_eq!(GpuFormat::of(&m).expect("format"), GpuFormat::Q4K);
        assert_eq!(device_bytes(&m).expect("bytes").len(), q4k.len());
        let q6k = vec![0u8; 210];
        let m = PackedMatrix::gguf(GgmlType::Q6K, 1, 256, &q6k).expect("q6_k");
        assert_eq!(GpuFormat::of(&m).expect("format"), GpuFormat::Q6K);
        let (words, sb) = (vec![0u8; 3 * 64 * 3 / 8], vec![0u8; 3 * 4 * 2]);
        let mlx = |group_size: usize| {
            PackedMatrix::new(
                3,
                64,
                WeightData::MlxAffine {
                    bits: 3,
                    group_size,
                    scale_ty: FloatType::F16,
                    words: &words,
                    scales: &sb[..3 * (64 / group_size) * 2],
                    biases: &sb[..3 * (64 / group_size) * 2],
                },
            )
            .expect("mlx")
        };
        let m = mlx(32);
        assert_eq!(GpuFormat::of(&m).expect("format"), GpuFormat::Mlx3);
        assert_eq!(
            device_bytes(&m).expect("bytes").len(),
            3 * GpuFormat::Mlx3.row_bytes(64)
        );
        // Control: a group size the GPU cannot take is refused by name.
        match GpuFormat::of(&mlx(16)) {
            Err(CudaError::UnsupportedFormat { format }) => {
                assert!(format.contains("group size 16"), "{format}")
            }
            other => panic!("group 16 accepted: {other:?}"),
        }
    }
}
