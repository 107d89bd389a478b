//! Random weights in packed layouts for the suite, with an f64 decoder as the reference.

use crate::weights::GpuFormat;
use tf_formats::gguf::GgmlType;
use tf_kernels::contract::Rng;
use tf_kernels::matmul::{FloatType, PackedMatrix};

/// A host weight matrix in a packed layout.
pub(crate) struct HostWeights {
    pub rows: usize,
    pub cols: usize,
    pub format: GpuFormat,
    pub bytes: Vec<u8>,
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
        }
        HostWeights {
            rows,
            cols,
            format,
            bytes,
        }
    }

    /// The CPU kernels' view of the same bytes.
    pub fn packed(&self) -> PackedMatrix<'_> {
        let (r, c, b) = (self.rows, self.cols, &self.bytes[..]);
        let m = match self.format {
            GpuFormat::F32 => PackedMatrix::gguf(GgmlType::F32, r, c, b),
            GpuFormat::F16 => PackedMatrix::gguf(GgmlType::F16, r, c, b),
            GpuFormat::Bf16 => PackedMatrix::gguf(GgmlType::BF16, r, c, b),
            GpuFormat::Q4_0 => PackedMatrix::gguf(GgmlType::Q4_0, r, c, b),
            GpuFormat::Q4_1 => PackedMatrix::gguf(GgmlType::Q4_1, r, c, b),
            GpuFormat::Q8_0 => PackedMatrix::gguf(GgmlType::Q8_0, r, c, b),
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
        }
    }
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
}
