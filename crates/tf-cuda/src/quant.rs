//! K-quant (Q4_K, Q6_K) and MLX affine weights on the GPU: the kernel names of kernels/quant.cu
//! and the MLX re-layout done at upload.
//!
//! # The device layout of an MLX affine matrix
//!
//! MLX keeps a `[rows, cols]` matrix as three arrays: the packed u32 words (`cols * bits / 32`
//! per row; element `k` is bits `[k * bits, (k + 1) * bits)` of the row's little-endian bit
//! stream), and per-group scales and biases (`cols / group_size` per row, f16, bf16 or f32).
//! The GPU gets one buffer of rows; a row is `cols / 32` units of `4 * bits + 8` bytes:
//!
//! ```text
//! unit u of row j:  [ 4 * bits bytes: the row's bit stream for elements 32u .. 32u + 32 ]
//!                   [ f32 LE: scale of group (32u / group_size) of row j, widened exactly ]
//!                   [ f32 LE: bias  of the same group, widened exactly               ]
//! ```
//!
//! No value changes: the packed bits are copied byte for byte (a unit's 32 elements fill whole
//! bytes for every width) and f16/bf16 → f32 widening is exact, so `(s * q) + b` in f32 is the
//! CPU decoder's arithmetic bit for bit. One decoder per width then serves every group size
//! (any multiple of 32) and every scale dtype.

use crate::error::{CudaError, Result};
use tf_kernels::matmul::{PackedMatrix, WeightData};

/// Expands the matmul and embedding kernel names of formats, followed by the planted-control
/// kernels (their fused matmuls are named with every format's in `device::all_kernel_names`).
macro_rules! kernel_names {
    ([$($tag:literal),*], [$($plant:literal),*]) => {
        &[
            $(concat!("tf_matmul_", $tag), concat!("tf_embed_", $tag),)*
            $($plant,)*
        ]
    };
}

/// Kernel entry points defined in kernels/quant.cu.
pub const KERNEL_NAMES: &[&str] = kernel_names!(
    ["q4_k", "q6_k", "mlx2", "mlx3", "mlx4", "mlx5", "mlx6", "mlx8"],
    [
        "tf_plant_matmul_q4_k_scale",
        "tf_plant_matmul_q6_k_scale",
        "tf_plant_matmul_mlx4_nibbles",
        "tf_plant_matmul_mlx4_fma"
    ]
);

/// Planted control: Q4_K decoded with the neighbouring sub-block's (scale, min).
pub const PLANT_Q4_K_SCALE: &str = "tf_plant_matmul_q4_k_scale";
/// Planted control: Q6_K decoded with each quadrant's first 16-group scale for both groups.
pub const PLANT_Q6_K_SCALE: &str = "tf_plant_matmul_q6_k_scale";
/// Planted control: MLX 4-bit decoded with the two nibbles of each byte swapped.
pub const PLANT_MLX4_NIBBLES: &str = "tf_plant_matmul_mlx4_nibbles";

/// Planted control: MLX 4-bit decoded as `fmaf(s, q, b)` (one rounding; the CPU rounds `s * q`
/// and then the sum). Accurate and row-invariant, so only the CPU bit comparison catches it.
pub const PLANT_MLX4_FMA: &str = "tf_plant_matmul_mlx4_fma";

/// MLX widths with GPU kernels.
pub const MLX_BITS: [u8; 6] = [2, 3, 4, 5, 6, 8];

/// Bytes of one 32-element unit of the device MLX layout at `bits` per weight.
pub fn mlx_unit_bytes(bits: u8) -> usize {
    4 * bits as usize + 8
}

/// The device bytes of an MLX affine matrix (the layout in the module docs). Refuses other
/// formats, widths without kernels, and group sizes that are not a multiple of 32.
pub fn mlx_device_bytes(m: &PackedMatrix) -> Result<Vec<u8>> {
    relayout(m, 0)
}

/// [`mlx_device_bytes`] with every unit given the scale of the group `shift` groups later
/// (wrapping within the row): a planted control for the suite, never used to load weights.
pub fn mlx_device_bytes_planted_scale_shift(m: &PackedMatrix, shift: usize) -> Result<Vec<u8>> {
    relayout(m, shift)
}

