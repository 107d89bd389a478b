//! Bit-for-bit equality with `mx.dequantize` (mlx 0.32.4, CPU) for every bits x group size x
//! scale dtype, from vectors written by scripts/gen_mlx_vectors.py.

use half::{bf16, f16};
use std::path::Path;
use tf_formats::mlx_affine::{
    dequantize, logical_entries, round_to, unpack_value, words_from_le_bytes, GroupParams,
    QuantSpec, QuantizationConfig,
};
use tf_formats::safetensors::{SafetensorsCheckpoint, TensorView};
use tf_formats::{DType, WeightFormat};

const BITS: [u8; 6] = [2, 3, 4, 5, 6, 8];
const GROUPS: [u32; 3] = [32, 64, 128];
const DTYPES: [(&str, DType); 3] = [
    ("bf16", DType::BF16),
    ("f16", DType::F16),
    ("f32", DType::F32),
];

fn vectors() -> SafetensorsCheckpoint {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mlx/vectors.safetensors");
    SafetensorsCheckpoint::open(&path).expect("open vectors")
}

/// The bit patterns of a tensor's float values (16- or 32-bit), widened to u32.
fn bit_patterns(v: &TensorView<'_>) -> Vec<u32> {
    match v.dtype {
        DType::F32 => words_from_le_bytes(v.data).unwrap(),
        DType::BF16 | DType::F16 => v
            .data
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as u32)
            .collect(),
        other => panic!("unexpected dtype {other}"),
    }
}

/// Bit patterns of our f32 results in `dtype` (each value must be exactly representable).
fn our_patterns(values: &[f32], dtype: DType) -> Vec<u32> {
    values
        .iter()
        .map(|&x| match dtype {
            DType::BF16 => {
                assert_eq!(bf16::from_f32(x).to_f32().to_bits(), x.to_bits());
                bf16::from_f32(x).to_bits() as u32
            }
            DType::F16 => {
                assert_eq!(f16::from_f32(x).to_f32().to_bits(), x.to_bits());
                f16::from_f32(x).to_bits() as u32
            }
            _ => x.to_bits(),
        })
        .collect()
}

struct Case<'a> {
    spec: QuantSpec,
    cols: usize,
    packed: Vec<u32>,
    scales: GroupParams<'a>,
    biases: GroupParams<'a>,
}

fn case<'a>(ck: &'a SafetensorsCheckpoint, name: &str, bits: u8, gs: u32) -> Case<'a> {
    let w = ck.tensor(&format!("{name}.weight")).unwrap();
    let s = ck.tensor(&format!("{name}.scales")).unwrap();
    let b = ck.tensor(&format!("{name}.biases")).unwrap();
    assert_eq!(w.dtype, DType::U32);
    let spec = QuantSpec::new(bits as u64, gs as u64).unwrap();
    let cols = spec.logical_cols(w.shape[1]).unwrap() as usize;
    assert_eq!(s.shape, &[w.shape[0], cols as u64 / gs as u64]);
    Case {
        spec,
        cols,
        packed: words_from_le_bytes(w.data).unwrap(),
        scales: GroupParams::new("scales", s.dtype, s.data).unwrap(),
        biases: GroupParams::new("biases", b.dtype, b.data).unwrap(),
    }
}

/// Counts elements where `ours` differs from mx.dequantize's bits.
fn mismatches(ours: &[u32], theirs: &[u32]) -> usize {
    assert_eq!(ours.len(), theirs.len());
    ours.iter().zip(theirs).filter(|(a, b)| a != b).count()
}

#[test]
fn dequantize_matches_mlx_bit_for_bit() {
    let ck = vectors();
    let mut cases = 0;
    for bits in BITS {
        for gs in GROUPS {
            for (dname, dtype) in DTYPES {
                let name = format!("b{bits}_g{gs}_{dname}");
                let c = case(&ck, &name, bits, gs);
                assert_eq!(c.scales.dtype(), dtype, "{name}");
                let expected = ck.tensor(&format!("{name}.dequant")).unwrap();
                assert_eq!(expected.dtype, dtype);
                let ours =
                    dequantize(c.spec, c.cols, &c.packed, c.scales, c.biases, dtype).unwrap();
                let bad = mismatches(&our_patterns(&ours, dtype), &bit_patterns(&expected));
                assert_eq!(
                    bad,
                    0,
                    "{name}: {bad} of {} elements differ from mx.dequantize",
                    ours.len()
                );
                cases += 1;
            }
        }
    }
    assert_eq!(cases, 54);
}

#[test]
fn output_dtype_casts_match_mlx() {
    let ck = vectors();
    let mut cases = 0;
    for bits in [3u8, 4] {
        for (dname, _) in DTYPES {
            for (oname, odtype) in DTYPES {
                let Some(expected) = ck.tensor(&format!("b{bits}_g64_{dname}.dequant_{oname}"))
                else {
                    continue;
                };
                let c = case(&ck, &format!("b{bits}_g64_{dname}"), bits, 64);
                let ours =
                    dequantize(c.spec, c.cols, &c.packed, c.scales, c.biases, odtype).unwrap();
                let bad = mismatches(&our_patterns(&ours, odtype), &bit_patterns(&expected));
                assert_eq!(bad, 0, "b{bits}_g64_{dname} -> {oname}");
                cases += 1;
            }
        }
    }
    assert_eq!(cases, 12);
}

