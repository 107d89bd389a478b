//! Random weights in packed layouts for the suite, with an f64 decoder as the reference.

use crate::weights::GpuFormat;
use tf_formats::gguf::GgmlType;
use tf_kernels::contract::Rng;
use tf_kernels::matmul::{FloatType, PackedMatrix, WeightData};

/// A host weight matrix in a packed layout.
pub(crate) struct HostWeights {
    pub rows: usize,
    pub cols: usize,
    pub format: GpuFormat,
    /// The packed bytes (for MLX: the u32 words).
    pub bytes: Vec<u8>,
    /// MLX affine only: group size, scales and biases.
    pub mlx: Option<MlxParts>,
}

/// The per-group arrays of an MLX affine host matrix.
pub(crate) struct MlxParts {
    pub group_size: usize,
    pub scale_ty: FloatType,
    pub scales: Vec<u8>,
    pub biases: Vec<u8>,
}

fn f16_bits(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_bits().to_le_bytes()
}

impl HostWeights {
    /// Random weights: block scales drawn so decoded values stay within about +-0.2.
    pub fn random(format: GpuFormat, rows: usize, cols: usize, rng: &mut Rng) -> HostWeights {
        let mut bytes = Vec::new();
        let blocks = rows * cols / 32;
        match format {
            GpuFormat::F32 => {
                (0..rows * cols).for_each(|_| bytes.extend(rng.uniform(-0.2, 0.2).to_le_bytes()))
            }
            GpuFormat::F16 => {
                (0..rows * cols).for_each(|_| bytes.extend(f16_bits(rng.uniform(-0.2, 0.2))))
            }
            GpuFormat::Bf16 => (0..rows * cols).for_each(|_| {
                bytes.extend(
                    half::bf16::from_f32(rng.uniform(-0.2, 0.2))
                        .to_bits()
                        .to_le_bytes(),
                )
            }),
            GpuFormat::Q4_0 => (0..blocks).for_each(|_| {
                bytes.extend(f16_bits(rng.uniform(0.002, 0.025)));
                (0..16).for_each(|_| bytes.push(rng.below(256) as u8));
            }),
            GpuFormat::Q4_1 => (0..blocks).for_each(|_| {
                bytes.extend(f16_bits(rng.uniform(0.002, 0.025)));
                bytes.extend(f16_bits(rng.uniform(-0.2, 0.0)));
                (0..16).for_each(|_| bytes.push(rng.below(256) as u8));
            }),
            GpuFormat::Q8_0 => (0..blocks).for_each(|_| {
                bytes.extend(f16_bits(rng.uniform(0.0002, 0.0015)));
                (0..32).for_each(|_| bytes.push(rng.below(256) as u8));
            }),
            // |d * sc * q| <= 0.0003 * 63 * 15, |dmin * m| <= 0.003 * 63.
            GpuFormat::Q4K => (0..blocks / 8).for_each(|_| {
                bytes.extend(f16_bits(rng.uniform(0.0001, 0.0003)));
                bytes.extend(f16_bits(rng.uniform(0.0005, 0.003)));
                (0..140).for_each(|_| bytes.push(rng.below(256) as u8));
            }),
            // |d * sc * (q - 32)| <= 0.00006 * 128 * 32.
            GpuFormat::Q6K => (0..blocks / 8).for_each(|_| {
                (0..208).for_each(|_| bytes.push(rng.below(256) as u8));
                bytes.extend(f16_bits(rng.uniform(0.00002, 0.00006)));
            }),
            GpuFormat::Mlx2
            | GpuFormat::Mlx3
            | GpuFormat::Mlx4
            | GpuFormat::Mlx5
            | GpuFormat::Mlx6
            | GpuFormat::Mlx8 => {
                let bits = format.mlx_bits().unwrap_or(4);
                return Self::random_mlx(bits, 64, FloatType::F16, rows, cols, rng);
            }
        }
        HostWeights {
            rows,
            cols,
            format,
            bytes,
            mlx: None,
        }
    }

