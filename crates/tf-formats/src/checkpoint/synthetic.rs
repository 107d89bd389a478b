//! The synthetic-weight generator: a counter-based hash of (seed, tensor name, index) turned into
//! valid stored bytes of a weight format, with values small and finite.
//!
//! A synthetic checkpoint ([`super::Checkpoint::synthetic`]) has entries but no bytes on the
//! host; a backend fills each tensor where it lives (the CUDA fill kernels in
//! `tf-cuda/kernels/synthetic.cu` implement these same functions bit for bit). The host
//! functions here are the reference for those kernels and generate small tensors for tests.
//!
//! Every value is exact in every float type it is stored in: dense values are
//! `center + q * 2^exp` with a few-bit integer `q`, and quantization scales are
//! `(1 + m/16) * 2^e` with a 4-bit `m`, built from bits (no float rounding anywhere), so a
//! generator on another device reproduces them exactly.

use crate::dtype::DType;
use crate::gguf::GgmlType;
use crate::weight::{TensorEntry, WeightFormat};

/// The splitmix64 increment.
pub const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Log2 of the largest |value| of a synthetic matrix (2^-5 = 0.03125).
pub const MATRIX_AMPLITUDE_LOG2: i32 = -5;

/// The splitmix64 finalizer.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Draw `i` of the stream `key` (counter-based: any draw is computed alone).
pub fn rand64(key: u64, i: u64) -> u64 {
    mix64(key.wrapping_add(i.wrapping_add(1).wrapping_mul(GOLDEN)))
}

/// FNV-1a (64-bit) of a tensor name.
pub fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The two streams of one tensor: its random bytes and its scale draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorKeys {
    /// Key of the byte stream (packed quants, dense values).
    pub bytes: u64,
    /// Key of the per-block / per-group scale draws.
    pub scales: u64,
}

/// The streams of tensor `name` under `seed`.
pub fn keys(seed: u64, name: &str) -> TensorKeys {
    let k = mix64(seed ^ mix64(name_hash(name)));
    TensorKeys {
        bytes: k,
        scales: mix64(k ^ 0x5CA1_E5CA_1E5C_A1E5),
    }
}

/// Byte `o` of a tensor's byte stream (the little-endian bytes of draws 0, 1, 2, ...).
pub fn stream_byte(key: u64, o: u64) -> u8 {
    (rand64(key, o >> 3) >> (8 * (o & 7))) as u8
}

/// How a tensor's values are drawn: `center + q * 2^exp`, `q` uniform in
/// `[-2^(qbits-1), 2^(qbits-1))` (quantized formats take the amplitude and center 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Init {
    /// The middle of the range (1 for norm gains, 0 for matrices).
    pub center_bits: u32,
    /// Bits of the integer `q` (1..=8).
    pub qbits: u32,
    /// Exponent of the step.
    pub exp: i32,
}

impl Init {
    /// `center + q * 2^exp` with `q` of `qbits` bits.
    pub const fn new(center: u32, qbits: u32, exp: i32) -> Init {
        Init {
            center_bits: center,
            qbits,
            exp,
        }
    }

    /// The center as an f32.
    pub fn center(&self) -> f32 {
        f32::from_bits(self.center_bits)
    }

    /// Log2 of the largest |value - center|.
    pub fn amplitude_log2(&self) -> i32 {
        self.exp + self.qbits as i32 - 1
    }

    /// The value of draw `r` (exact in f32, f16 and bf16).
    pub fn value(&self, r: u64) -> f32 {
        let q = (r >> (64 - self.qbits)) as i64 - (1i64 << (self.qbits - 1));
        self.center() + q as f32 * pow2(self.exp)
    }
}

const ONE: u32 = 0x3f80_0000;

