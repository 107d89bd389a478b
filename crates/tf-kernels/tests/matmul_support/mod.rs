//! Shared helpers for the matmul contract tests: seeded random weights in every packed
//! format, the reference (tf-formats dequantizers + f64 accumulation), and the checks.
#![allow(dead_code)]

use half::{bf16, f16};
use tf_formats::gguf::{dequantize, GgmlType};
use tf_formats::mlx_affine::{dequantize_row, words_from_le_bytes, GroupParams, QuantSpec};
use tf_formats::DType;
use tf_kernels::matmul::{FloatType, PackedMatrix, WeightData};

/// splitmix64, seeded.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.unit()).collect()
    }
}

/// A weight format under test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fmt {
    Dense(FloatType),
    Gguf(GgmlType),
    Mlx {
        bits: u8,
        group: usize,
        scale_ty: FloatType,
    },
}

/// The tolerance every format is held to, relative to Σ|x·w|: the worst-case rounding bound
/// γ_m = m·2⁻²⁴ of the canonical sum (K/16 fmas per lane, then a 4-level tree, plus one).
/// It is the same for every format because each format's dequantized weights are checked to
/// equal the reference dequantizer's bit for bit (`decoded_weights_equal_reference`).
pub fn tolerance(cols: usize) -> f64 {
    (cols.div_ceil(16) + 5) as f64 * (f32::EPSILON as f64 / 2.0)
}

/// Every format the contract covers.
pub fn all_formats() -> Vec<Fmt> {
    let mut v = vec![
        Fmt::Gguf(GgmlType::Q4_0),
        Fmt::Gguf(GgmlType::Q4_1),
        Fmt::Gguf(GgmlType::Q8_0),
        Fmt::Gguf(GgmlType::Q4K),
        Fmt::Gguf(GgmlType::Q6K),
        Fmt::Dense(FloatType::F32),
        Fmt::Dense(FloatType::F16),
        Fmt::Dense(FloatType::BF16),
    ];
    for (bits, group, scale_ty) in [
        (4, 64, FloatType::BF16),
        (4, 32, FloatType::F16),
        (4, 128, FloatType::F32),
        (8, 64, FloatType::BF16),
        (8, 32, FloatType::F32),
        (2, 64, FloatType::BF16),
        (3, 64, FloatType::F16),
        (5, 32, FloatType::BF16),
        (6, 128, FloatType::BF16),
    ] {
        v.push(Fmt::Mlx {
            bits,
            group,
            scale_ty,
        });
    }
    v
}

impl Fmt {
    /// Column granularity the format needs.
    pub fn col_multiple(self) -> usize {
        match self {
            Fmt::Dense(_) => 1,
            Fmt::Gguf(t) => t.block_size(),
            Fmt::Mlx { group, .. } => group,
        }
    }
}

fn float_bytes(ty: FloatType, vals: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(vals.len() * ty.size());
    for &v in vals {
        match ty {
            FloatType::F32 => out.extend_from_slice(&v.to_le_bytes()),
            FloatType::F16 => out.extend_from_slice(&f16::from_f32(v).to_le_bytes()),
            FloatType::BF16 => out.extend_from_slice(&bf16::from_f32(v).to_le_bytes()),
        }
    }
    out
}

fn dtype_of(ty: FloatType) -> DType {
    match ty {
        FloatType::F32 => DType::F32,
        FloatType::F16 => DType::F16,
        FloatType::BF16 => DType::BF16,
    }
}

/// An owned random weight.
pub struct Owned {
    pub fmt: Fmt,
    pub rows: usize,
    pub cols: usize,
    pub bytes: Vec<u8>,
    pub scales: Vec<u8>,
    pub biases: Vec<u8>,
}