    /// Random MLX affine weights (`bits` of 2, 3, 4, 5, 6, 8): scales so `s * q` stays within
    /// about 0.25, biases in [-0.15, 0.05].
    pub fn random_mlx(
        bits: u8,
        group_size: usize,
        scale_ty: FloatType,
        rows: usize,
        cols: usize,
        rng: &mut Rng,
    ) -> HostWeights {
        let format = GpuFormat::mlx(bits).expect("an MLX width with kernels");
        let groups = rows * cols / group_size;
        let smax = 0.25 / ((1u32 << bits) - 1) as f32;
        let floats = |v: Vec<f32>| -> Vec<u8> {
            v.iter()
                .flat_map(|&x| match scale_ty {
                    FloatType::F32 => x.to_le_bytes().to_vec(),
                    FloatType::F16 => f16_bits(x).to_vec(),
                    FloatType::BF16 => half::bf16::from_f32(x).to_bits().to_le_bytes().to_vec(),
                })
                .collect()
        };
        let s = floats((0..groups).map(|_| rng.uniform(0.2 * smax, smax)).collect());
        let b = floats((0..groups).map(|_| rng.uniform(-0.15, 0.05)).collect());
        HostWeights {
            rows,
            cols,
            format,
            bytes: (0..rows * cols * bits as usize / 8)
                .map(|_| rng.below(256) as u8)
                .collect(),
            mlx: Some(MlxParts {
                group_size,
                scale_ty,
                scales: s,
                biases: b,
            }),
        }
    }

    /// The CPU kernels' view of the same bytes.
    pub fn packed(&self) -> PackedMatrix<'_> {
        let (r, c, b) = (self.rows, self.cols, &self.bytes[..]);
        if let Some(p) = &self.mlx {
            let data = WeightData::MlxAffine {
                bits: self.format.mlx_bits().unwrap_or(0),
                group_size: p.group_size,
                scale_ty: p.scale_ty,
                words: b,
                scales: &p.scales,
                biases: &p.biases,
            };
            return PackedMatrix::new(r, c, data).expect("the generator writes whole groups");
        }
        let m = match self.format {
            GpuFormat::F32 => PackedMatrix::gguf(GgmlType::F32, r, c, b),
            GpuFormat::F16 => PackedMatrix::gguf(GgmlType::F16, r, c, b),
            GpuFormat::Bf16 => PackedMatrix::gguf(GgmlType::BF16, r, c, b),
            GpuFormat::Q4_0 => PackedMatrix::gguf(GgmlType::Q4_0, r, c, b),
            GpuFormat::Q4_1 => PackedMatrix::gguf(GgmlType::Q4_1, r, c, b),
            GpuFormat::Q8_0 => PackedMatrix::gguf(GgmlType::Q8_0, r, c, b),
            GpuFormat::Q4K => PackedMatrix::gguf(GgmlType::Q4K, r, c, b),
            // MLX formats return above (an MLX host matrix always has its parts).
            _ => PackedMatrix::gguf(GgmlType::Q6K, r, c, b),
        };
        m.expect("the generator writes whole rows of whole blocks")
    }

    /// Row `j` decoded in f64 from the stored fields (`d * q + m` etc. without rounding).
    pub fn row_f64(&self, j: usize) -> Vec<f64> {
        let c = self.cols;
        let f16 = |b: &[u8], i: usize| {
            half::f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f64()
        };
        match self.format {
            GpuFormat::F32 => (0..c)
                .map(|k| FloatType::F32.read(&self.bytes[j * c * 4..], k) as f64)
                .collect(),
            GpuFormat::F16 => (0..c)
                .map(|k| FloatType::F16.read(&self.bytes[j * c * 2..], k) as f64)
                .collect(),
            GpuFormat::Bf16 => (0..c)
                .map(|k| FloatType::BF16.read(&self.bytes[j * c * 2..], k) as f64)
                .collect(),
            GpuFormat::Q4_0 | GpuFormat::Q4_1 | GpuFormat::Q8_0 => {
                let bs = match self.format {
                    GpuFormat::Q4_0 => 18,
                    GpuFormat::Q4_1 => 20,
                    _ => 34,
                };
                let row = &self.bytes[j * (c / 32) * bs..(j + 1) * (c / 32) * bs];
                let mut out = Vec::with_capacity(c);
                for blk in row.chunks_exact(bs) {
                    let d = f16(blk, 0);
                    for e in 0..32 {
                        out.push(match self.format {
                            GpuFormat::Q4_0 => d * (nibble(&blk[2..], e) as f64 - 8.0),
                            GpuFormat::Q4_1 => d * nibble(&blk[4..], e) as f64 + f16(blk, 2),
                            _ => d * (blk[2 + e] as i8) as f64,
                        });
                    }
                }
                out
            }
            GpuFormat::Q4K => (0..c / 256)
                .flat_map(|b| q4k_block_f64(&self.bytes[(j * (c / 256) + b) * 144..][..144]))
                .collect(),
            GpuFormat::Q6K => (0..c / 256)
                .flat_map(|b| q6k_block_f64(&self.bytes[(j * (c / 256) + b) * 210..][..210]))
                .collect(),
            _ => self.mlx_row_f64(j),
        }
    }

    /// An MLX row in f64: `s * q + b` with the stored scale and bias, unrounded.
    fn mlx_row_f64(&self, j: usize) -> Vec<f64> {
        let (Some(p), Some(bits)) = (&self.mlx, self.format.mlx_bits()) else {
            return vec![f64::NAN; self.cols];
        };
        let (c, bits) = (self.cols, bits as usize);
        let words: Vec<u32> = self.bytes[j * c * bits / 8..(j + 1) * c * bits / 8]
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let groups = c / p.group_size;
        (0..c)
            .map(|k| {
                let (w, off) = (k * bits / 32, k * bits % 32);
                let pair = words[w] as u64 | (words.get(w + 1).copied().unwrap_or(0) as u64) << 32;
                let q = (pair >> off) & ((1u64 << bits) - 1);
                let g = j * groups + k / p.group_size;
                p.scale_ty.read(&p.scales, g) as f64 * q as f64
                    + p.scale_ty.read(&p.biases, g) as f64
            })
            .collect()
    }
}