/// Planted control: one rounding of an exact `scale*q + bias` (an f32/f64 fma rounded once
/// to the scale dtype) must NOT match the bf16 vectors, proving they discriminate.
#[test]
fn single_rounding_variant_does_not_match_bf16_vectors() {
    let ck = vectors();
    let (mut total, mut bad_total) = (0usize, 0usize);
    for bits in BITS {
        for gs in GROUPS {
            let name = format!("b{bits}_g{gs}_bf16");
            let c = case(&ck, &name, bits, gs);
            let rows = c.packed.len() / c.spec.packed_cols(c.cols as u64).unwrap() as usize;
            let words = c.packed.len() / rows;
            let mut ours = Vec::new();
            for r in 0..rows {
                for j in 0..c.cols {
                    let q = unpack_value(bits, &c.packed[r * words..(r + 1) * words], j).unwrap();
                    let g = r * (c.cols / gs as usize) + j / gs as usize;
                    let (s, b) = (
                        c.scales.get(g).unwrap() as f64,
                        c.biases.get(g).unwrap() as f64,
                    );
                    ours.push(round_to(DType::BF16, s.mul_add(q as f64, b) as f32));
                }
            }
            let expected = bit_patterns(&ck.tensor(&format!("{name}.dequant")).unwrap());
            let bad = mismatches(&our_patterns(&ours, DType::BF16), &expected);
            assert!(
                bad > 0,
                "{name}: the single-rounding variant matched every element"
            );
            total += ours.len();
            bad_total += bad;
        }
    }
    eprintln!("single-rounding variant: {bad_total} of {total} bf16 elements differ");
    // A large share differs, not a stray element.
    assert!(
        bad_total * 20 > total,
        "only {bad_total} of {total} elements differ"
    );
}

/// Planted control: reading the bit stream most-significant-first must not match.
#[test]
fn wrong_bit_order_does_not_match() {
    let ck = vectors();
    for bits in [4u8, 3] {
        let c = case(&ck, &format!("b{bits}_g64_f32"), bits, 64);
        let mut flipped = c.packed.clone();
        for w in flipped.iter_mut() {
            *w = w.reverse_bits();
        }
        let good = dequantize(c.spec, c.cols, &c.packed, c.scales, c.biases, DType::F32).unwrap();
        let bad = dequantize(c.spec, c.cols, &flipped, c.scales, c.biases, DType::F32).unwrap();
        let expected = bit_patterns(&ck.tensor(&format!("b{bits}_g64_f32.dequant")).unwrap());
        assert_eq!(mismatches(&our_patterns(&good, DType::F32), &expected), 0);
        assert!(mismatches(&our_patterns(&bad, DType::F32), &expected) > c.cols);
    }
}

/// The whole vectors file as an MLX checkpoint: every case groups into one logical entry.
#[test]
fn logical_entries_group_the_vector_triplets() {
    let ck = vectors();
    let mut q = serde_json::Map::new();
    q.insert("bits".into(), 4.into());
    q.insert("group_size".into(), 64.into());
    for bits in BITS {
        for gs in GROUPS {
            for (dname, _) in DTYPES {
                q.insert(
                    format!("b{bits}_g{gs}_{dname}"),
                    serde_json::json!({"bits": bits, "group_size": gs}),
                );
            }
        }
    }
    let config = serde_json::json!({ "quantization": q });
    let qcfg = QuantizationConfig::from_config(&config).unwrap().unwrap();
    let entries = logical_entries(ck.infos(), Some(&qcfg)).unwrap();
    let quantized: Vec<_> = entries
        .iter()
        .filter(|e| matches!(e.format, WeightFormat::MlxAffine { .. }))
        .collect();
    assert_eq!(quantized.len(), 54);
    for e in &quantized {
        assert_eq!(e.shape, vec![8, 256], "{}", e.name);
    }
    let e = entries
        .iter()
        .find(|e| e.name == "b3_g128_f16.weight")
        .unwrap();
    assert_eq!(
        e.format,
        WeightFormat::MlxAffine {
            bits: 3,
            group_size: 128,
            scales: DType::F16
        }
    );
    // .dequant tensors stay dense; scales/biases are folded in.
    assert!(entries
        .iter()
        .any(|e| e.name == "b3_g128_f16.dequant" && e.format == WeightFormat::Dense(DType::F16)));
    assert!(!entries
        .iter()
        .any(|e| e.name.ends_with(".scales") || e.name.ends_with(".biases")));
    assert_eq!(entries.len(), ck.len() - 2 * 54);
}