fn put_f16(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

impl Owned {
    /// Seeded random weights of `fmt`, shape `[rows, cols]`.
    pub fn random(fmt: Fmt, rows: usize, cols: usize, rng: &mut Rng) -> Owned {
        let (mut scales, mut biases) = (Vec::new(), Vec::new());
        let bytes = match fmt {
            Fmt::Dense(ty) => float_bytes(ty, &rng.vec(rows * cols)),
            Fmt::Gguf(ty) => {
                let nb = rows * cols / ty.block_size();
                let ts = ty.type_size();
                let mut bytes = rng.bytes(nb * ts);
                for blk in bytes.chunks_exact_mut(ts) {
                    let (a, b) = (0.05 * rng.unit(), 0.05 * rng.unit());
                    match ty {
                        GgmlType::Q4_0 | GgmlType::Q8_0 => put_f16(blk, 0, a),
                        GgmlType::Q4_1 | GgmlType::Q4K => {
                            put_f16(blk, 0, a);
                            put_f16(blk, 2, b);
                        }
                        GgmlType::Q6K => put_f16(blk, 208, a),
                        _ => unreachable!(),
                    }
                }
                bytes
            }
            Fmt::Mlx {
                bits,
                group,
                scale_ty,
            } => {
                let g = rows * cols / group;
                scales = float_bytes(
                    scale_ty,
                    &rng.vec(g).iter().map(|v| 0.1 * v).collect::<Vec<_>>(),
                );
                biases = float_bytes(scale_ty, &rng.vec(g));
                rng.bytes(rows * cols * bits as usize / 8)
            }
        };
        Owned {
            fmt,
            rows,
            cols,
            bytes,
            scales,
            biases,
        }
    }

    /// The zero-copy view the kernels take.
    pub fn matrix(&self) -> PackedMatrix<'_> {
        let data = match self.fmt {
            Fmt::Dense(ty) => WeightData::Dense {
                ty,
                bytes: &self.bytes,
            },
            Fmt::Gguf(ty) => WeightData::Gguf {
                ty,
                bytes: &self.bytes,
            },
            Fmt::Mlx {
                bits,
                group,
                scale_ty,
            } => WeightData::MlxAffine {
                bits,
                group_size: group,
                scale_ty,
                words: &self.bytes,
                scales: &self.scales,
                biases: &self.biases,
            },
        };
        PackedMatrix::new(self.rows, self.cols, data).expect("valid random matrix")
    }

    /// Reference dequantized weights from tf-formats' reference dequantizers (MLX with
    /// scales/biases widened to f32: `(s * q) + b` in f32, the semantics our kernels follow).
    pub fn reference_weights(&self) -> Vec<f32> {
        let n = self.rows * self.cols;
        match self.fmt {
            Fmt::Dense(ty) => {
                let gty = match ty {
                    FloatType::F32 => GgmlType::F32,
                    FloatType::F16 => GgmlType::F16,
                    FloatType::BF16 => GgmlType::BF16,
                };
                dequantize(gty, &self.bytes, n).expect("dense reference")
            }
            Fmt::Gguf(ty) => dequantize(ty, &self.bytes, n).expect("gguf reference"),
            Fmt::Mlx {
                bits,
                group,
                scale_ty,
            } => {
                let spec = QuantSpec::new(bits as u64, group as u64).expect("spec");
                let words = words_from_le_bytes(&self.bytes).expect("words");
                let widen = |b: &[u8]| -> Vec<u8> {
                    let cnt = b.len() / scale_ty.size();
                    (0..cnt)
                        .flat_map(|i| scale_ty.read(b, i).to_le_bytes())
                        .collect()
                };
                let (s32, b32) = (widen(&self.scales), widen(&self.biases));
                let _ = dtype_of(scale_ty);
                let wpr = self.cols * bits as usize / 32;
                let gpr = self.cols / group;
                let mut out = vec![0f32; n];
                for r in 0..self.rows {
                    let s = GroupParams::new(
                        "scales",
                        DType::F32,
                        &s32[4 * r * gpr..4 * (r + 1) * gpr],
                    )
                    .expect("s");
                    let b = GroupParams::new(
                        "biases",
                        DType::F32,
                        &b32[4 * r * gpr..4 * (r + 1) * gpr],
                    )
                    .expect("b");
                    dequantize_row(
                        spec,
                        &words[r * wpr..(r + 1) * wpr],
                        s,
                        b,
                        &mut out[r * self.cols..(r + 1) * self.cols],
                    )
                    .expect("mlx reference");
                }
                out
            }
        }
    }
}

/// f64-accumulated `y = x Wᵀ` and the matching Σ|x·w| (the scale errors are measured on).
pub fn reference_matmul(
    w: &[f32],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
) -> (Vec<f64>, Vec<f64>) {
    let (mut y, mut a) = (vec![0f64; n * rows], vec![0f64; n * rows]);
    for i in 0..n {
        for j in 0..rows {
            let (mut s, mut sa) = (0f64, 0f64);
            for k in 0..cols {
                let p = x[i * cols + k] as f64 * w[j * cols + k] as f64;
                s += p;
                sa += p.abs();
            }
            y[i * rows + j] = s;
            a[i * rows + j] = sa;
        }
    }
    (y, a)
}

/// Every `|y - ref| <= rtol * Σ|x·w|` (plus a tiny absolute floor); reports the worst.
pub fn check_close(y: &[f32], yref: &[f64], absref: &[f64], rtol: f64) -> Result<(), String> {
    let mut worst = (0f64, 0usize);
    for (idx, ((&v, &r), &a)) in y.iter().zip(yref).zip(absref).enumerate() {
        let diff = (v as f64 - r).abs();
        let err = if diff.is_nan() {
            f64::INFINITY
        } else {
            diff / (a + 1e-30)
        };
        if diff > 1e-30 && err > rtol && err > worst.0 {
            worst = (err, idx);
        }
    }
    if worst.0 > 0.0 {
        return Err(format!(
            "element {}: relative error {:e} > {:e}",
            worst.1, worst.0, rtol
        ));
    }
    Ok(())
}

/// Bit-for-bit equality of two outputs.
pub fn check_bits(what: &str, got: &[f32], want: &[f32]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{what}: length {} vs {}", got.len(), want.len()));
    }
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        if a.to_bits() != b.to_bits() {
            return Err(format!("{what}: element {i} differs: {a:e} vs {b:e}"));
        }
    }
    Ok(())
}