/// How the tensor `name` is initialised: norm gains and Mamba `D` near 1, Mamba `A_log` and
/// `dt_bias` within ±0.5, conv taps within ±0.25, biases within ±1/32, matrices within
/// ±2^[`MATRIX_AMPLITUDE_LOG2`].
pub fn init_for(name: &str) -> Init {
    let last = name.rsplit('.').next().unwrap_or(name);
    let module = name.strip_suffix(".weight").unwrap_or(name);
    if name.ends_with("norm.weight") || name.ends_with("norm_f.weight") || last == "D" {
        Init::new(ONE, 5, -7)
    } else if last == "A_log" || last == "dt_bias" {
        Init::new(0, 5, -5)
    } else if module.ends_with("conv1d") {
        Init::new(0, 8, -9)
    } else if last == "bias" || last == "e_score_correction_bias" {
        Init::new(0, 8, -12)
    } else {
        Init::new(0, 8, MATRIX_AMPLITUDE_LOG2 - 7)
    }
}

/// `2^e` as an f32 (`e` in -126..=127).
pub fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127).clamp(1, 254) as u32) << 23)
}

/// A float storage type of the generator (numbering shared with the kernels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatKind {
    /// IEEE single.
    F32 = 0,
    /// IEEE half.
    F16 = 1,
    /// bfloat16.
    Bf16 = 2,
}

impl FloatKind {
    /// The kind of a float dtype.
    pub fn of(d: DType) -> Option<FloatKind> {
        match d {
            DType::F32 => Some(FloatKind::F32),
            DType::F16 => Some(FloatKind::F16),
            DType::BF16 => Some(FloatKind::Bf16),
            _ => None,
        }
    }

    /// Bytes per value.
    pub fn size(self) -> usize {
        match self {
            FloatKind::F32 => 4,
            _ => 2,
        }
    }

    /// Stores `v` (round to nearest even) as little-endian bytes into `out[..size]`.
    pub fn store(self, v: f32, out: &mut [u8]) {
        match self {
            FloatKind::F32 => out[..4].copy_from_slice(&v.to_le_bytes()),
            FloatKind::F16 => out[..2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes()),
            FloatKind::Bf16 => out[..2].copy_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
        }
    }

    /// Bits of `±(1 + m/16) * 2^e` (`m` < 16; `e` >= -20, subnormal for f16 below -14).
    pub fn scale_bits(self, m: u32, e: i32, negative: bool) -> u32 {
        let m = m & 15;
        match self {
            FloatKind::F32 => ((negative as u32) << 31) | (((e + 127) as u32) << 23) | (m << 19),
            FloatKind::Bf16 => ((negative as u32) << 15) | (((e + 127) as u32) << 7) | (m << 3),
            FloatKind::F16 if e >= -14 => {
                ((negative as u32) << 15) | (((e + 15) as u32) << 10) | (m << 6)
            }
            FloatKind::F16 => ((negative as u32) << 15) | ((16 + m) << (e + 20).max(0)),
        }
    }
}

/// A packed block format as the generator writes it: every byte from the tensor's byte stream
/// (block `b` takes stream bytes `b*stream_bytes ..`), then a scale field and optionally a
/// min/bias field overwritten with `(1 + m/16) * 2^e` values drawn once per group of blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLayout {
    /// Bytes of one block.
    pub block_bytes: u32,
    /// Logical values per block.
    pub block_elems: u32,
    /// Stream bytes at the start of each block (the rest is scale fields).
    pub stream_bytes: u32,
    /// Consecutive blocks sharing one scale draw (MLX groups of 64 = 2 units of 32).
    pub group_blocks: u32,
    /// Byte offset of the scale.
    pub scale_offset: u32,
    /// Type of the scale.
    pub scale_kind: FloatKind,
    /// Log2 of the largest |decoded value| per unit of scale (rounded up).
    pub scale_mult_log2: i32,
    /// `(offset, kind, exponent shift from the scale, negative)` of a min/bias field.
    pub min: Option<(u32, FloatKind, i32, bool)>,
}