fn relayout(m: &PackedMatrix, shift: usize) -> Result<Vec<u8>> {
    let WeightData::MlxAffine {
        bits,
        group_size,
        scale_ty,
        words,
        scales,
        biases,
    } = *m.data()
    else {
        return Err(CudaError::UnsupportedFormat {
            format: "MLX re-layout of a matrix that is not MLX affine".into(),
        });
    };
    if !MLX_BITS.contains(&bits) {
        return Err(CudaError::UnsupportedFormat {
            format: format!("MLX affine {bits}-bit"),
        });
    }
    if group_size == 0 || !group_size.is_multiple_of(32) {
        return Err(CudaError::UnsupportedFormat {
            format: format!(
                "MLX affine {bits}-bit with group size {group_size} (the GPU needs a multiple of 32)"
            ),
        });
    }
    let (rows, cols) = (m.rows(), m.cols());
    // PackedMatrix::new checked cols % group_size == 0 and the three buffers' lengths.
    let b = bits as usize;
    let (units, groups, row_words) = (cols / 32, cols / group_size, cols * b / 8);
    let mut out = Vec::with_capacity(rows * units * mlx_unit_bytes(bits));
    for j in 0..rows {
        let wrow = &words[j * row_words..(j + 1) * row_words];
        for u in 0..units {
            let g = 32 * u / group_size;
            let gs = (g + shift) % groups;
            out.extend_from_slice(&wrow[4 * b * u..4 * b * (u + 1)]);
            out.extend_from_slice(&scale_ty.read(scales, j * groups + gs).to_le_bytes());
            out.extend_from_slice(&scale_ty.read(biases, j * groups + g).to_le_bytes());
        }
    }
    Ok(out)
}