fn f16_at(b: &[u8], i: usize) -> f64 {
    half::f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f64()
}

/// A Q4_K super-block in f64 (ggml's layout: d, dmin, 12 bytes of 6-bit scale/min pairs, then
/// 4 chunks of 32 bytes whose low nibbles are sub-block 2c and high nibbles sub-block 2c + 1).
fn q4k_block_f64(blk: &[u8]) -> Vec<f64> {
    let (d, dmin, s) = (f16_at(blk, 0), f16_at(blk, 2), &blk[4..16]);
    let pair = |j: usize| -> (f64, f64) {
        let (sc, m) = if j < 4 {
            (s[j] & 0x3f, s[j + 4] & 0x3f)
        } else {
            (
                (s[j + 4] & 0x0f) | ((s[j - 4] & 0xc0) >> 2),
                (s[j + 4] >> 4) | ((s[j] & 0xc0) >> 2),
            )
        };
        (sc as f64, m as f64)
    };
    let mut out = Vec::with_capacity(256);
    for sub in 0..8 {
        let (sc, m) = pair(sub);
        let chunk = &blk[16 + 32 * (sub / 2)..16 + 32 * (sub / 2) + 32];
        for &byte in chunk {
            let q = if sub % 2 == 0 { byte & 0x0f } else { byte >> 4 };
            out.push(d * sc * q as f64 - dmin * m);
        }
    }
    out
}

/// A Q6_K super-block in f64 (ggml's layout: 128 bytes of low nibbles, 64 of 2-bit highs, 16
/// signed scales, f16 d; two halves of 128 elements, each four quadrants of 32).
fn q6k_block_f64(blk: &[u8]) -> Vec<f64> {
    let d = f16_at(blk, 208);
    let mut out = vec![0f64; 256];
    for (e, o) in out.iter_mut().enumerate() {
        let (half, quad, l) = (e / 128, (e % 128) / 32, e % 32);
        let low = blk[64 * half + l + if quad % 2 == 1 { 32 } else { 0 }];
        let low = if quad >= 2 { low >> 4 } else { low & 0x0f };
        let high = (blk[128 + 32 * half + l] >> (2 * quad)) & 3;
        let q = (low | (high << 4)) as i32 - 32;
        let sc = blk[192 + 8 * half + 2 * quad + l / 16] as i8;
        *o = d * sc as f64 * q as f64;
    }
    out
}