impl BlockLayout {
    /// The layout of a GGUF block format with a generator (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K).
    pub fn gguf(ty: GgmlType) -> Option<BlockLayout> {
        let f16 = FloatKind::F16;
        let block = |bytes, elems, scale_offset, mult, min| BlockLayout {
            block_bytes: bytes,
            block_elems: elems,
            stream_bytes: bytes,
            group_blocks: 1,
            scale_offset,
            scale_kind: f16,
            scale_mult_log2: mult,
            min,
        };
        Some(match ty {
            // w = d * (q - 8)
            GgmlType::Q4_0 => block(18, 32, 0, 3, None),
            // w = d * q + m, m = -8 d
            GgmlType::Q4_1 => block(20, 32, 0, 3, Some((2, f16, 3, true))),
            // w = d * q, q an int8
            GgmlType::Q8_0 => block(34, 32, 0, 7, None),
            // w = d * sc * q - dmin * mn, sc, mn < 64, q < 16; dmin = d
            GgmlType::Q4K => block(144, 256, 0, 10, Some((2, f16, 0, false))),
            // w = d * sc * (q - 32), sc an int8
            GgmlType::Q6K => block(210, 256, 208, 12, None),
            _ => return None,
        })
    }

    /// The exponent of the scale field so that decoded values stay within `2^amplitude_log2`.
    pub fn scale_exp(&self, amplitude_log2: i32) -> i32 {
        (amplitude_log2 - 1 - self.scale_mult_log2).max(-20)
    }

    /// Writes blocks `first ..` of a tensor into `out` (a whole number of blocks).
    pub fn write(&self, keys: TensorKeys, scale_exp: i32, first: u64, out: &mut [u8]) {
        let bb = self.block_bytes as usize;
        for (i, block) in out.chunks_exact_mut(bb).enumerate() {
            let b = first + i as u64;
            let base = b * self.stream_bytes as u64;
            for (k, byte) in block[..self.stream_bytes as usize].iter_mut().enumerate() {
                *byte = stream_byte(keys.bytes, base + k as u64);
            }
            let m = (rand64(keys.scales, b / self.group_blocks as u64) >> 60) as u32;
            let put = |block: &mut [u8], off: u32, kind: FloatKind, bits: u32| {
                let off = off as usize;
                block[off..off + kind.size()].copy_from_slice(&bits.to_le_bytes()[..kind.size()]);
            };
            put(
                block,
                self.scale_offset,
                self.scale_kind,
                self.scale_kind.scale_bits(m, scale_exp, false),
            );
            if let Some((off, kind, shift, neg)) = self.min {
                put(block, off, kind, kind.scale_bits(m, scale_exp + shift, neg));
            }
        }
    }
}

/// Writes values `first ..` of a dense tensor stored as `kind` into `out`.
pub fn write_dense(init: Init, keys: TensorKeys, kind: FloatKind, first: u64, out: &mut [u8]) {
    for (i, v) in out.chunks_exact_mut(kind.size()).enumerate() {
        kind.store(init.value(rand64(keys.bytes, first + i as u64)), v);
    }
}

/// The exponent of an MLX group scale for `bits`-bit values within `2^amplitude_log2`
/// (`w = s * q + bias`, `bias = -s * 2^(bits-1)`).
pub fn mlx_scale_exp(bits: u8, amplitude_log2: i32) -> i32 {
    (amplitude_log2 - bits as i32).max(-20)
}

/// A synthetic tensor's stored bytes generated on the host (small tensors and tests only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostTensor {
    /// Dense little-endian values, or GGUF blocks.
    Bytes(Vec<u8>),
    /// MLX affine: packed words, scales and biases (as the safetensors triplet stores them).
    MlxAffine {
        weight: Vec<u8>,
        scales: Vec<u8>,
        biases: Vec<u8>,
    },
}

/// Why a synthetic tensor cannot be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntheticError {
    /// The format has no generator.
    #[error("{tensor}: no synthetic generator for {format}")]
    Format { tensor: String, format: String },
    /// The shape is not a whole number of blocks or groups.
    #[error("{tensor}: {elements} values are not whole {block}-value blocks")]
    Shape {
        tensor: String,
        elements: u64,
        block: u64,
    },
}