/// Element `k` of a re-laid MLX row, decoded as kernels/common.cuh `tf_decode_mlx` does (a host
/// mirror of the device decoder, for tests).
pub fn mlx_decode_device_row(bits: u8, row: &[u8], k: usize) -> f32 {
    let b = bits as usize;
    let p = &row[(k / 32) * mlx_unit_bytes(bits)..];
    let bit = (k % 32) * b;
    let mut v = p[bit / 8] as u32;
    if !8usize.is_multiple_of(b) {
        v |= (p[bit / 8 + 1] as u32) << 8;
    }
    let q = (v >> (bit % 8)) & ((1u32 << b) - 1);
    let f = |o: usize| f32::from_le_bytes([p[o], p[o + 1], p[o + 2], p[o + 3]]);
    f(4 * b) * q as f32 + f(4 * b + 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_formats::checkpoint::TensorData;
    use tf_kernels::contract::Rng;
    use tf_kernels::matmul::{embedding_row, FloatType};

    fn float_bytes(ty: FloatType, v: &[f32]) -> Vec<u8> {
        v.iter()
            .flat_map(|&x| match ty {
                FloatType::F32 => x.to_le_bytes().to_vec(),
                FloatType::F16 => half::f16::from_f32(x).to_bits().to_le_bytes().to_vec(),
                FloatType::BF16 => half::bf16::from_f32(x).to_bits().to_le_bytes().to_vec(),
            })
            .collect()
    }

    struct Mlx {
        bits: u8,
        group: usize,
        ty: FloatType,
        rows: usize,
        cols: usize,
        words: Vec<u8>,
        scales: Vec<u8>,
        biases: Vec<u8>,
    }

    impl Mlx {
        fn random(bits: u8, group: usize, ty: FloatType, rows: usize, cols: usize) -> Mlx {
            let mut rng = Rng::new(bits as u64 * 1000 + group as u64);
            let g = rows * cols / group;
            let s: Vec<f32> = (0..g).map(|_| rng.uniform(0.001, 0.05)).collect();
            let b: Vec<f32> = (0..g).map(|_| rng.uniform(-0.3, 0.1)).collect();
            Mlx {
                bits,
                group,
                ty,
                rows,
                cols,
                words: (0..rows * cols * bits as usize / 8)
                    .map(|_| rng.below(256) as u8)
                    .collect(),
                scales: float_bytes(ty, &s),
                biases: float_bytes(ty, &b),
            }
        }

        fn packed(&self) -> PackedMatrix<'_> {
            PackedMatrix::new(
                self.rows,
                self.cols,
                WeightData::MlxAffine {
                    bits: self.bits,
                    group_size: self.group,
                    scale_ty: self.ty,
                    words: &self.words,
                    scales: &self.scales,
                    biases: &self.biases,
                },
            )
            .expect("valid MLX matrix")
        }
    }

    /// Whether every element of the re-laid bytes, decoded as the GPU does, has the CPU
    /// decode's bits.
    fn device_decode_matches_cpu(m: &Mlx, dev: &[u8]) -> bool {
        let rb = m.cols / 32 * mlx_unit_bytes(m.bits);
        let mut cpu = vec![0f32; m.cols];
        (0..m.rows).all(|j| {
            embedding_row(&m.packed(), j, &mut cpu).expect("cpu row");
            let row = &dev[j * rb..(j + 1) * rb];
            (0..m.cols).all(|k| mlx_decode_device_row(m.bits, row, k).to_bits() == cpu[k].to_bits())
        })
    }

    #[test]
    fn relaid_rows_decode_to_the_cpu_bits_for_every_width_group_and_dtype() {
        for bits in MLX_BITS {
            for group in [32, 64, 128] {
                for ty in [FloatType::F16, FloatType::BF16, FloatType::F32] {
                    let m = Mlx::random(bits, group, ty, 3, 384);
                    let dev = mlx_device_bytes(&m.packed()).expect("relayout");
                    assert_eq!(dev.len(), 3 * 384 / 32 * mlx_unit_bytes(bits));
                    assert!(
                        device_decode_matches_cpu(&m, &dev),
                        "{bits}-bit group {group} {ty:?}"
                    );
                    // Planted control: the scale of the next group (a different one whenever a
                    // row has more than one group) must be noticed by the same comparison.
                    let bad = mlx_device_bytes_planted_scale_shift(&m.packed(), 1).expect("plant");
                    assert!(
                        !device_decode_matches_cpu(&m, &bad),
                        "{bits}-bit group {group} {ty:?}: shifted scales not noticed"
                    );
                }
            }
        }
    }

    #[test]
    fn relayout_copies_words_and_widens_scales_in_place() {
        // 4-bit, one row of 64 columns, group 64: two units, both with the group's scale/bias.
        let m = Mlx::random(4, 64, FloatType::BF16, 1, 64);
        let dev = mlx_device_bytes(&m.packed()).expect("relayout");
        assert_eq!(dev.len(), 2 * 24);
        let s = FloatType::BF16.read(&m.scales, 0).to_le_bytes();
        let b = FloatType::BF16.read(&m.biases, 0).to_le_bytes();
        for u in 0..2 {
            let unit = &dev[24 * u..24 * (u + 1)];
            assert_eq!(&unit[..16], &m.words[16 * u..16 * (u + 1)]);
            assert_eq!(&unit[16..20], &s);
            assert_eq!(&unit[20..24], &b);
        }
    }

    #[test]
    fn relayout_refuses_what_the_gpu_cannot_take() {
        let m = Mlx::random(4, 16, FloatType::F16, 2, 64);
        match mlx_device_bytes(&m.packed()) {
            Err(CudaError::UnsupportedFormat { format }) => {
                assert!(format.contains("group size 16"), "{format}")
            }
            other => panic!("group 16 accepted: {:?}", other.map(|v| v.len())),
        }
        let dense = [0u8; 4 * 64];
        let d = PackedMatrix::dense(tf_formats::DType::F32, 1, 64, &dense).expect("dense");
        assert!(matches!(
            mlx_device_bytes(&d),
            Err(CudaError::UnsupportedFormat { .. })
        ));
    }

    /// Every MLX-quantized matrix of mlx-lm's fixture checkpoints (4- and 8-bit, group 64,
    /// embeddings included) re-lays to rows that decode, as the GPU does, to the CPU's bits.
    #[test]
    fn fixture_checkpoints_relay_to_the_cpu_bits() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/llama");
        let mut seen = 0;
        for dir in [
            "qwen3/q4g64",
            "qwen3/q8g64",
            "qwen2/q4g64_bf16",
            "llama3/q4g64",
        ] {
            let ck = tf_formats::checkpoint::Checkpoint::open(&root.join(dir)).expect(dir);
            for e in ck.entries() {
                if !matches!(e.format, tf_formats::WeightFormat::MlxAffine { .. }) {
                    continue;
                }
                let Some(TensorData::MlxAffine {
                    weight,
                    scales,
                    biases,
                    bits,
                    group_size,
                    scales_dtype,
                }) = ck.data(&e.name)
                else {
                    panic!("{dir} {}: no MLX data", e.name);
                };
                let data = WeightData::MlxAffine {
                    bits,
                    group_size: group_size as usize,
                    scale_ty: FloatType::from_dtype(scales_dtype).expect("float scales"),
                    words: weight,
                    scales,
                    biases,
                };
                let (rows, cols) = (e.shape[0] as usize, e.shape[1] as usize);
                let m = PackedMatrix::new(rows, cols, data).expect("packed matrix");
                let dev = mlx_device_bytes(&m).expect("relayout");
                let rb = cols / 32 * mlx_unit_bytes(bits);
                assert_eq!(dev.len(), rows * rb, "{dir} {}", e.name);
                let mut cpu = vec![0f32; m.cols()];
                for j in 0..m.rows() {
                    embedding_row(&m, j, &mut cpu).expect("cpu row");
                    for (k, c) in cpu.iter().enumerate() {
                        let g = mlx_decode_device_row(bits, &dev[j * rb..(j + 1) * rb], k);
                        assert_eq!(g.to_bits(), c.to_bits(), "{dir} {} [{j}, {k}]", e.name);
                    }
                }
                seen += 1;
            }
        }
        assert!(seen >= 4 * 7, "only {seen} MLX matrices in the fixtures");
    }

    #[test]
    fn kernel_names_cover_every_format_and_plant() {
        assert_eq!(KERNEL_NAMES.len(), 8 * 2 + 4);
        for n in [
            "tf_matmul_mlx3",
            "tf_embed_q6_k",
            PLANT_Q4_K_SCALE,
            PLANT_Q6_K_SCALE,
            PLANT_MLX4_NIBBLES,
            PLANT_MLX4_FMA,
        ] {
            assert!(KERNEL_NAMES.contains(&n), "{n}");
        }
    }
}