/// Element `e` (0..32) of a 4-bit block's 16 packed bytes: low nibbles first, then high.
fn nibble(qs: &[u8], e: usize) -> u8 {
    if e < 16 {
        qs[e] & 15
    } else {
        qs[e - 16] >> 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_kernels::matmul::embedding_row;

    /// The suite's f64 reference decoder agrees with the CPU kernels' decode (exactly where the
    /// f32 decode is exact; within one rounding for Q4_1's fma), and a wrong nibble is noticed.
    #[test]
    fn reference_decoder_matches_the_cpu_decode() {
        let mut rng = Rng::new(5);
        for f in [
            GpuFormat::Q4_0,
            GpuFormat::Q4_1,
            GpuFormat::Q8_0,
            GpuFormat::Bf16,
            GpuFormat::F16,
            GpuFormat::F32,
        ] {
            let w = HostWeights::random(f, 3, 96, &mut rng);
            let mut row = vec![0f32; 96];
            for j in 0..3 {
                embedding_row(&w.packed(), j, &mut row).expect("row");
                for (k, (&got, want)) in row.iter().zip(w.row_f64(j)).enumerate() {
                    let tol = if f == GpuFormat::Q4_1 {
                        want.abs() * 6e-8
                    } else {
                        0.0
                    };
                    assert!(
                        (got as f64 - want).abs() <= tol,
                        "{f:?} row {j} col {k}: {got} vs {want}"
                    );
                }
            }
        }
        // Planted control: flip one stored nibble; the reference must change.
        let mut w = HostWeights::random(GpuFormat::Q4_1, 1, 32, &mut rng);
        let before = w.row_f64(0);
        w.bytes[4] ^= 0x01;
        assert_ne!(before, w.row_f64(0));
    }

    /// The f64 reference of the K-quants and MLX (every width, group size and scale dtype)
    /// agrees with the CPU decode within its one or two roundings, and a wrong scale is noticed.
    #[test]
    fn reference_decoder_matches_the_cpu_decode_for_k_quants_and_mlx() {
        let mut rng = Rng::new(9);
        let mut ws = vec![
            HostWeights::random(GpuFormat::Q4K, 3, 512, &mut rng),
            HostWeights::random(GpuFormat::Q6K, 3, 512, &mut rng),
        ];
        for bits in crate::quant::MLX_BITS {
            for group in [32, 64, 128] {
                for ty in [FloatType::F16, FloatType::BF16, FloatType::F32] {
                    ws.push(HostWeights::random_mlx(bits, group, ty, 3, 256, &mut rng));
                }
            }
        }
        for w in &ws {
            let mut row = vec![0f32; w.cols];
            for j in 0..w.rows {
                embedding_row(&w.packed(), j, &mut row).expect("row");
                for (k, (&got, want)) in row.iter().zip(w.row_f64(j)).enumerate() {
                    // One rounding of the result; f32 MLX scales also round s * q (|s q| < 0.3).
                    let f32_scales = w.mlx.as_ref().is_some_and(|p| p.scale_ty == FloatType::F32);
                    let tol = 6e-8 * (want.abs() + if f32_scales { 0.3 } else { 0.0 });
                    assert!(
                        (got as f64 - want).abs() <= tol,
                        "{:?} row {j} col {k}: {got} vs {want}",
                        w.format
                    );
                }
            }
        }
        // Planted controls: a changed Q4_K sub-block scale, Q6_K scale and MLX scale each change
        // the reference.
        for (mut w, at) in [
            (HostWeights::random(GpuFormat::Q4K, 1, 256, &mut rng), 4),
            (HostWeights::random(GpuFormat::Q6K, 1, 256, &mut rng), 193),
        ] {
            let before = w.row_f64(0);
            w.bytes[at] ^= 0x01;
            assert_ne!(before, w.row_f64(0), "{:?}", w.format);
        }
        let mut w = HostWeights::random_mlx(4, 64, FloatType::F16, 1, 128, &mut rng);
        let before = w.row_f64(0);
        if let Some(p) = w.mlx.as_mut() {
            p.scales[1] ^= 0x04;
        }
        assert_ne!(before, w.row_f64(0));
    }
}