/// The dense storage kind of a format (dense, or GGUF F32/F16/BF16).
pub fn dense_kind(format: WeightFormat) -> Option<FloatKind> {
    match format {
        WeightFormat::Dense(d) => FloatKind::of(d),
        WeightFormat::Gguf(GgmlType::F32) => Some(FloatKind::F32),
        WeightFormat::Gguf(GgmlType::F16) => Some(FloatKind::F16),
        WeightFormat::Gguf(GgmlType::BF16) => Some(FloatKind::Bf16),
        _ => None,
    }
}

/// Generates the stored bytes of `entry` under `seed` on the host.
pub fn host_tensor(entry: &TensorEntry, seed: u64) -> Result<HostTensor, SyntheticError> {
    let keys = keys(seed, &entry.name);
    let init = init_for(&entry.name);
    let n = entry.elements();
    let whole = |block: u64| {
        if n % block == 0 {
            Ok(n / block)
        } else {
            Err(SyntheticError::Shape {
                tensor: entry.name.clone(),
                elements: n,
                block,
            })
        }
    };
    if let Some(kind) = dense_kind(entry.format) {
        let mut out = vec![0u8; n as usize * kind.size()];
        write_dense(init, keys, kind, 0, &mut out);
        return Ok(HostTensor::Bytes(out));
    }
    match entry.format {
        WeightFormat::Gguf(ty) => {
            let layout = BlockLayout::gguf(ty).ok_or_else(|| SyntheticError::Format {
                tensor: entry.name.clone(),
                format: entry.format.to_string(),
            })?;
            let blocks = whole(layout.block_elems as u64)?;
            let mut out = vec![0u8; (blocks * layout.block_bytes as u64) as usize];
            layout.write(keys, layout.scale_exp(init.amplitude_log2()), 0, &mut out);
            Ok(HostTensor::Bytes(out))
        }
        WeightFormat::MlxAffine {
            bits,
            group_size,
            scales,
        } => {
            let kind = FloatKind::of(scales).ok_or_else(|| SyntheticError::Format {
                tensor: entry.name.clone(),
                format: entry.format.to_string(),
            })?;
            let groups = whole(group_size as u64)?;
            let words = whole(32)? * bits as u64;
            let weight = (0..words * 4).map(|o| stream_byte(keys.bytes, o)).collect();
            let e = mlx_scale_exp(bits, init.amplitude_log2());
            let (mut s, mut b) = (Vec::new(), Vec::new());
            for g in 0..groups {
                let m = (rand64(keys.scales, g) >> 60) as u32;
                let size = kind.size();
                s.extend_from_slice(&kind.scale_bits(m, e, false).to_le_bytes()[..size]);
                let bias = kind.scale_bits(m, e + bits as i32 - 1, true);
                b.extend_from_slice(&bias.to_le_bytes()[..size]);
            }
            Ok(HostTensor::MlxAffine {
                weight,
                scales: s,
                biases: b,
            })
        }
        other => Err(SyntheticError::Format {
            tensor: entry.name.clone(),
            format: other.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mlx_affine::{dequantize, GroupParams, QuantSpec};

    fn entry(name: &str, format: WeightFormat, shape: &[u64]) -> TensorEntry {
        TensorEntry {
            name: name.into(),
            format,
            shape: shape.to_vec(),
        }
    }

    /// Decodes a host tensor with the crate's reference dequantizers.
    fn decode(e: &TensorEntry, t: &HostTensor) -> Vec<f32> {
        let n = e.elements() as usize;
        match (e.format, t) {
            (WeightFormat::Dense(d), HostTensor::Bytes(b)) => {
                let k = FloatKind::of(d).unwrap();
                b.chunks_exact(k.size())
                    .map(|c| match k {
                        FloatKind::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                        FloatKind::F16 => half::f16::from_le_bytes([c[0], c[1]]).to_f32(),
                        FloatKind::Bf16 => half::bf16::from_le_bytes([c[0], c[1]]).to_f32(),
                    })
                    .collect()
            }
            (WeightFormat::Gguf(ty), HostTensor::Bytes(b)) => {
                crate::gguf::dequantize(ty, b, n).unwrap()
            }
            (
                WeightFormat::MlxAffine {
                    bits,
                    group_size,
                    scales,
                },
                HostTensor::MlxAffine {
                    weight,
                    scales: s,
                    biases,
                },
            ) => {
                let cols = *e.shape.last().unwrap() as usize;
                let words: Vec<u32> = weight
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                let spec = QuantSpec::new(bits as u64, group_size as u64).unwrap();
                dequantize(
                    spec,
                    cols,
                    &words,
                    GroupParams::new("scales", scales, s).unwrap(),
                    GroupParams::new("biases", scales, biases).unwrap(),
                    DType::F32,
                )
                .unwrap()
            }
            _ => panic!("mismatched host tensor"),
        }
    }

    fn formats() -> Vec<WeightFormat> {
        let mut v = vec![
            WeightFormat::Dense(DType::F32),
            WeightFormat::Dense(DType::F16),
            WeightFormat::Dense(DType::BF16),
        ];
        for t in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q8_0,
            GgmlType::Q4K,
            GgmlType::Q6K,
        ] {
            v.push(WeightFormat::Gguf(t));
        }
        for (bits, g, s) in [
            (4, 64, DType::BF16),
            (3, 32, DType::F16),
            (6, 128, DType::F32),
            (8, 64, DType::BF16),
        ] {
            v.push(WeightFormat::MlxAffine {
                bits,
                group_size: g,
                scales: s,
            });
        }
        v
    }

    #[test]
    fn every_format_decodes_to_small_finite_varied_values() {
        let bound = pow2(MATRIX_AMPLITUDE_LOG2);
        for f in formats() {
            let e = entry("model.layers.3.mlp.down_proj.weight", f, &[4, 512]);
            let t = host_tensor(&e, 7).unwrap();
            let w = decode(&e, &t);
            assert_eq!(w.len(), 2048, "{f}");
            assert!(w.iter().all(|v| v.is_finite() && v.abs() <= bound), "{f}");
            let rms = (w.iter().map(|v| v * v).sum::<f32>() / w.len() as f32).sqrt();
            assert!(rms > bound / 16.0, "{f}: rms {rms} (values too small)");
            let distinct: std::collections::BTreeSet<u32> = w.iter().map(|v| v.to_bits()).collect();
            assert!(
                distinct.len() > 8,
                "{f}: {} distinct values",
                distinct.len()
            );
        }
    }

    #[test]
    fn gains_are_near_one_and_mamba_parameters_bounded() {
        let gain = entry(
            "backbone.layers.0.norm.weight",
            WeightFormat::Dense(DType::BF16),
            &[256],
        );
        let w = decode(&gain, &host_tensor(&gain, 1).unwrap());
        assert!(w.iter().all(|v| (0.87..=1.125).contains(v)), "{w:?}");
        let a = entry(
            "backbone.layers.0.mixer.A_log",
            WeightFormat::Dense(DType::F32),
            &[64],
        );
        let w = decode(&a, &host_tensor(&a, 1).unwrap());
        assert!(w.iter().all(|v| v.abs() <= 0.5));
        assert!(w.iter().any(|v| *v < -0.1) && w.iter().any(|v| *v > 0.1));
    }

    #[test]
    fn values_are_exact_in_every_float_type() {
        // The same draws stored as f32, f16 and bf16 decode to identical values.
        let name = "model.layers.0.self_attn.q_proj.weight";
        let dec = |d| {
            let e = entry(name, WeightFormat::Dense(d), &[3, 64]);
            decode(&e, &host_tensor(&e, 5).unwrap())
        };
        assert_eq!(dec(DType::F32), dec(DType::F16));
        assert_eq!(dec(DType::F32), dec(DType::BF16));
        // Scales: (1 + m/16) 2^e read back exactly, f16 subnormals included.
        for e in [-20, -17, -15, -14, -9, 0, 3] {
            for m in [0, 5, 15] {
                let want = (1.0 + m as f64 / 16.0) * 2f64.powi(e);
                let h = FloatKind::F16.scale_bits(m, e, false) as u16;
                assert_eq!(half::f16::from_bits(h).to_f64(), want, "f16 m={m} e={e}");
                let b = FloatKind::Bf16.scale_bits(m, e, true) as u16;
                assert_eq!(half::bf16::from_bits(b).to_f64(), -want);
                let f = FloatKind::F32.scale_bits(m, e, false);
                assert_eq!(f32::from_bits(f) as f64, want);
            }
        }
    }

    #[test]
    fn streams_depend_on_seed_name_and_index_only() {
        let e = entry("a.weight", WeightFormat::Gguf(GgmlType::Q4_0), &[2, 64]);
        let t = host_tensor(&e, 9).unwrap();
        assert_eq!(t, host_tensor(&e, 9).unwrap(), "deterministic");
        assert_ne!(t, host_tensor(&e, 10).unwrap(), "seed changes the bytes");
        let other = entry("b.weight", e.format, &e.shape);
        assert_ne!(t, host_tensor(&other, 9).unwrap(), "name changes the bytes");
        // Counter-based: a block generated alone equals the same block of the whole tensor.
        let HostTensor::Bytes(all) = t else { panic!() };
        let layout = BlockLayout::gguf(GgmlType::Q4_0).unwrap();
        let mut third = vec![0u8; 18];
        let exp = layout.scale_exp(MATRIX_AMPLITUDE_LOG2);
        layout.write(keys(9, "a.weight"), exp, 2, &mut third);
        assert_eq!(&all[36..54], &third[..]);
        // Planted control: a generator that ignores the block index repeats block 0.
        let mut wrong = vec![0u8; 18];
        layout.write(keys(9, "a.weight"), exp, 0, &mut wrong);
        assert_ne!(wrong, third);
    }

    #[test]
    fn known_values_pin_the_hash() {
        // Shared with the CUDA kernels (tf-cuda's synthetic test pins the same numbers).
        assert_eq!(name_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(name_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(mix64(0), 0);
        assert_eq!(rand64(0, 0), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn unsupported_formats_and_partial_blocks_are_named() {
        let e = entry("x.weight", WeightFormat::Gguf(GgmlType::Q5_0), &[1, 32]);
        assert!(matches!(
            host_tensor(&e, 0),
            Err(SyntheticError::Format { .. })
        ));
        let e = entry("x.weight", WeightFormat::Gguf(GgmlType::Q4_0), &[1, 40]);
        assert!(matches!(
            host_tensor(&e, 0),
            Err(SyntheticError::Shape { .. })
        ));
    }

    #[test]
    fn synthetic_checkpoint_has_entries_seed_and_no_bytes() {
        use crate::checkpoint::{Checkpoint, CheckpointError, CheckpointKind};
        let q = WeightFormat::MlxAffine {
            bits: 4,
            group_size: 64,
            scales: DType::BF16,
        };
        let es = vec![
            entry("w.weight", q, &[8, 64]),
            entry("n.weight", WeightFormat::Dense(DType::BF16), &[64]),
        ];
        let cfg = serde_json::json!({"model_type": "llama"});
        let ck = Checkpoint::synthetic(cfg.clone(), es.clone(), 42).unwrap();
        assert!(ck.is_synthetic());
        assert_eq!(ck.synthetic_seed(), Some(42));
        assert_eq!(ck.kind(), CheckpointKind::MlxQuantized);
        assert_eq!(ck.entries(), &es[..]);
        assert_eq!(ck.entry("n.weight"), Some(&es[1]));
        assert!(ck.data("w.weight").is_none() && ck.data("n.weight").is_none());
        assert!(ck.dir().is_none() && ck.gguf().is_none());
        assert_eq!(ck.config(), &cfg);
        let gguf = vec![entry(
            "w.weight",
            WeightFormat::Gguf(GgmlType::Q8_0),
            &[2, 32],
        )];
        let ck = Checkpoint::synthetic(cfg.clone(), gguf, 1).unwrap();
        assert_eq!(ck.kind(), CheckpointKind::Gguf);
        let dup = vec![es[0].clone(), es[0].clone()];
        assert!(matches!(
            Checkpoint::synthetic(cfg, dup, 1),
            Err(CheckpointError::DuplicateName { .. })
        ));
    }
}
